# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/cpu_host.py: CPU instances (gpufleet_device_class: cpu) on
recorded machines replayed as CPU hosts: one instance per NUMA node by
default, tp_size nodes of one socket per instance, reserved and usable
CPUs as for GPU hosts, names and ports from the same slots."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES


def machine(name):
    return facts_from_capture(os.path.join(MACHINES, name, "capture.yml"))


def cpu_plan(name, **options):
    return placement.plan_fleet({"h": machine(name)}, **dict({"tp_size": 1, "device_class": "cpu"}, **options))


def test_two_sockets_of_one_node_each_give_two_instances_of_the_contracts_shape():
    plan = cpu_plan("mi300x_8gpu_xgmi")
    first, second = plan["instances"]
    assert first == {
        "device": "cpu", "host": "h", "name": "vllm-0", "ordinal": 0, "tp_size": 1, "pp_size": 1,
        "gpus": [], "gpu_indices": [], "stages": [], "numa_nodes": [0], "sockets": [0], "cpus": "0-55,112-167",
        "cpus_shared_node": False, "cpus_whole_nodes": True, "memory_policy": "bind",
        "binding": {"mode": "process", "cpus": "0-55,112-167", "mems": [0], "policy": "bind", "by_node": True,
                    "workers": [], "ranks": [{"node": 0, "cpus": "0-55,112-167", "memory_mb": None}]},
        "worst_link": None, "reason": "CPU instance on NUMA node 0 (socket 0), 112 CPUs",
        "port": 8000, "dist_port": 29000, "dist_port_range": [29000, 29099],
    }
    assert (second["name"], second["port"], second["numa_nodes"], second["sockets"]) == ("vllm-1", 8001, [1], [1])
    # its GPUs are not used, and the plan says so
    assert [u["reason"] for u in plan["unused"]] == ["gpufleet_device_class is cpu: GPUs are not used on a CPU host"] * 8
    assert plan["warnings"] == [{"host": "h", "text": "gpufleet_device_class is cpu: its 8 GPU(s) are not used",
                                 "gpus": [], "nodes": []}]
    assert plan["totals"] == {"hosts": 1, "instances": 2, "gpus": 8, "gpus_used": 0, "gpus_unused": 8}


def test_tp_2_ranks_sit_on_nodes_of_one_socket():
    plan = cpu_plan("mi50_8gpu_nps4", tp_size=2)
    assert [(i["numa_nodes"], i["sockets"], i["tp_size"]) for i in plan["instances"]] == [
        ([0, 1], [0], 2), ([2, 3], [0], 2), ([4, 5], [1], 2), ([6, 7], [1], 2)]
    first = plan["instances"][0]
    assert first["binding"]["ranks"] == [{"node": 0, "cpus": "0-15", "memory_mb": None},
                                         {"node": 1, "cpus": "16-31", "memory_mb": None}]
    assert first["cpus"] == first["binding"]["cpus"] == "0-31" and first["binding"]["mems"] == [0, 1]
    assert first["memory_policy"] == "bind" and first["binding"]["policy"] == "bind"
    assert first["reason"] == "CPU instance of 2 ranks (one per NUMA node) on NUMA nodes 0,1 (socket 0), 32 CPUs"


def test_nodes_a_socket_cannot_fill_an_instance_with_are_left_over_never_spanned():
    plan = cpu_plan("mi50_8gpu_nps4", tp_size=3)
    assert [i["numa_nodes"] for i in plan["instances"]] == [[0, 1, 2], [4, 5, 6]]
    left = [w for w in plan["warnings"] if "left over" in w["text"]]
    assert left == [{"host": "h", "gpus": [], "nodes": [n], "text": (
        "NUMA node %d left over: socket %d holds 4 NUMA node(s) with usable CPUs: tp_size 3 forms 1 "
        "instance(s) there and leaves this one (a CPU instance never spans sockets)" % (n, s))}
        for n, s in ((3, 0), (7, 1))]
    with pytest.raises(placement.PlacementError, match=r"^host h: tp_size 5 \(gpufleet_tp_size\) needs 5 NUMA nodes "
                                                       r"with usable CPUs on one socket .* its sockets hold at most 4$"):
        cpu_plan("mi50_8gpu_nps4", tp_size=5, allow_span=True)


def test_nodes_of_unknown_sockets_stand_alone():
    plan = cpu_plan("amd_4gpu_pcie_4numa")
    assert [(i["numa_nodes"], i["sockets"]) for i in plan["instances"]] == [([n], []) for n in range(4)]
    assert plan["instances"][0]["reason"] == "CPU instance on NUMA node 0 (socket unknown), 16 CPUs"
    with pytest.raises(placement.PlacementError, match="stands as its own socket"):
        cpu_plan("amd_4gpu_pcie_4numa", tp_size=2)


def test_this_machine_ci_one_node_with_its_memory():
    plan = cpu_plan("this_machine_ci")
    (only,) = plan["instances"]
    assert only["binding"]["ranks"] == [{"node": 0, "cpus": "0-1", "memory_mb": 4314}]
    assert plan["unused"] == [] and plan["warnings"] == []
    assert plan["totals"] == {"hosts": 1, "instances": 1, "gpus": 0, "gpus_used": 0, "gpus_unused": 0}


