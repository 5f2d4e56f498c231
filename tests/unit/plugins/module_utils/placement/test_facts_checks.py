# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/facts_checks.py and the checked-parts memo of placement/facts.py: what is wrong, said once;
identical content checked once, and never a value of another type served from the memo."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import facts as placement_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import facts_checks
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import Note
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import h100_nvswitch


@pytest.fixture(autouse=True)
def cold_cache():
    placement.clear_cache()
    yield
    placement.clear_cache()


def test_fail_names_host_path_rule_and_value():
    with pytest.raises(placement.PlacementError, match=r"^host h: numa_topology\.gpus\[1\]\.index must be an integer "
                                                       r">= 0 or null, got 'x'$"):
        facts_checks.opt_int("h", "gpus[1].index", "x")


def test_checked_gpu_rows_duplicate_id_names_the_second():
    gpus = [{"id": "a"}, {"id": "a"}]
    with pytest.raises(placement.PlacementError, match=r"gpus\[1\]\.id: GPU id a appears twice"):
        facts_checks.checked_gpu_rows(gpus, "h", [])


def test_gpu_node_minus_one_is_unknown_with_a_warning():
    warnings = []
    assert facts_checks.gpu_node("h", "gpus[0].numa_node", -1, warnings, "g0") is None
    assert warnings == [Note("GPU g0 reports numa_node -1; NUMA node unknown", gpus=("g0",))]


def test_identical_topologies_are_checked_once(monkeypatch):
    calls = []
    real = placement_facts._read_nodes
    monkeypatch.setattr(placement_facts, "_read_nodes", lambda facts, host: calls.append(host) or real(facts, host))
    views = [placement_facts.read_host_facts(h100_nvswitch("h%d" % i)) for i in range(5)]
    assert calls == ["h0"]
    assert all(v.topology == views[0].topology for v in views)
    assert [v.host for v in views] == ["h0", "h1", "h2", "h3", "h4"]


@pytest.mark.parametrize("value", [False, True, 0.0, 1.0, "0"])
def test_memo_never_serves_a_value_of_another_type(value):
    # socket 0 and 1 are valid; False/True/0.0/1.0/"0" compare equal or look alike and must still be refused
    placement_facts.read_host_facts(h100_nvswitch("good"))
    bad = h100_nvswitch("bad")
    bad["numa_nodes"][0]["socket"] = value
    with pytest.raises(placement.PlacementError, match=r"host bad: numa_topology\.numa_nodes\[0\]\.socket must be"):
        placement_facts.read_host_facts(bad)


def test_memo_checks_str_subclasses_each_time_and_makes_them_plain():
    class Tagged(str):
        pass

    plain = placement_facts.read_host_facts(h100_nvswitch("a"))
    tagged = h100_nvswitch("b")
    tagged["numa_nodes"][0]["cpus"] = Tagged(tagged["numa_nodes"][0]["cpus"])
    assert placement_facts._parts_key(tagged, tuple(g.id for g in plain.gpus)) is None
    view = placement_facts.read_host_facts(tagged)
    assert view.topology == plain.topology
    assert view.topology.nodes[0].cpus.__class__ is str


def test_memo_errors_name_each_host():
    facts = h100_nvswitch("first")
    facts["links"][facts["gpus"][0]["id"]][facts["gpus"][1]["id"]] = "NVX"
    for host in ("first", "second"):
        with pytest.raises(placement.PlacementError, match="host %s: .*unknown link class 'NVX'" % host):
            placement_facts.read_host_facts(copy.deepcopy(facts), host)
