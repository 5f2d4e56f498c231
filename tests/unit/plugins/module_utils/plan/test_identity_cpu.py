# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Stable identity of CPU instances (docs/plan.md, "Stable identity"): a
deployed CPU instance whose NUMA nodes and CPUs are still usable is kept
as deployed; the recorded mi50_8gpu_nps4 (two sockets of four nodes)
replayed as a CPU host."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host, merge_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact, identity
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES


@pytest.fixture(scope="module")
def mi50():
    return facts_from_capture(os.path.join(MACHINES, "mi50_8gpu_nps4", "capture.yml"))


def fleet(facts, **variables):
    return {"cpu": dict({"ansible_facts": {"numa_topology": facts}, "gpufleet_device_class": "cpu"}, **variables)}


def deploy(hosts):
    return artifact.dump_artifact(merge_plan(fleet_plan_by_host(hosts), None, sorted(hosts), sorted(hosts))["plan"])


def without_node_cpus(facts, node):
    """The facts after the host's cpuset left node `node` no CPU."""
    facts = copy.deepcopy(facts)
    for entry in facts["numa_nodes"]:
        if entry["id"] == node:
            entry["usable_cpus"] = ""
    return facts


def test_a_rerun_keeps_every_cpu_instance_as_deployed(mi50):
    kept = deploy(fleet(mi50, gpufleet_tp_size=2))
    deployed = artifact.load_artifact(kept)["instances"]
    assert [i["numa_nodes"] for i in deployed] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert fleet_plan_by_host(fleet(mi50, gpufleet_tp_size=2), deployed=kept)["instances"] == deployed


def test_a_node_losing_its_cpus_moves_only_its_instance(mi50):
    kept = deploy(fleet(mi50, gpufleet_tp_size=2))
    deployed = dict((i["name"], i) for i in artifact.load_artifact(kept)["instances"])
    changed = fleet(without_node_cpus(mi50, 1), gpufleet_tp_size=2)
    positional = fleet_plan_by_host(changed)
    # without the kept plan, socket 0's instance moves to nodes 0,2 and every name after it shifts
    assert [(i["name"], i["numa_nodes"]) for i in positional["instances"]] == [
        ("vllm-0", [0, 2]), ("vllm-1", [4, 5]), ("vllm-2", [6, 7])]
    plan = fleet_plan_by_host(changed, deployed=kept)
    assert plan["instances"] == [deployed["vllm-1"], deployed["vllm-2"], deployed["vllm-3"]]
    left = sorted((w for w in plan["warnings"] if "left over" in w["text"]), key=lambda w: w["nodes"])
    assert [(w["host"], w["gpus"], w["nodes"]) for w in left] == [("cpu", [], [0]), ("cpu", [], [1])]
    assert [w["text"].split(":")[0] for w in left] == ["NUMA node 0 left over", "NUMA node 1 left over"]
    assert "beside the instances kept as deployed" in left[0]["text"]
    assert "none of its CPUs" in left[1]["text"]


