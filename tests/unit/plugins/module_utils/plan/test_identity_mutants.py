# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plan/identity at its edges: MEMORY_DRIFT's boundary on both sides and
memory known on one side only, max_instances_per_host with instances
kept, a kept plan without options, an instance on every node and CPU of
its host, a multi-node deployment (scripts/mutation.py plan/identity
found these untested)."""

from __future__ import annotations

import copy
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host, merge_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact, identity
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES


@pytest.mark.parametrize("recorded, today, stands", [
    (1000, 1000, True), (1100, 1000, True), (900, 1000, True),     # within 10% of today's, both ways
    (1101, 1000, False), (899, 1000, False),                       # one MB past it
    (2000, 1000, False), (0, 1000, False), (1000, 0, False),
])
def test_a_rank_stands_while_its_node_is_within_memory_drift(recorded, today, stands):
    assert identity.MEMORY_DRIFT == 0.10
    assert identity.same_memory(recorded, today) is stands


def test_memory_known_on_one_side_only_does_not_stand():
    assert identity.same_memory(None, 1000) is False
    assert identity.same_memory(1000, None) is False
    assert identity.same_memory(None, None) is True
    assert identity.same_memory(0, None) is False and identity.same_memory(None, 0) is False


# On recorded machines, through the planning filter as a run plans.

def _deploy(fleet):
    """The kept plan after a run that planned every host of `fleet` (JSON text, as kept_plan reads it)."""
    return artifact.dump_artifact(merge_plan(fleet_plan_by_host(fleet), None, sorted(fleet), sorted(fleet))["plan"])


def _host(facts, **variables):
    return dict({"ansible_facts": {"numa_topology": facts}}, **variables)


def _gpus(plan):
    return [(i["name"], i["gpu_indices"]) for i in plan["instances"]]


@pytest.fixture(scope="module")
def mi300x():
    return facts_from_capture(os.path.join(MACHINES, "mi300x_8gpu_xgmi", "capture.yml"))


def test_max_instances_per_host_holds_with_instances_kept(mi300x):
    """Four tp1 instances (the cap) on GPUs 0-3; GPU 0 excluded: the three
    others are kept and one new instance (GPU 4) makes four again, never more."""
    capped = dict(gpufleet_tp_size=1, gpufleet_max_instances_per_host=4)
    kept = _deploy({"mi": _host(mi300x, **capped)})
    assert _gpus(artifact.load_artifact(kept)) == [("vllm-0", [0]), ("vllm-1", [1]), ("vllm-2", [2]), ("vllm-3", [3])]
    gpu0 = mi300x["gpus"][0]["id"]
    plan = fleet_plan_by_host({"mi": _host(mi300x, gpufleet_exclude_gpus=[gpu0], **capped)}, deployed=kept)
    assert _gpus(plan) == [("vllm-0", [4]), ("vllm-1", [1]), ("vllm-2", [2]), ("vllm-3", [3])]
    assert [u["index"] for u in plan["unused"]] == [0, 5, 6, 7]


def test_a_host_at_its_cap_with_every_instance_kept_forms_no_other(mi300x):
    capped = dict(gpufleet_tp_size=1, gpufleet_max_instances_per_host=4)
    kept = _deploy({"mi": _host(mi300x, **capped)})
    gpu7 = mi300x["gpus"][7]["id"]
    plan = fleet_plan_by_host({"mi": _host(mi300x, gpufleet_exclude_gpus=[gpu7], **capped)}, deployed=kept)
    assert plan["instances"] == artifact.load_artifact(kept)["instances"]
    assert [u["index"] for u in plan["unused"]] == [4, 5, 6, 7]
    assert plan["totals"]["instances"] == 4


def test_a_kept_plan_without_options_is_planned_afresh(mi300x):
    """A plan kept before options were recorded: its instances are not
    kept as deployed under other options (here tp 2 after tp 4)."""
    kept = artifact.load_artifact(_deploy({"mi": _host(mi300x, gpufleet_tp_size=4)}))
    assert "options" in kept["hosts"]["mi"]
    del kept["hosts"]["mi"]["options"]
    plan = fleet_plan_by_host({"mi": _host(mi300x, gpufleet_tp_size=2)}, deployed=artifact.dump_artifact(kept))
    assert [len(i["gpus"]) for i in plan["instances"]] == [2, 2, 2, 2]
    assert identity.same_options("mi", {"tp_size": 2}, None) is False


def test_a_cpu_instance_on_every_node_and_cpu_of_its_host_is_kept_with_its_memory():
    """A one-node CPU host whose one instance holds every node and every
    usable CPU: a few MB of drift keeps the rank as deployed (its recorded
    memory_mb), where a fresh plan would take today's."""
    ci = facts_from_capture(os.path.join(MACHINES, "this_machine_ci", "capture.yml"))
    fleet = {"ci": _host(ci, gpufleet_device_class="cpu")}
    deployed = artifact.load_artifact(_deploy(fleet))["instances"]
    assert [(i["numa_nodes"], i["cpus"]) for i in deployed] == [([0], "0-1")]
    assert [n["cpus"] for n in ci["numa_nodes"]] == ["0-1"]
    drifted = copy.deepcopy(ci)
    drifted["numa_nodes"][0]["memory_mb"] = 4400  # recorded 4314: within MEMORY_DRIFT
    fleet = {"ci": _host(drifted, gpufleet_device_class="cpu")}
    assert fleet_plan_by_host(fleet)["instances"][0]["binding"]["ranks"][0]["memory_mb"] == 4400
    assert fleet_plan_by_host(fleet, deployed=_deploy({"ci": _host(ci, gpufleet_device_class="cpu")}))[
        "instances"] == deployed


