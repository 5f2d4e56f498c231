# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/drift.py: does the host still match the plan it was deployed
with? The DGX-2 capture with the recorded processes, against plans made
from it (and from edited copies of it)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import drift
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import (
    DGX2, DGX2_BUS, RUNNING, audit_scenario as run, capture_with_processes, findings_of as by_code, pid_of)


def deployed_plan(edit=None, **options):
    facts, dummy = audit_replay.gather_capture(capture_with_processes(DGX2, {}))
    if edit:
        edit(facts)
    options.setdefault("tp_size", 4)
    return {"options": options, "plan": placement.plan_fleet({"gpu-a": facts}, **options)}


def test_drift_none_when_today_matches_and_instance_runs():
    result = run(DGX2, RUNNING, deployed=deployed_plan(max_instances_per_host=1))
    assert result["findings"] == []
    assert result["instances"][0]["state"] == "running"
    assert result["instances"][0]["pids"] == [pid_of("tp_server"), pid_of("tp_server_worker")]
    assert result["groups"][0]["instance"] == "vllm-0"


def test_drift_instances_not_running_and_unplanned_process():
    result = run(DGX2, {"unbound": [DGX2_BUS[12]]}, deployed=deployed_plan())
    assert [f["subject"] for f in by_code(result, "instance_not_running")] == ["vllm-0", "vllm-1", "vllm-2"]
    assert [f["instance"] for f in by_code(result, "instance_misplaced")] == ["vllm-3"]
    assert len(by_code(result, "unplanned_process")) == 1
    # state and placement problem are two fields: vllm-3's GPUs are held by another group, and without its
    # unit's state nothing says whether vllm-3 itself runs
    assert [i["state"] for i in result["instances"]] == ["stopped", "stopped", "stopped", "unknown"]
    assert [i["problem"] for i in result["instances"]] == [None, None, None, "elsewhere"]
    assert [f["instance"] for f in by_code(result, "instance_state_unknown")] == ["vllm-3"]


def test_a_cpu_instance_is_not_looked_for_on_gpus():
    """A CPU instance (device cpu) holds no GPU: its unit says how it is, no
    process group is expected on GPUs it does not have."""
    cpu = {"name": "vllm-0", "host": "gpu-a", "device": "cpu", "gpus": [], "gpu_indices": [], "tp_size": 1,
           "pp_size": 1, "numa_nodes": [0], "cpus": "0-23", "port": 8000, "dist_port": 29000}
    deployed = {"options": {}, "plan": {"instances": [cpu]}}

    def unit(state):
        def edit(facts, processes):
            processes["unit_states"] = {"units": {"gpufleet-vllm-0.service": state}}
        return edit
    running = {"active_state": "active", "sub_state": "running", "load_state": "loaded", "main_pid": 4242}
    result = run(DGX2, {}, deployed=deployed, edit=unit(running))
    assert [i["state"] for i in result["instances"]] == ["running"]
    assert by_code(result, "instance_not_running") == []
    failed = {"active_state": "failed", "sub_state": "failed", "load_state": "loaded"}
    result = run(DGX2, {}, deployed=deployed, edit=unit(failed))
    assert [i["state"] for i in result["instances"]] == ["failed"]
    assert [f["subject"] for f in by_code(result, "instance_not_running")] == ["vllm-0"]


def _drop_gpu(bus):
    def edit(facts, processes=None):
        facts["gpus"] = [g for g in facts["gpus"] if g["pci_bus_id"] != bus]
        facts["links"].pop(bus, None)
        for row in facts["links"].values():
            row.pop(bus, None)
    return edit


def test_drift_gpu_gone_and_what_a_redeploy_changes():
    result = run(DGX2, RUNNING, deployed=deployed_plan(), edit=_drop_gpu(DGX2_BUS[15]))
    missing = by_code(result, "gpu_missing")
    assert [(f["severity"], f["instance"]) for f in missing] == [("critical", "vllm-3")]
    replan = by_code(result, "replan_differs")
    # node 1's two CPUs were split between vllm-2 and vllm-3; vllm-2 would get both
    assert [f["message"] for f in replan] == [
        "a redeploy would change instance vllm-2: CPUs 24 -> 24-25",
        "a redeploy would remove instance vllm-3 (today's topology has no room for it)"]
    assert result["today_plan"]["unused"][0]["id"] == "0000:e0:00.0"


