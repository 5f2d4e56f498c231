# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement rules, one behaviour per test, on hand-built real machines and the recorded fixtures."""

from __future__ import annotations

import copy
import glob
import json
import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import (
    a6000_nvlink_pairs,
    dgx2_like,
    h100_nvswitch,
    make_facts,
    mi50_nps4,
    ndv4_like,
    rtx3090_numa_na,
    rtx4090_pix_quads,
)

FIXTURES = os.path.join(fixture_paths.FIXTURES, "machines")


def indices(plan):
    return [g["gpu_indices"] for g in plan["groups"]]


# ---------------------------------------------------------------- groups


def test_plan_host_h100_tp4_one_group_per_socket():
    plan = placement.plan_host(h100_nvswitch(), tp_size=4)
    assert indices(plan) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g["numa_nodes"] for g in plan["groups"]] == [[0], [1]]
    assert [g["cpus"] for g in plan["groups"]] == ["0-47,96-143", "48-95,144-191"]
    assert all(g["memory_policy"] == "bind" and g["worst_link"] == "NV18" for g in plan["groups"])
    assert plan["unused"] == [] and plan["warnings"] == []


def test_plan_host_rtx4090_tp4_keeps_pix_quads():
    plan = placement.plan_host(rtx4090_pix_quads(), tp_size=4)
    assert indices(plan) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g["worst_link"] for g in plan["groups"]] == ["PIX", "PIX"]


def test_plan_host_a6000_tp2_picks_nvlink_pairs_not_node_pairs():
    plan = placement.plan_host(a6000_nvlink_pairs(), tp_size=2)
    assert indices(plan) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(g["worst_link"] == "NV4" for g in plan["groups"])


def test_plan_host_a6000_tp4_node_local_quads_with_node_links():
    plan = placement.plan_host(a6000_nvlink_pairs(), tp_size=4)
    assert indices(plan) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g["worst_link"] for g in plan["groups"]] == ["NODE", "NODE"]


def test_plan_host_ndv4_tp2_groups_by_numa_node_not_index_arithmetic():
    plan = placement.plan_host(ndv4_like(), tp_size=2)
    assert indices(plan) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # GPUs 0,1 sit on node 1 and 2,3 on node 0: "index // 2" would bind the wrong node
    assert [g["numa_nodes"] for g in plan["groups"]] == [[1], [0], [3], [2]]
    assert [g["cpus"] for g in plan["groups"]] == ["24-47", "0-23", "72-95", "48-71"]


def test_plan_host_ndv4_tp4_spans_two_nodes_of_one_socket_interleaved():
    plan = placement.plan_host(ndv4_like(), tp_size=4)
    assert indices(plan) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g["numa_nodes"] for g in plan["groups"]] == [[0, 1], [2, 3]]
    assert [g["sockets"] for g in plan["groups"]] == [[0], [1]]
    assert all(g["memory_policy"] == "interleave" for g in plan["groups"])
    assert "memory interleaved" in plan["groups"][0]["reason"]


def test_plan_host_nps4_tp2_stays_inside_numa_nodes():
    plan = placement.plan_host(mi50_nps4(), tp_size=2)
    assert [g["numa_nodes"] for g in plan["groups"]] == [[0], [1], [4], [5]]
    assert all(g["memory_policy"] == "bind" for g in plan["groups"])


def test_plan_host_nps4_tp4_spans_nodes_of_one_socket_for_more_groups():
    plan = placement.plan_host(mi50_nps4(), tp_size=4)
    assert indices(plan) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g["numa_nodes"] for g in plan["groups"]] == [[0, 1], [4, 5]]
    assert [g["cpus"] for g in plan["groups"]] == ["0-31", "64-95"]


