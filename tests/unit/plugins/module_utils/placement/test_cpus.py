# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/cpus.py: the CPUs of each instance (rule 5), reserved cores, SMT siblings known or assumed, SocketKey."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import (
    h100_nvswitch,
    make_facts,
    ndv4_like,
)


# ---------------------------------------------------------------- CPUs


def test_plan_host_reserved_cpus_first_cores_of_each_socket_with_siblings():
    plan = placement.plan_host(h100_nvswitch(), tp_size=4, reserved_cpus_per_socket=2)
    assert [g["cpus"] for g in plan["groups"]] == ["2-47,98-143", "50-95,146-191"]


def test_plan_host_reserved_cpus_without_smt_are_first_cpus():
    plan = placement.plan_host(ndv4_like(), tp_size=2, reserved_cpus_per_socket=1)
    # socket 0 = nodes 0,1 (CPUs 0-47): CPU 0 reserved; socket 1 = nodes 2,3: CPU 48
    assert [g["cpus"] for g in plan["groups"]] == ["24-47", "1-23", "72-95", "49-71"]


def test_plan_host_cpus_whole_nodes_only_when_the_instance_owns_its_nodes_cpus():
    # The roles bind by node (numactl --cpunodebind) only when this is true.
    whole = placement.plan_host(h100_nvswitch(), tp_size=4)
    assert [(g["cpus_shared_node"], g["cpus_whole_nodes"]) for g in whole["groups"]] == [(False, True)] * 2
    reserved = placement.plan_host(h100_nvswitch(), tp_size=4, reserved_cpus_per_socket=2)
    assert [g["cpus_whole_nodes"] for g in reserved["groups"]] == [False, False]
    shared = placement.plan_host(h100_nvswitch(), tp_size=2)
    assert [(g["cpus_shared_node"], g["cpus_whole_nodes"]) for g in shared["groups"]] == [(True, False)] * 4


def test_plan_host_reserving_a_whole_node_is_an_error():
    with pytest.raises(placement.PlacementError, match="leaves no CPUs on NUMA node"):
        placement.plan_host(ndv4_like(), tp_size=2, reserved_cpus_per_socket=30)


def test_plan_host_shared_node_cpus_disjoint_and_smt_siblings_together():
    plan = placement.plan_host(h100_nvswitch(), tp_size=1)
    sets = [set(parse_cpulist(g["cpus"])) for g in plan["groups"]]
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            assert not a & b
        for cpu in a:
            sibling = cpu + 96 if cpu < 96 else cpu - 96
            assert sibling in a
    assert all(g["cpus_shared_node"] for g in plan["groups"])
    assert plan["groups"][0]["cpus"] == "0-11,96-107"


def test_plan_host_shared_node_without_smt_info_splits_contiguous_runs():
    plan = placement.plan_host(ndv4_like(), tp_size=1)
    assert [g["cpus"] for g in plan["groups"][:2]] == ["24-35", "36-47"]


def _without_smt(facts):
    facts["smt_siblings"] = []
    return facts


def test_plan_host_smt_unknown_two_halves_split_by_assumed_sibling_pairs_with_warning():
    plan = placement.plan_host(_without_smt(h100_nvswitch()), tp_size=1)
    assert [g["cpus"] for g in plan["groups"][:2]] == ["0-11,96-107", "12-23,108-119"]
    assert plan["groups"] == placement.plan_host(h100_nvswitch(), tp_size=1)["groups"]
    assert ("SMT siblings unknown (smt_siblings is empty): NUMA node 0's CPUs are taken as sibling pairs n and n+96, "
            "the usual Linux numbering, to split it between the 4 instances sharing it by core") in plan["warnings"]


def test_plan_host_smt_unknown_reserves_the_assumed_sibling_too():
    plan = placement.plan_host(_without_smt(h100_nvswitch()), tp_size=4, reserved_cpus_per_socket=1)
    assert [g["cpus"] for g in plan["groups"]] == ["1-47,97-143", "49-95,145-191"]
    assert any("to reserve whole cores (reserved_cpus_per_socket)" in w for w in plan["warnings"])


def test_plan_host_smt_unknown_assumption_silent_where_nothing_is_split():
    plan = placement.plan_host(_without_smt(h100_nvswitch()), tp_size=4)
    assert not any("SMT" in w for w in plan["warnings"])


@pytest.mark.parametrize("nodes, expected", [
    ({0: (0, "0-31")}, {0: 16}),  # one node: half of all CPUs
    ({0: (0, "0-47,96-143"), 1: (1, "48-95,144-191")}, {0: 96, 1: 96}),
    ({0: (0, "0-23"), 1: (0, "24-47"), 2: (1, "48-71"), 3: (1, "72-95")}, {}),  # one run each, of a larger host
    ({0: (0, "0-63,128-191"), 1: (1, "64-127,192-254")}, {0: 128}),  # 127 CPUs: no halves
    ({0: (0, "0-3,8-10")}, {}),
    ({0: (0, "0-1,4,6")}, {}),  # offsets differ
    ({0: (0, "")}, {}),
])
def test_assumed_smt_offsets(nodes, expected):
    from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import assumed_smt_offsets

    node_cpus = dict((n, tuple(parse_cpulist(cpus))) for n, (_s, cpus) in nodes.items())
    assert assumed_smt_offsets(node_cpus) == expected


def test_plan_host_unshared_node_not_marked_shared():
    plan = placement.plan_host(h100_nvswitch(), tp_size=4)
    assert [g["cpus_shared_node"] for g in plan["groups"]] == [False, False]


def test_plan_host_too_few_cpus_overlap_with_warning():
    facts = make_facts("x", {0: (0, "0-1")}, [0, 0, 0, 0], lambda i, j: "NV4")
    plan = placement.plan_host(facts, tp_size=1)
    assert [g["cpus"] for g in plan["groups"]] == ["0", "1", "0", "1"]
    assert any("overlap" in w for w in plan["warnings"])


# ---------------------------------------------------------------- SocketKey


def test_socket_key_known_socket_or_the_node_alone():
    from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import SocketKey

    assert SocketKey.of(1, {1: 0}) == SocketKey(0, None) and SocketKey.of(1, {1: 0}).known
    alone = SocketKey.of(3, {1: 0})
    assert alone == SocketKey(None, 3) and not alone.known
    keys = [SocketKey(None, 0), SocketKey(1, None), SocketKey(0, None)]
    assert sorted(keys, key=SocketKey.order) == [SocketKey(0, None), SocketKey(1, None), SocketKey(None, 0)]