def test_a_rank_whose_node_memory_changed_is_formed_again_with_todays_memory(mi50):
    """memory_mb sizes the KV cache (VLLM_CPU_KVCACHE_SPACE): a node whose memory changed, or a
    record edited by hand, forms the rank again; MemTotal's drift on a VM (a few MB) does not."""
    sized = copy.deepcopy(mi50)
    for node in sized["numa_nodes"]:
        node["memory_mb"] = 64000
    kept = deploy(fleet(sized))
    deployed = artifact.load_artifact(kept)["instances"]
    grown = copy.deepcopy(sized)
    grown["numa_nodes"][3]["memory_mb"] = 128000
    plan = fleet_plan_by_host(fleet(grown), deployed=kept)
    changed = [i for i in plan["instances"] if i not in deployed]
    assert [(i["name"], i["numa_nodes"], i["binding"]["ranks"][0]["memory_mb"]) for i in changed] == [
        ("vllm-3", [3], 128000)]
    drifted = copy.deepcopy(sized)
    drifted["numa_nodes"][3]["memory_mb"] = 63988
    assert fleet_plan_by_host(fleet(drifted), deployed=kept)["instances"] == deployed
    # The bound, 10% of today's memory: 64000 recorded stands on 71111 MB
    # (7111 <= 7111.1), not on 71112, nor on 58181 (5819 > 5818.1).
    for today, stands in ((71111, True), (71112, False), (58182, True), (58181, False)):
        node = copy.deepcopy(sized)
        node["numa_nodes"][3]["memory_mb"] = today
        assert (fleet_plan_by_host(fleet(node), deployed=kept)["instances"] == deployed) is stands, today
    # An edited record is not believed either: today's memory comes back.
    edited = artifact.load_artifact(kept)
    edited["instances"][0]["binding"]["ranks"][0]["memory_mb"] = 1
    plan = fleet_plan_by_host(fleet(sized), deployed=artifact.dump_artifact(edited))
    assert plan["instances"] == deployed


def test_a_cpu_instance_formed_again_takes_the_ordinal_of_its_nodes(mi50):
    kept = deploy(fleet(without_node_cpus(mi50, 2)))
    deployed = artifact.load_artifact(kept)["instances"]
    assert [(i["name"], i["numa_nodes"]) for i in deployed][2:4] == [("vllm-2", [3]), ("vllm-3", [4])]
    plan = fleet_plan_by_host(fleet(mi50), deployed=kept)
    names = dict((i["numa_nodes"][0], i["name"]) for i in plan["instances"])
    # the seven deployed keep their names; node 2's instance takes the lowest free ordinal
    assert [names[n] for n in (0, 1, 3, 4, 5, 6, 7)] == [i["name"] for i in deployed]
    assert names[2] == "vllm-7"


def test_a_changed_device_class_plans_the_host_afresh():
    facts = facts_from_capture(os.path.join(MACHINES, "mi300x_8gpu_xgmi", "capture.yml"))
    kept = deploy(fleet(facts))
    plan = fleet_plan_by_host({"cpu": {"ansible_facts": {"numa_topology": facts}, "gpufleet_tp_size": 4}},
                              deployed=kept)
    assert [(i["name"], i["device"]) for i in plan["instances"]] == [("vllm-0", "amd"), ("vllm-1", "amd")]


@pytest.mark.parametrize("wording", ["NUMA node %d left over: %s", "%s; node %d stays idle"])
def test_the_left_over_warnings_are_kept_by_their_nodes_whatever_their_words(wording):
    """cpu_rest reads a warning's nodes, never its text: a node a survivor now
    uses loses its warning, a node still left over keeps the fresh plan's
    (worded as it is) and gets no second one, a node without one gets one."""
    def warning(node, why):
        text = wording % ((node, why) if wording.startswith("NUMA") else (why, node))
        return {"host": "cpu", "text": text, "gpus": [], "nodes": [node]}

    facts = {"numa_nodes": [{"id": n, "cpus": "%d-%d" % (4 * n, 4 * n + 3)} for n in range(4)]}
    about_host = {"host": "cpu", "text": "SMT siblings unknown", "gpus": [], "nodes": []}
    fresh = identity.HostPart([{"numa_nodes": [1]}], [], [warning(0, "was over"), warning(2, "still over"),
                                                          about_host])
    part = identity.cpu_rest("cpu", [{"numa_nodes": [0]}], fresh, facts, {"tp_size": 1})
    assert part.instances == [{"numa_nodes": [1]}]
    assert [(w["host"], w["nodes"]) for w in part.warnings] == [("cpu", [2]), ("cpu", []), ("cpu", [3])]
    assert part.warnings[:2] == [warning(2, "still over"), about_host]
    assert part.warnings[2] == {"host": "cpu", "gpus": [], "nodes": [3], "text": (
        "NUMA node 3 left over: too few NUMA nodes beside the instances kept as deployed for another of tp_size 1")}