def test_plan_host_node_local_beats_better_links_across_nodes():
    # two nodes of one socket; GPUs 0,2 on node 0 and 1,3 on node 1; NVLink only across nodes
    facts = make_facts(
        "x", {0: (0, "0-3"), 1: (0, "4-7")}, [0, 1, 0, 1],
        lambda i, j: "NV8" if (i + j) % 2 else "PHB",
    )
    plan = placement.plan_host(facts, tp_size=2)
    assert indices(plan) == [[0, 2], [1, 3]]
    assert [g["worst_link"] for g in plan["groups"]] == ["PHB", "PHB"]


def test_plan_host_maximises_the_worst_link_then_the_sum():
    # four GPUs on one node; pairs {0,1} and {2,3} are NV4, {0,2} NV8, others PIX
    table = {(0, 1): "NV4", (2, 3): "NV4", (0, 2): "NV8"}
    facts = make_facts("x", {0: (0, "0-7")}, [0, 0, 0, 0], lambda i, j: table.get((min(i, j), max(i, j)), "PIX"))
    plan = placement.plan_host(facts, tp_size=2)
    # {0,2}+{1,3} has worst PIX; {0,1}+{2,3} keeps NV4 in both groups
    assert indices(plan) == [[0, 1], [2, 3]]


def test_plan_host_dgx2_tp8_one_group_per_socket():
    plan = placement.plan_host(dgx2_like(), tp_size=8)
    assert indices(plan) == [list(range(8)), list(range(8, 16))]