def test_a_multinode_deployment_rerun_is_its_fresh_plan():
    h100 = facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))
    fleet = dict((host, _host(h100, gpufleet_tp_size=4, gpufleet_pp_size=4, gpufleet_nodes_per_instance=2))
                 for host in ("gpu-a", "gpu-b"))
    fresh = fleet_plan_by_host(fleet)
    again = fleet_plan_by_host(fleet, deployed=_deploy(fleet))
    assert again == fresh


def _cpu_host(mi50, without=(), memory_mb=64000):
    """mi50_8gpu_nps4 as a CPU host with max_instances_per_host 4 (tp 1: an
    instance per node), nodes in `without` left no usable CPU."""
    facts = copy.deepcopy(mi50)
    for node in facts["numa_nodes"]:
        node["memory_mb"] = memory_mb
        if node["id"] in without:
            node["usable_cpus"] = ""
    return {"cpu": _host(facts, gpufleet_device_class="cpu", gpufleet_max_instances_per_host=4)}


def _nodes(plan):
    return [(i["name"], i["numa_nodes"], i["binding"]["ranks"][0]["memory_mb"]) for i in plan["instances"]]


def test_a_cpu_host_at_its_cap_keeps_its_instances_and_forms_no_other():
    mi50 = facts_from_capture(os.path.join(MACHINES, "mi50_8gpu_nps4", "capture.yml"))
    kept = _deploy(_cpu_host(mi50, without=[0]))
    deployed = artifact.load_artifact(kept)["instances"]
    assert _nodes({"instances": deployed}) == [
        ("vllm-0", [1], 64000), ("vllm-1", [2], 64000), ("vllm-2", [3], 64000), ("vllm-3", [4], 64000)]
    # node 0 has CPUs again (and memory drifted a little): the fresh plan
    # would take it, the four kept instances are the cap
    plan = fleet_plan_by_host(_cpu_host(mi50, memory_mb=64100), deployed=kept)
    assert plan["instances"] == deployed


def test_a_cpu_host_under_its_cap_forms_the_rest_beside_the_kept_instances():
    mi50 = facts_from_capture(os.path.join(MACHINES, "mi50_8gpu_nps4", "capture.yml"))
    kept = _deploy(_cpu_host(mi50, without=[0]))
    # node 4 lost its CPUs, node 0 has them again: three kept as deployed
    # (their recorded memory), one formed on node 0 with today's, named by
    # the lowest free ordinal
    plan = fleet_plan_by_host(_cpu_host(mi50, without=[4], memory_mb=64100), deployed=kept)
    assert _nodes(plan) == [
        ("vllm-0", [1], 64000), ("vllm-1", [2], 64000), ("vllm-2", [3], 64000), ("vllm-3", [0], 64100)]


