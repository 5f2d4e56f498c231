# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/host.py: the plan of one host, its memoised template, and a host named in every failure."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import facts as placement_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host as placement_host
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import options as placement_options
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import template as placement_template
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import h100_nvswitch


@pytest.fixture(autouse=True)
def cold_cache():
    placement.clear_cache()
    yield
    placement.clear_cache()


def test_plan_host_view_names_the_host_of_an_unexpected_failure(monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(placement_template, "assign_cpus", broken)
    view = placement_facts.read_host_facts(h100_nvswitch("gpu-x"))
    with pytest.raises(placement.PlacementError, match=r"^host gpu-x: the planner failed on this host "
                                                       r"\(ZeroDivisionError: 'division by zero'\)") as caught:
        placement_host.plan_host_view(view, placement_options.validate_options({"tp_size": 2}))
    assert caught.value.host == "gpu-x"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_identical_hosts_share_one_template_but_keep_their_identities():
    opts = placement_options.validate_options({"tp_size": 4})
    a = placement_host.plan_host_validated(h100_nvswitch("a"), opts)
    b = placement_host.plan_host_validated(h100_nvswitch("b"), opts)
    assert placement.cache_size() == 1
    assert (a["host"], b["host"]) == ("a", "b")
    assert a["groups"] == b["groups"]  # same bus ids and UUIDs in this builder
    assert a["groups"][0]["gpus"] is not b["groups"][0]["gpus"]  # every container new


def test_plan_is_made_of_new_containers_each_time():
    facts = h100_nvswitch()
    first = placement.plan_host(facts, tp_size=2)
    first["groups"][0]["numa_nodes"].append(99)
    first["groups"][0]["binding"]["workers"].clear()
    assert placement.plan_host(facts, tp_size=2)["groups"][0]["numa_nodes"] == [0]
    assert placement.plan_host(facts, tp_size=2)["groups"][0]["binding"]["workers"]


def test_gpu_entries_written_by_zip_hold_the_fields_in_the_plan_order():
    # instantiate builds a plan's GPU entries by dict(zip(_GPU_FIELDS, gpu)): Gpu's fields must be those, in that order
    assert placement_facts.Gpu._fields == placement_host._GPU_FIELDS == ("id", "pci_bus_id", "index", "uuid", "name")
    opts = placement_options.validate_options({"tp_size": 2})
    facts = h100_nvswitch("a")
    plan = placement_host.plan_host_validated(facts, opts)
    by_id = dict((g["id"], g) for g in facts["gpus"])
    for group in plan["groups"]:
        for entry in group["gpus"]:
            assert list(entry) == ["id", "pci_bus_id", "index", "uuid", "name"]
            assert entry == dict((k, by_id[entry["id"]][k]) for k in entry)
        assert [w["gpu_index"] for w in group["binding"]["workers"]] == group["gpu_indices"]
        assert group["gpu_indices"] == [i for stage in group["stages"] for i in stage["gpu_indices"]]
        assert group["gpu_indices"] is not group["stages"][0]["gpu_indices"]