def test_plan_host_leftover_gpus_come_back_with_a_reason():
    facts = make_facts("x", {0: (0, "0-7"), 1: (1, "8-15")}, [0, 0, 0, 1, 1, 1], lambda i, j: "PIX" if i // 3 == j // 3 else "SYS")
    plan = placement.plan_host(facts, tp_size=2)
    assert len(plan["groups"]) == 2
    assert len(plan["unused"]) == 2
    assert all("no complete group of 2 GPUs" in u["reason"] for u in plan["unused"])


def test_plan_host_small_socket_gpus_unused_with_reason():
    facts = make_facts("x", {0: (0, "0-7"), 1: (1, "8-15")}, [0, 0, 0, 0, 1], lambda i, j: "SYS")
    plan = placement.plan_host(facts, tp_size=4)
    assert indices(plan) == [[0, 1, 2, 3]]
    assert plan["unused"] == [{"id": "0000:14:00.0", "index": 4, "reason": plan["unused"][0]["reason"]}]
    assert plan["unused"][0]["reason"] == "only 1 placeable GPU on socket 1, fewer than tp_size 4 (this GPU is on NUMA node 1)"


def test_small_socket_reason_where_the_socket_is_unknown():
    """A node whose socket the facts do not know stands as its own socket: the reason names the node."""
    facts = make_facts("x", {0: (None, "0-7"), 1: (None, "8-15")}, [0, 0, 0, 1, 1], lambda i, j: "SYS", sockets=False)
    plan = placement.plan_host(facts, tp_size=3)
    assert indices(plan) == [[0, 1, 2]]
    assert [u["reason"] for u in plan["unused"]] == [
        "only 2 placeable GPUs on NUMA node 1 (socket unknown), fewer than tp_size 3"] * 2


# ---------------------------------------------------------------- strict / span


def test_plan_host_strict_failure_names_host_and_problem():
    with pytest.raises(placement.PlacementError) as err:
        placement.plan_host(h100_nvswitch("gpu-a"), tp_size=8)
    text = str(err.value)
    assert text == ("host gpu-a: tp_size 8 does not fit on any socket (at most 4 placeable GPUs share one); "
                    "set gpufleet_allow_span: true (allow_span=true for the fleet_plan filter) to let a group span them")


def test_plan_host_allow_span_interleaves_over_both_sockets():
    plan = placement.plan_host(h100_nvswitch(), tp_size=8, allow_span=True)
    (group,) = plan["groups"]
    assert group["gpu_indices"] == list(range(8))
    assert group["numa_nodes"] == [0, 1] and group["sockets"] == [0, 1]
    assert group["memory_policy"] == "interleave"
    assert group["stages"][0]["socket"] is None
    assert "allow_span" in group["reason"] and "interleaved" in group["reason"]
    assert group["cpus"] == "0-191"


def test_plan_host_allow_span_ignored_when_tp_fits_a_socket():
    plan = placement.plan_host(h100_nvswitch(), tp_size=4, allow_span=True)
    assert [g["sockets"] for g in plan["groups"]] == [[0], [1]]


def test_plan_host_span_prefers_fewer_sockets():
    # 4 sockets x 2 GPUs, tp 4: each group should cover two sockets, not four
    nodes = dict((n, (n, "%d-%d" % (4 * n, 4 * n + 3))) for n in range(4))
    facts = make_facts("x", nodes, [0, 0, 1, 1, 2, 2, 3, 3], lambda i, j: "NV4" if i // 2 == j // 2 else "SYS")
    plan = placement.plan_host(facts, tp_size=4, allow_span=True)
    assert [len(g["sockets"]) for g in plan["groups"]] == [2, 2]


def test_plan_host_span_needs_enough_gpus():
    with pytest.raises(placement.PlacementError, match="exceeds the 8 placeable GPUs"):
        placement.plan_host(h100_nvswitch(), tp_size=16, allow_span=True)


# ---------------------------------------------------------------- unknowns


def test_plan_host_unknown_numa_node_gpu_is_unused_with_warning():
    plan = placement.plan_host(rtx3090_numa_na(), tp_size=1)
    assert indices(plan) == [[1]]
    assert plan["unused"][0]["index"] == 0
    assert "NUMA node unknown" in plan["unused"][0]["reason"]
    assert any("no known NUMA node" in w for w in plan["warnings"])


def test_plan_host_unknown_sockets_make_each_node_its_own_socket():
    facts = h100_nvswitch()
    facts["sockets"] = []
    for node in facts["numa_nodes"]:
        node["socket"] = None
    plan = placement.plan_host(facts, tp_size=4)
    assert indices(plan) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g["sockets"] for g in plan["groups"]] == [[], []]
    assert "socket unknown" in plan["groups"][0]["reason"]
    with pytest.raises(placement.PlacementError, match="does not fit on any NUMA node"):
        placement.plan_host(facts, tp_size=8)


def test_plan_host_missing_link_ranked_below_sys_with_warning():
    facts = rtx4090_pix_quads()
    del facts["links"]["0000:01:00.0"]["0000:02:00.0"]
    del facts["links"]["0000:02:00.0"]["0000:01:00.0"]
    plan = placement.plan_host(facts, tp_size=2)
    assert [0, 1] not in indices(plan)
    assert any("no link class" in w for w in plan["warnings"])


def test_plan_host_memory_only_node_is_never_a_home():
    # GPUs the facts put on a node without CPUs are placed on the nearest node with CPUs
    # of its socket; neither CPUs nor memory are bound to the memory-only node.
    facts = make_facts("x", {0: (0, "0-7"), 1: (0, "")}, [1, 1], lambda i, j: "NV4")
    plan = placement.plan_host(facts, tp_size=2)
    assert plan["groups"][0]["numa_nodes"] == [0]
    assert plan["groups"][0]["binding"] == {
        "mode": "process", "cpus": "0-7", "mems": [0], "policy": "bind", "by_node": True,
        "workers": [{"gpu_index": 0, "node": 0, "cpus": "0-7"}, {"gpu_index": 1, "node": 0, "cpus": "0-7"}]}
    assert ("GPU 0000:10:00.0 (index 0) is on NUMA node 1, which has no CPUs (memory only): placed on node 0, "
            "the nearest with CPUs; memory bound there, not to node 1") in plan["warnings"]


def test_plan_host_memory_only_node_home_by_slit_distance_or_none():
    facts = make_facts("x", {0: (0, "0-7"), 1: (0, "8-15"), 2: (0, "")}, [2, 2], lambda i, j: "NV4")
    facts["numa_nodes"][2]["distances"] = {"0": 40, "1": 20, "2": 10}
    assert placement.plan_host(facts, tp_size=2)["groups"][0]["numa_nodes"] == [1]
    # socket unknown, two nodes with CPUs, no distances: no home; the GPUs stay unused
    facts = make_facts("x", {0: (None, "0-7"), 1: (None, "8-15"), 2: (None, "")}, [2, 2, 0], lambda i, j: "NV4",
                       sockets=False)
    plan = placement.plan_host(facts, tp_size=1)
    assert [g["gpu_indices"] for g in plan["groups"]] == [[2]]
    assert [u["index"] for u in plan["unused"]] == [0, 1]
    assert "NUMA node 2 has no CPUs (memory only)" in plan["unused"][0]["reason"]


# ---------------------------------------------------------------- exclusion


def test_plan_host_exclude_by_uuid():
    facts = h100_nvswitch()
    plan = placement.plan_host(facts, tp_size=2, exclude_gpus=[facts["gpus"][1]["uuid"]])
    assert indices(plan) == [[0, 2], [4, 5], [6, 7]]
    assert {"id": "0000:19:00.0", "index": 1, "reason": "excluded by exclude_gpus"} in plan["unused"]


def test_plan_host_exclude_by_bus_id_in_nvml_form():
    plan = placement.plan_host(h100_nvswitch(), tp_size=4, exclude_gpus=["00000000:1C:00.0"])
    assert indices(plan) == [[0, 1, 2, 3]]
    assert [u["index"] for u in plan["unused"]] == [4, 5, 6, 7]


# ---------------------------------------------------------------- pipeline stages


def test_plan_host_pp2_dual_socket_one_instance_one_stage_per_socket():
    plan = placement.plan_host(h100_nvswitch(), tp_size=4, pp_size=2)
    (inst,) = plan["groups"]
    assert [st["gpu_indices"] for st in inst["stages"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [st["socket"] for st in inst["stages"]] == [0, 1]
    assert inst["gpu_indices"] == list(range(8))
    assert inst["numa_nodes"] == [0, 1] and inst["sockets"] == [0, 1]
    assert inst["memory_policy"] == "bind"
    assert inst["cpus"] == "0-191"
    assert "2 pipeline stages" in inst["reason"]


def test_plan_host_pp2_tp2_keeps_instances_on_one_node():
    plan = placement.plan_host(h100_nvswitch(), tp_size=2, pp_size=2)
    assert [[st["gpu_indices"] for st in g["stages"]] for g in plan["groups"]] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert [g["numa_nodes"] for g in plan["groups"]] == [[0], [1]]


def test_plan_host_pp_needs_enough_groups():
    with pytest.raises(placement.PlacementError, match="pp_size 4 x tp_size 4"):
        placement.plan_host(h100_nvswitch(), tp_size=4, pp_size=4)


def test_plan_host_odd_group_count_leaves_one_group_unused_for_pp2():
    facts = make_facts("x", {0: (0, "0-7"), 1: (1, "8-15")}, [0, 0, 1, 1, 1, 1], lambda i, j: "NV4")
    plan = placement.plan_host(facts, tp_size=2, pp_size=2)
    assert len(plan["groups"]) == 1
    assert len(plan["unused"]) == 2
    assert all("pp_size 2" in u["reason"] for u in plan["unused"])


def test_plan_host_max_instances_per_host():
    plan = placement.plan_host(h100_nvswitch(), tp_size=2, max_instances_per_host=3)
    assert indices(plan) == [[0, 1], [2, 3], [4, 5]]
    assert all("max_instances_per_host (3)" in u["reason"] for u in plan["unused"])


# ---------------------------------------------------------------- determinism, input checks


def test_plan_host_deterministic_and_independent_of_gpu_list_order():
    facts = ndv4_like()
    shuffled = copy.deepcopy(facts)
    shuffled["gpus"].reverse()
    placement.clear_cache()
    first = placement.plan_host(facts, tp_size=2)
    placement.clear_cache()
    assert placement.plan_host(shuffled, tp_size=2) == first
    assert placement.plan_host(facts, tp_size=2) == first


def test_plan_host_output_is_plain_json():
    plan = placement.plan_host(ndv4_like(), tp_size=4, pp_size=2, allow_span=True)
    assert json.loads(json.dumps(plan)) == plan


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: f.update(schema_version=2), "schema_version is 2"),
        (lambda f: f.pop("gpus"), "numa_topology.gpus must be a list, got None"),
        (lambda f: f["gpus"][0].pop("id"), "numa_topology.gpus\\[0\\].id must be a non-empty string"),
        (lambda f: f["gpus"][0].update(numa_node="0"), "numa_topology.gpus\\[0\\].numa_node must be an integer .*got '0'"),
        (lambda f: f["links"]["0000:18:00.0"].update({"0000:19:00.0": "NVX"}), "unknown link class 'NVX'"),
    ],
)
def test_plan_host_rejects_bad_facts_naming_host(mutate, message):
    facts = h100_nvswitch("gpu-z")
    mutate(facts)
    with pytest.raises(placement.PlacementError, match="host gpu-z: .*" + message):
        placement.plan_host(facts, tp_size=2)