def test_reserved_cpus_per_socket_leave_the_same_cores_as_on_a_gpu_host():
    cpu = cpu_plan("mi300x_8gpu_xgmi", reserved_cpus_per_socket=1)["instances"]
    gpu = placement.plan_fleet({"h": machine("mi300x_8gpu_xgmi")}, tp_size=4, reserved_cpus_per_socket=1)["instances"]
    assert [i["cpus"] for i in cpu] == [i["cpus"] for i in gpu] == ["1-55,113-167", "57-111,169-223"]
    assert [i["binding"]["by_node"] for i in cpu] == [False, False]
    assert cpu[0]["binding"]["ranks"][0]["cpus"] == "1-55,113-167"
    mi50 = cpu_plan("mi50_8gpu_nps4", tp_size=2, reserved_cpus_per_socket=2)["instances"]
    assert [r["cpus"] for r in mi50[0]["binding"]["ranks"]] == ["2-15", "16-31"]
    assert mi50[1]["binding"]["ranks"][0]["cpus"] == "32-47"  # reserved per socket, not per node


def test_only_usable_cpus_and_nodes_with_cpus_hold_ranks():
    lxc = cpu_plan("mi300x_8gpu_lxc_cpuset")["instances"]
    assert [i["cpus"] for i in lxc] == ["0-14,112-126", "56-71,168-183"]
    gh200 = cpu_plan("gh200_grace_hopper")
    assert [i["numa_nodes"] for i in gh200["instances"]] == [[0]]  # nodes 1-8 are memory only
    assert not any("left over" in w["text"] or w["nodes"] for w in gh200["warnings"])
    assert gh200["instances"][0]["binding"]["ranks"][0]["memory_mb"] == 481868


def test_max_instances_per_host_leaves_the_other_nodes_over():
    plan = cpu_plan("mi300x_8gpu_xgmi", max_instances_per_host=1)
    assert [i["numa_nodes"] for i in plan["instances"]] == [[0]]
    assert {"host": "h", "text": "NUMA node 1 left over: max_instances_per_host (1) reached", "gpus": [],
            "nodes": [1]} in plan["warnings"]


def test_pipeline_stages_worker_binding_and_multi_node_instances_are_refused_on_a_cpu_host():
    with pytest.raises(placement.PlacementError, match=r"^host h: pp_size 2 \(gpufleet_pp_size\): a CPU host"):
        cpu_plan("mi50_8gpu_nps4", pp_size=2)
    with pytest.raises(placement.PlacementError, match=r"^host h: worker_binding per_worker \(gpufleet_worker_binding\)"):
        cpu_plan("mi50_8gpu_nps4", worker_binding="per_worker")
    assert cpu_plan("mi50_8gpu_nps4", worker_binding="process")["instances"] == cpu_plan("mi50_8gpu_nps4")["instances"]
    fleet = {"a": machine("mi50_8gpu_nps4"), "b": machine("mi50_8gpu_nps4")}
    with pytest.raises(placement.PlacementError, match=r"^nodes_per_instance 2 \(gpufleet_nodes_per_instance\) with "
                                                       r"gpufleet_device_class cpu: a CPU instance never spans hosts"):
        placement.plan_fleet(fleet, tp_size=1, pp_size=2, nodes_per_instance=2, device_class="cpu")


def test_fleet_plan_by_host_plans_cpu_and_gpu_hosts_with_the_same_slots():
    host_vars = {
        "cpu-a": {"gpufleet_device_class": "cpu", "gpufleet_base_port": 9000,
                  "ansible_facts": {"numa_topology": machine("this_machine_ci")}},
        "gpu-a": {"gpufleet_tp_size": 4, "ansible_facts": {"numa_topology": machine("h100_sxm_8gpu_nvswitch")}},
        "bare": {"ansible_facts": {"numa_topology": machine("this_machine_ci")}},
    }
    plan = fleet_plan_by_host(host_vars)
    assert [(i["host"], i["name"], i["port"], i["device"]) for i in plan["instances"]] == [
        ("cpu-a", "vllm-0", 9000, "cpu"), ("gpu-a", "vllm-0", 8000, "nvidia"), ("gpu-a", "vllm-1", 8001, "nvidia")]
    assert plan["settings"]["cpu-a"]["device_class"] == "cpu"
    assert "gpufleet_device_class: cpu" in plan["unplannable"]["bare"]


def test_a_node_with_cpus_and_no_memory_holds_no_rank():
    """Its rank's memory would be bound to it (--membind): left over, saying why."""
    facts = machine("mi50_8gpu_nps4")
    for node in facts["numa_nodes"]:
        node["memory_mb"] = 0 if node["id"] == 3 else 64000
    plan = placement.plan_fleet({"h": facts}, tp_size=1, device_class="cpu")
    assert [i["numa_nodes"] for i in plan["instances"]] == [[n] for n in (0, 1, 2, 4, 5, 6, 7)]
    assert [w for w in plan["warnings"] if "left over" in w["text"]] == [{"host": "h", "gpus": [], "nodes": [3], "text": (
        "NUMA node 3 left over: it has CPUs 48-63 but no memory (0 MB): a rank's memory is bound to its node")}]