@pytest.mark.parametrize("ordinal, fits", [(364, True), (365, False)])
def test_the_ports_of_the_highest_kept_ordinal_are_checked_to_the_last_one(mi300x, ordinal, fits):
    """VLLM_PORT ranges of 100 from 29000: ordinal 364's ends at 65499, 365's
    would end at 65599 (a hand-edited kept plan's ordinal)."""
    kept = artifact.load_artifact(_deploy({"mi": _host(mi300x, gpufleet_tp_size=4)}))
    kept["instances"][1]["ordinal"] = ordinal
    fleet = {"mi": _host(mi300x, gpufleet_tp_size=4, gpufleet_exclude_gpus=[mi300x["gpus"][0]["id"]])}
    if fits:
        assert [i["ordinal"] for i in fleet_plan_by_host(fleet, deployed=kept)["instances"]] == [ordinal]
    else:
        with pytest.raises(AnsibleFilterError, match="ports end at 65535") as info:
            fleet_plan_by_host(fleet, deployed=kept)
        assert "366 instances need API ports up to 8365 and VLLM_PORT ranges up to 65599" in str(info.value)


def test_an_instance_formed_again_takes_the_ordinal_of_its_own_place():
    """A CPU host of eight tp1 instances: node 1 loses its CPUs (vllm-1 is
    gone) and node 3's memory changed (vllm-3 is formed again): the new
    vllm-3 is named by its node, not by the lowest free ordinal (1)."""
    mi50 = facts_from_capture(os.path.join(MACHINES, "mi50_8gpu_nps4", "capture.yml"))
    sized = _cpu_host(mi50)
    sized["cpu"]["gpufleet_max_instances_per_host"] = 8
    kept = _deploy(sized)
    changed = _cpu_host(mi50, without=[1])
    changed["cpu"]["gpufleet_max_instances_per_host"] = 8
    changed["cpu"]["ansible_facts"]["numa_topology"]["numa_nodes"][3]["memory_mb"] = 128000
    plan = fleet_plan_by_host(changed, deployed=kept)
    assert [(name, nodes) for name, nodes, _memory in _nodes(plan)] == [
        ("vllm-0", [0]), ("vllm-2", [2]), ("vllm-3", [3]), ("vllm-4", [4]), ("vllm-5", [5]), ("vllm-6", [6]),
        ("vllm-7", [7])]
    assert _nodes(plan)[2] == ("vllm-3", [3], 128000)


def test_a_gpu_instance_formed_again_takes_the_ordinal_of_its_gpus(mi300x):
    """Eight tp1 instances; GPU 1 excluded and GPU 3 moved to another index
    (its instance formed again): the new instance on GPU 3 is vllm-3, not
    the lowest free vllm-1."""
    kept = _deploy({"mi": _host(mi300x, gpufleet_tp_size=1)})
    moved = copy.deepcopy(mi300x)
    moved["gpus"][3]["index"] = 8
    plan = fleet_plan_by_host({"mi": _host(moved, gpufleet_tp_size=1, gpufleet_exclude_gpus=[mi300x["gpus"][1]["id"]])},
                              deployed=kept)
    assert [(i["name"], i["gpus"][0]["id"]) for i in plan["instances"]] == [
        ("vllm-%d" % n, mi300x["gpus"][n]["id"]) for n in (0, 2, 3, 4, 5, 6, 7)]