def test_plan_host_no_gpus_is_an_error():
    facts = make_facts("cpu-only", {0: (0, "0-3")}, [], lambda i, j: "SYS")
    with pytest.raises(placement.PlacementError, match="cpu-only: the topology facts list no GPUs"):
        placement.plan_host(facts, tp_size=1)


# ---------------------------------------------------------------- recorded fixtures


def _fixture_dirs():
    return sorted(d for d in glob.glob(os.path.join(FIXTURES, "*")) if os.path.exists(os.path.join(d, "expected_plans.yml")))


@pytest.mark.parametrize("folder", _fixture_dirs(), ids=os.path.basename)
def test_plan_host_recorded_fixture_matches_expected_plans(folder):
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology

    facts = topology.facts_from_capture(os.path.join(folder, "capture.yml"))
    with open(os.path.join(folder, "expected_plans.yml")) as handle:
        expected = yaml.safe_load(handle)
    for case in expected["plans"]:
        options = dict(case["options"])
        if "error" in case:
            with pytest.raises(placement.PlacementError, match=case["error"]):
                placement.plan_host(facts, **options)
            continue
        plan = placement.plan_host(facts, **options)
        got = [
            {"gpus": [g["id"] for g in grp["gpus"]], "numa_nodes": grp["numa_nodes"], "cpus": grp["cpus"],
             "memory_policy": grp["memory_policy"], "worst_link": grp["worst_link"]}
            for grp in plan["groups"]
        ]
        assert got == case["groups"], options
        assert [u["id"] for u in plan["unused"]] == case.get("unused", []), options
        _check_binding_within_usable_cpus(plan, facts)


def _check_binding_within_usable_cpus(plan, facts):
    """No instance is bound to a CPU services may not use (numactl fails at start on one), nor by node
    when its nodes hold such CPUs."""
    usable = set()
    whole = {}
    for node in facts["numa_nodes"]:
        cpus = node["usable_cpus"] if node["usable_cpus"] is not None else node["cpus"]
        usable |= set(parse_cpulist(cpus or ""))
        whole[node["id"]] = node["usable_cpus"] is None or node["usable_cpus"] == node["cpus"]
    for grp in plan["groups"]:
        assert set(parse_cpulist(grp["binding"]["cpus"])) <= usable, grp["cpus"]
        if grp["binding"]["by_node"]:
            assert all(whole[n] for n in grp["binding"]["mems"]), grp["binding"]
