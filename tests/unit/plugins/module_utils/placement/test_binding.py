# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Per-worker binding (binding.mode per_worker): pipeline stages bound per
socket by vLLM's own --numa-bind, on recorded dual-socket machines.

The expected node of each worker is read from the recorded facts (the NUMA
node of the GPU at that position of CUDA_VISIBLE_DEVICES), not from the plan.
"""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import make_facts
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import (
    VARIABLES,
    numactl_reading,
    vllm_options,
)

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")


def machine(name):
    return topology.facts_from_capture(os.path.join(MACHINES, name, "capture.yml"))


def gpu_node(facts, index):
    return [g["numa_node"] for g in facts["gpus"] if g["index"] == index][0]


def unit_of(instance, **variables):
    # vLLM for ROCm is the operator's: an AMD instance renders with an existing install.
    variables.setdefault("vllm_install", instance.get("device") != "amd")
    return host_state.host_units([instance], dict(VARIABLES, **variables))["units"][0]


@pytest.mark.parametrize("name", ["h100_sxm_8gpu_nvswitch", "mi300x_8gpu_xgmi", "rtx4090_8gpu_pcie_switch_quads"])
def test_tp4_pp2_gives_one_node_per_gpu_in_worker_order(name):
    facts = machine(name)
    plan = placement.plan_fleet({name: facts}, tp_size=4, pp_size=2)
    (instance,) = plan["instances"]
    expected = [gpu_node(facts, i) for i in instance["gpu_indices"]]
    assert sorted(set(expected)) == [0, 1]  # the two stages sit on the two sockets
    binding = instance["binding"]
    assert binding["mode"] == "per_worker"
    assert [w["node"] for w in binding["workers"]] == expected
    assert [w["gpu_index"] for w in binding["workers"]] == instance["gpu_indices"]
    # the API server on the first stage's node, by node (whole nodes)
    first = instance["stages"][0]["numa_nodes"]
    assert binding["mems"] == first == [expected[0]]
    assert binding["by_node"] is True
    unit = unit_of(instance)
    options, program = numactl_reading(unit["argv"])
    assert options == {"cpunodebind": str(first[0]), "membind": str(first[0])}
    flags = vllm_options(program[3:])
    assert flags["--numa-bind"] == []
    assert flags["--numa-bind-nodes"] == [str(n) for n in expected]
    assert "--numa-bind-cpus" not in flags
    assert flags["--pipeline-parallel-size"] == ["2"]
    environment = dict(unit["environment"])
    assert environment["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    visible = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "ROCR_VISIBLE_DEVICES"}[instance["device"]]
    assert environment[visible] == ",".join(map(str, instance["gpu_indices"]))


def test_h100_tp4_pp2_exact_plan():
    plan = placement.plan_fleet({"h100": machine("h100_sxm_8gpu_nvswitch")}, tp_size=4, pp_size=2)
    binding = plan["instances"][0]["binding"]
    assert binding == {
        "mode": "per_worker", "cpus": "0-47,96-143", "mems": [0], "policy": "bind", "by_node": True,
        "workers": [{"gpu_index": i, "node": 0 if i < 4 else 1, "cpus": "0-47,96-143" if i < 4 else "48-95,144-191"}
                    for i in range(8)]}
    assert plan["instances"][0]["cpus"] == "0-191"  # the instance's, as before: both sockets


def test_restricted_cpus_bind_each_worker_by_cpu_list_inside_the_api_servers():
    # The LXC capture's cpuset leaves only part of each node usable: binding by CPU list,
    # each worker gets the instance's CPUs on its node, the API server all of them.
    name = "mi300x_8gpu_lxc_cpuset"
    facts = machine(name)
    plan = placement.plan_fleet({name: facts}, tp_size=4, pp_size=2)
    (instance,) = plan["instances"]
    binding = instance["binding"]
    assert binding["mode"] == "per_worker" and binding["by_node"] is False
    assert binding["cpus"] == instance["cpus"]
    unit = unit_of(instance)
    options, program = numactl_reading(unit["argv"])
    assert options == {"physcpubind": instance["cpus"], "membind": str(binding["mems"][0])}
    flags = vllm_options(program[3:])
    expected = [gpu_node(facts, i) for i in instance["gpu_indices"]]
    assert flags["--numa-bind-nodes"] == [str(n) for n in expected]
    node_cpus = dict((n["id"], set(parse_cpulist(n["cpus"]))) for n in facts["numa_nodes"])
    mine = set(parse_cpulist(instance["cpus"]))
    assert [set(parse_cpulist(c)) for c in flags["--numa-bind-cpus"]] == [node_cpus[n] & mine for n in expected]
    assert all(flags["--numa-bind-cpus"])


def test_systemd_binding_puts_the_api_server_on_the_first_stage():
    plan = placement.plan_fleet({"h100": machine("h100_sxm_8gpu_nvswitch")}, tp_size=4, pp_size=2)
    unit = unit_of(plan["instances"][0], vllm_binding="systemd")
    assert dict(unit["numa"]) == {"CPUAffinity": "0-47,96-143", "NUMAPolicy": "bind", "NUMAMask": "0"}
    assert unit["argv"][0] == "/opt/vllm/bin/vllm"
    assert vllm_options(unit["argv"][3:])["--numa-bind-nodes"] == ["0"] * 4 + ["1"] * 4


def test_tensor_parallel_instances_may_bind_per_worker_too():
    facts = machine("h100_sxm_8gpu_nvswitch")
    default = placement.plan_fleet({"h": facts}, tp_size=4)
    assert [i["binding"]["mode"] for i in default["instances"]] == ["process", "process"]
    plan = placement.plan_fleet({"h": facts}, tp_size=4, worker_binding="per_worker")
    assert [[w["node"] for w in i["binding"]["workers"]] for i in plan["instances"]] == [[0] * 4, [1] * 4]
    for old, new in zip(default["instances"], plan["instances"]):
        # one socket per instance: the API server's binding is the process-wide one
        assert {k: new["binding"][k] for k in ("cpus", "mems", "policy", "by_node")} == {
            k: old["binding"][k] for k in ("cpus", "mems", "policy", "by_node")}


def test_process_binding_keeps_pipeline_instances_bound_as_a_whole():
    plan = placement.plan_fleet({"h": machine("h100_sxm_8gpu_nvswitch")}, tp_size=4, pp_size=2,
                                worker_binding="process")
    instance = plan["instances"][0]
    assert instance["binding"]["mode"] == "process"
    assert instance["binding"]["mems"] == [0, 1]
    options, program = numactl_reading(unit_of(instance)["argv"])
    assert options == {"cpunodebind": "0,1", "membind": "0,1"}
    assert "--numa-bind" not in vllm_options(program[3:])


def _stage_without_cpus():
    # Node 1's CPUs are all outside the service's cpuset: the second stage's
    # GPUs sit on a node that gives the instance no CPUs.
    facts = make_facts("x", {0: (0, "0-7"), 1: (1, "8-15")}, [0, 0, 1, 1], lambda i, j: "NV4")
    facts["numa_nodes"][1]["usable_cpus"] = ""
    return facts


def test_auto_falls_back_to_process_binding_with_a_warning_when_a_worker_node_has_no_cpus():
    plan = placement.plan_fleet({"x": _stage_without_cpus()}, tp_size=2, pp_size=2)
    assert plan["instances"][0]["binding"]["mode"] == "process"
    assert any("NUMA node(s) 1 of its GPUs hold none of its CPUs (0-7)" in w["text"] and "bound process-wide instead"
               in w["text"] and w["host"] == "x" for w in plan["warnings"]), plan["warnings"]


def test_per_worker_asked_for_but_impossible_is_an_error():
    with pytest.raises(ValueError, match=r"^host x: worker_binding per_worker: instance 0: NUMA node\(s\) 1"):
        placement.plan_fleet({"x": _stage_without_cpus()}, tp_size=2, pp_size=2, worker_binding="per_worker")


@pytest.mark.parametrize("value", ["sometimes", True, None, ["per_worker"]])
def test_bad_worker_binding_is_refused(value):
    with pytest.raises(ValueError, match=r"^worker_binding must be one of auto, process, per_worker, got "):
        placement.plan_fleet({"h": machine("h100_sxm_8gpu_nvswitch")}, tp_size=4, worker_binding=value)


def _pp_instance():
    return placement.plan_fleet({"h": machine("h100_sxm_8gpu_nvswitch")}, tp_size=4, pp_size=2)["instances"][0]


def test_a_vllm_without_numa_bind_is_refused_before_any_unit_is_written():
    with pytest.raises(ValueError, match=r"^vllm_version: 0\.19\.1 has no per-worker NUMA binding \(--numa-bind, "
                                         r"vLLM 0\.20 and newer\), which the plan gives vllm-0: "):
        unit_of(_pp_instance(), vllm_version="0.19.1")
    # a vLLM of unknown version (vllm_executable) is the user's to know
    assert unit_of(_pp_instance(), vllm_version="0.19.1", vllm_executable="/usr/local/bin/vllm")


def test_forked_workers_cannot_be_bound():
    with pytest.raises(ValueError, match=r"^vllm_environment\.VLLM_WORKER_MULTIPROC_METHOD: must be spawn"):
        unit_of(_pp_instance(), vllm_environment={"VLLM_WORKER_MULTIPROC_METHOD": "fork"})
    unit = unit_of(_pp_instance(), vllm_environment={"VLLM_WORKER_MULTIPROC_METHOD": "spawn"})
    assert [k for k, _v in unit["environment"]].count("VLLM_WORKER_MULTIPROC_METHOD") == 1


@pytest.mark.parametrize("option", ["numa-bind", "numa_bind_nodes", "numa-bind-cpus"])
def test_extra_args_cannot_override_the_planned_worker_binding(option):
    with pytest.raises(ValueError, match=r"^vllm_extra_args key: must not set options the unit sets itself"):
        unit_of(_pp_instance(), vllm_extra_args={option: [0]})


def test_a_kept_plan_without_mode_binds_by_process():
    instance = _pp_instance()
    instance["binding"] = {k: instance["binding"][k] for k in ("cpus", "mems", "policy", "by_node")}
    unit = unit_of(instance)
    assert "--numa-bind" not in unit["argv"]


def test_workers_must_match_the_gpus_and_lie_inside_the_process_cpus():
    instance = _pp_instance()
    bad = copy.deepcopy(instance)
    bad["binding"]["workers"] = bad["binding"]["workers"][:-1]
    with pytest.raises(ValueError, match=r"binding\.workers: must hold one entry per GPU in the order of gpu_indices"):
        unit_of(bad)
    bad = copy.deepcopy(instance)
    bad["binding"]["by_node"] = False
    with pytest.raises(ValueError, match=r"binding\.workers\[4\]\.cpus: must lie inside binding\.cpus 0-47,96-143 "
                                         r"\(numactl refuses a worker's CPUs outside its parent's\)"):
        unit_of(bad)