def test_a_share_whose_head_left_the_fleet_is_formed_again():
    """gpu-a and gpu-b ran one tp4 x pp4 instance (head gpu-a); gpu-a
    leaves and gpu-c joins: gpu-b's share is the fresh plan's, its head
    gpu-b, never its kept share naming the old head."""
    h100 = facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))

    def fleet(*hosts):
        return dict((host, _host(h100, gpufleet_tp_size=4, gpufleet_pp_size=4, gpufleet_nodes_per_instance=2))
                    for host in hosts)

    kept = _deploy(fleet("gpu-a", "gpu-b"))
    plan = fleet_plan_by_host(fleet("gpu-b", "gpu-c"), deployed=kept)
    assert [(i["host"], i["multinode"]["head"], i["multinode"]["node_rank"]) for i in plan["instances"]] == [
        ("gpu-b", "gpu-b", 0), ("gpu-c", "gpu-b", 1)]
    assert plan == fleet_plan_by_host(fleet("gpu-b", "gpu-c"))


def test_unused_gpus_beside_kept_instances_are_listed_by_index_those_without_last(mi300x):
    """An MI300X whose GPU indexes run against its bus order (index 7 on
    the first bus, down to 0), one GPU (the fourth bus) without index; four
    tp1 instances (the cap) kept or formed again: the unused GPUs are listed
    by index, the one without index last."""
    facts = copy.deepcopy(mi300x)
    for position, gpu in enumerate(facts["gpus"]):
        gpu["index"] = 7 - position
    facts["gpus"][3]["index"] = None
    capped = dict(gpufleet_tp_size=1, gpufleet_max_instances_per_host=4)
    kept = _deploy({"mi": _host(facts, **capped)})
    assert _gpus(artifact.load_artifact(kept)) == [("vllm-0", [7]), ("vllm-1", [6]), ("vllm-2", [5]), ("vllm-3", [None])]
    for excluded, unused in ((0, [0, 1, 2, 7]), (3, [0, 1, 2, None])):
        plan = fleet_plan_by_host({"mi": _host(facts, gpufleet_exclude_gpus=[facts["gpus"][excluded]["id"]], **capped)},
                                  deployed=kept)
        assert len(plan["instances"]) == 4
        assert [u["index"] for u in plan["unused"]] == unused


def test_kept_instances_keep_the_warnings_about_their_gpus():
    """DGX-2 at tp 2: each instance gets one CPU for two GPUs (a warning
    naming its GPUs). GPU 15 excluded: the seven instances on GPUs 0-13
    are kept, each with its warning; the gone instance's warning is gone."""
    dgx2 = facts_from_capture(os.path.join(MACHINES, "dgx2_v100_16gpu_nvswitch", "capture.yml"))
    kept = _deploy({"dgx": _host(dgx2, gpufleet_tp_size=2)})
    deployed = artifact.load_artifact(kept)
    about = [w for w in deployed["warnings"] if w["gpus"]]
    assert len(about) == 8 and all(len(w["gpus"]) == 2 for w in about)
    plan = fleet_plan_by_host({"dgx": _host(dgx2, gpufleet_tp_size=2, gpufleet_exclude_gpus=[dgx2["gpus"][15]["id"]])},
                              deployed=kept)
    assert plan["instances"] == deployed["instances"][:7]
    assert [w["gpus"] for w in plan["warnings"] if w["gpus"]] == [
        [g["id"] for g in i["gpus"]] for i in deployed["instances"][:7]]
    assert len([w for w in plan["warnings"] if not w["gpus"]]) == 2  # the CPUs each NUMA node shares


def test_a_gpu_back_beside_kept_instances_gives_the_fresh_plan_and_each_warning_once():
    dgx2 = facts_from_capture(os.path.join(MACHINES, "dgx2_v100_16gpu_nvswitch", "capture.yml"))
    kept = _deploy({"dgx": _host(dgx2, gpufleet_tp_size=2, gpufleet_exclude_gpus=[dgx2["gpus"][15]["id"]])})
    assert len(artifact.load_artifact(kept)["instances"]) == 7
    fresh = fleet_plan_by_host({"dgx": _host(dgx2, gpufleet_tp_size=2)})
    plan = fleet_plan_by_host({"dgx": _host(dgx2, gpufleet_tp_size=2)}, deployed=kept)
    assert plan["instances"] == fresh["instances"]
    assert plan["warnings"] == fresh["warnings"]
    assert len(plan["warnings"]) == 10