def test_drift_gpu_added_since_the_deploy():
    result = run(DGX2, RUNNING, deployed=deployed_plan(edit=_drop_gpu(DGX2_BUS[15])))
    added = by_code(result, "gpu_added")
    assert len(added) == 1 and added[0]["gpus"] == [DGX2_BUS[15]]
    # the three GPUs of node 1 left over then make a fourth instance now
    assert [f["subject"] for f in by_code(result, "replan_differs")] == ["new instance 3", "vllm-2"]


def test_drift_numa_layout_changed():
    def nps(facts, processes):
        # as if node 1 had been split: node 1 keeps CPU 24, a new node 2 gets CPU 25 and GPUs 12-15
        facts["numa_nodes"][1]["cpus"] = "24"
        facts["numa_nodes"].append({"id": 2, "cpus": "25", "memory_mb": 1, "distances": {}, "socket": 1})
        for gpu in facts["gpus"]:
            if gpu["pci_bus_id"] in DGX2_BUS[12:]:
                gpu["numa_node"] = 2
    result = run(DGX2, RUNNING, deployed=deployed_plan(), edit=nps)
    changed = by_code(result, "numa_layout_changed")
    assert [f["instance"] for f in changed] == ["vllm-3"]  # vllm-2 has CPU 24, still on node 1
    assert "GPU 12 now on node 2" in changed[0]["message"]
    assert "its CPUs 25 are no longer all on node 1 (today: 24)" in changed[0]["message"]
    replan = dict((f["subject"], f["message"]) for f in by_code(result, "replan_differs"))
    assert "NUMA nodes 1 -> 2" in replan["vllm-3"]


def test_drift_plan_for_another_host_only_says_nothing_planned():
    deployed = deployed_plan()
    result = run(DGX2, RUNNING, deployed=deployed, host="gpu-b")
    assert result["instances"] == [] and result["findings"] == []


@pytest.mark.parametrize("deployed, message", [
    ([], "deployed plan must be a mapping"),
    ({"plan": {}}, "deployed plan has no instances list"),
    ({"instances": [{"name": "x"}]}, r"instances\[0\] has no host or gpus list"),
    ({"instances": [], "options": {"tp": 4}}, "deployed plan options: unknown tp"),
    # A hand-edited or hostile plan: the device picks a table row, so it is refused by name.
    ({"instances": [{"host": "gpu-b", "gpus": [], "device": "tpu"}]},
     r"^deployed plan instances\[0\]\.device: must be one of nvidia, amd, cpu \(got 'tpu'\)$"),
    ({"instances": [{"host": "gpu-a", "gpus": [], "device": ["cpu"]}]},
     r"^deployed plan instances\[0\]\.device: must be one of nvidia, amd, cpu \(got \['cpu'\]\)$"),
])
def test_deployed_plan_errors_name_the_problem(deployed, message):
    with pytest.raises(ValueError, match=message):
        drift.deployed_for_host(deployed, "gpu-a")


def test_replan_failure_is_a_finding_not_a_crash():
    deployed = deployed_plan()
    result = run(DGX2, RUNNING, deployed=copy.deepcopy(dict(deployed, options={"tp_size": 16})))
    failed = by_code(result, "replan_failed")
    assert len(failed) == 1 and "tp_size 16 does not fit on any socket" in failed[0]["message"]


def test_a_cpu_host_is_planned_again_as_a_cpu_host():
    plan = {"instances": [{"host": "c", "name": "vllm-0", "gpus": [], "tp_size": 1, "pp_size": 1, "device": "cpu"}],
            "hosts": {"c": {"gpus": 0, "options": {"tp_size": 1, "device_class": "cpu"}}}}
    instances, options, unused = drift.deployed_for_host(plan, "c")
    assert options == {"tp_size": 1, "pp_size": 1, "device_class": "cpu"} and unused == []
    assert [i["name"] for i in instances] == ["vllm-0"]
