# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The audit tells only what it saw: a planned instance is running,
stopped, failed or unknown, from the processes holding its GPUs and its
unit's systemd state (recorded from a real systemd 252 in a booted box,
tests/fixtures/systemd/show-gpufleet-units.txt), and an engine that
differs from the kept plan's is a finding. The DGX-2 capture with the
recorded processes, against plans made from it."""

from __future__ import annotations

import copy
import os

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_html
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_text
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import units as unit_reader
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import (
    DGX2, RUNNING, capture_with_processes, findings_of as by_code, pid_of)

RECORDED_SHOW = os.path.join(fixture_paths.FIXTURES, "systemd", "show-gpufleet-units.txt")
RECORDED_UNITS = ["gpufleet-vllm-%d.service" % i for i in (0, 1, 2, 3, 5)]


def recorded_unit_states(rename=None):
    """The recorded `systemctl show` as the module returns it; rename maps a
    recorded unit to the unit name it stands for here."""
    with open(RECORDED_SHOW) as handle:
        states, warnings = unit_reader.parse_show(handle.read(), RECORDED_UNITS)
    assert warnings == []
    moved = dict((new, dict(states.pop(old), id=new)) for old, new in (rename or {}).items())
    states.update(moved)
    return {"source": "systemd", "units": states, "missing": None}


def deployed_plan(deployed=None, **options):
    facts, dummy = audit_replay.gather_capture(capture_with_processes(DGX2, {}))
    options.setdefault("tp_size", 4)
    plan = placement.plan_fleet({"gpu-a": facts}, **options)
    for inst in plan["instances"]:
        if deployed:
            inst["deployed"] = dict(deployed, unit="gpufleet-%s.service" % inst["name"])
    return {"options": options, "plan": plan}


def audit(holds, deployed, source=True, unit_states=None, environment=None):
    facts, processes = audit_replay.gather_capture(capture_with_processes(DGX2, holds))
    for proc in processes["processes"]:
        if holds is RUNNING:
            proc["environment"]["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
        proc["environment"].update(environment or {})
    if not source:
        processes = {"source": None, "processes": [], "warnings": []}
    processes["unit_states"] = unit_states
    return audit_result.audit_result(facts, processes, "gpu-a", deployed)


def states(result):
    return [(i["name"], i["state"], i["problem"]) for i in result["instances"]]


def test_nothing_seen_is_unknown_never_running():
    """No process source and no unit state: "processes from nothing" said
    running for every instance; now each is unknown, one warning each,
    and the summary counts none as running."""
    result = audit({}, deployed_plan(), source=False)
    assert states(result) == [("vllm-%d" % i, "unknown", None) for i in range(4)]
    unknown = by_code(result, "instance_state_unknown")
    assert [(f["severity"], f["instance"]) for f in unknown] == [("warning", "vllm-%d" % i) for i in range(4)]
    assert "no process source (neither NVML nor nvidia-smi answered" in unknown[0]["message"]
    assert "no state of its unit gpufleet-vllm-0.service" in unknown[0]["message"]
    assert "nvidia-ml-py or nvidia-smi" in unknown[0]["fix"]
    assert result["worst"] == "warning"
    line = [s for s in result["summary"] if s.startswith("gpu-a: ")][0]
    assert line.endswith("; planned instances: 4 unknown"), line
    assert "no findings" not in result["summary"]
    assert audit_result.gate(result, "warning")[0]


def test_the_unit_alone_tells_running_stopped_failed_without_a_process_source():
    """A CPU or stand-in host (no GPU process source): systemd's answer,
    recorded: active with a main PID, failed, activating (auto-restart),
    not-found, loaded but inactive."""
    units = recorded_unit_states(rename={"gpufleet-vllm-5.service": "gpufleet-vllm-3.service",
                                         "gpufleet-vllm-3.service": "gpufleet-vllm-9.service"})
    result = audit({}, deployed_plan(), source=False, unit_states=units)
    assert states(result) == [("vllm-0", "running", None), ("vllm-1", "failed", None),
                              ("vllm-2", "failed", None), ("vllm-3", "stopped", None)]
    assert [i["unit_state"] for i in result["instances"]] == [
        "active (running), main PID 39", "failed (failed)", "activating (auto-restart)", "inactive (dead)"]
    assert by_code(result, "instance_state_unknown") == []
    not_running = by_code(result, "instance_not_running")
    assert [f["instance"] for f in not_running] == ["vllm-1", "vllm-2", "vllm-3"]
    assert "its unit gpufleet-vllm-1.service is failed (failed)" in not_running[0]["message"]
    assert "systemctl status gpufleet-vllm-1.service" in not_running[0]["fix"]
    line = [s for s in result["summary"] if s.startswith("gpu-a: ")][0]
    assert line.endswith("; planned instances: 1 running, 1 stopped, 2 failed"), line


def test_a_unit_that_does_not_exist_is_stopped():
    result = audit({}, deployed_plan(max_instances_per_host=1), source=False, unit_states=recorded_unit_states(
        rename={"gpufleet-vllm-3.service": "gpufleet-vllm-0.service", "gpufleet-vllm-0.service": "x.service"}))
    assert states(result) == [("vllm-0", "stopped", None)]
    assert result["instances"][0]["unit_state"] == "not-found"


def test_a_process_source_and_a_dead_unit_is_stopped():
    """vllm-0 runs on exactly its GPUs; vllm-1..3: nothing holds their GPUs
    and their units are dead or failed."""
    units = recorded_unit_states(rename={"gpufleet-vllm-5.service": "gpufleet-vllm-3.service",
                                         "gpufleet-vllm-3.service": "gpufleet-vllm-9.service"})
    result = audit(RUNNING, deployed_plan(), unit_states=units)
    assert states(result) == [("vllm-0", "running", None), ("vllm-1", "failed", None),
                              ("vllm-2", "failed", None), ("vllm-3", "stopped", None)]
    assert result["instances"][0]["pids"] == [pid_of("tp_server"), pid_of("tp_server_worker")]
    message = by_code(result, "instance_not_running")[-1]["message"]
    assert message.endswith("no process holds its GPUs; its unit gpufleet-vllm-3.service is inactive (dead)"), message


def test_a_dead_unit_wins_over_a_process_on_its_gpus():
    """Processes hold exactly vllm-0's GPUs, but its unit is inactive: not
    the instance its unit runs (a leftover or a hand-started process)."""
    units = recorded_unit_states(rename={"gpufleet-vllm-5.service": "gpufleet-vllm-0.service",
                                         "gpufleet-vllm-0.service": "x.service"})
    result = audit(RUNNING, deployed_plan(max_instances_per_host=1), unit_states=units)
    assert states(result) == [("vllm-0", "stopped", None)]
    found = by_code(result, "instance_not_running")
    assert len(found) == 1 and "though python3 (pid %d and 1 more process) holds exactly its GPUs" % pid_of(
        "tp_server") in found[0]["message"]


def test_processes_on_exactly_its_gpus_run_it_without_unit_state():
    result = audit(RUNNING, deployed_plan(max_instances_per_host=1))
    assert states(result) == [("vllm-0", "running", None)]
    assert result["findings"] == []


def test_elsewhere_is_a_problem_beside_the_state():
    units = recorded_unit_states()
    result = audit({"tp_server": RUNNING["tp_server"]}, deployed_plan(max_instances_per_host=1), unit_states=units)
    assert states(result) == [("vllm-0", "running", "elsewhere")]
    assert [f["code"] for f in result["findings"] if f["instance"] == "vllm-0"] == ["instance_misplaced"]
    page = report_html.html_report([result])
    assert "running; elsewhere" in page and "active (running), main PID 39" in page
    assert report_text.instance_state_text(result["instances"][0]) == "running; elsewhere"


def test_a_replay_without_a_process_list_and_without_unit_state_is_unknown_naming_why():
    units = {"source": None, "units": {}, "missing": "a replayed capture holds no unit state"}
    result = audit({}, deployed_plan(max_instances_per_host=1), source=False, unit_states=units)
    assert states(result) == [("vllm-0", "unknown", None)]
    assert by_code(result, "instance_state_unknown")[0]["message"].endswith(
        "(a replayed capture holds no unit state)")


# ------------------------------------------------------------ engine drift

def test_engine_drift_from_the_replayed_process_environment():
    """The recorded processes' environ (a capture) says GPUFLEET_ENGINE=vllm==0.10.0;
    the kept plan says vllm==0.11.0 was deployed."""
    facts, dummy = audit_replay.gather_capture(capture_with_processes(DGX2, {}))
    capture = capture_with_processes(DGX2, RUNNING)
    for pid in (pid_of("tp_server"), pid_of("tp_server_worker")):
        path = "/proc/%d/environ" % pid
        capture["files"][path] = capture["files"][path].replace(
            "CUDA_VISIBLE_DEVICES=6,7,8,9\0", "CUDA_VISIBLE_DEVICES=0,1,2,3\0") + "GPUFLEET_ENGINE=vllm==0.10.0\0"
    facts, processes = audit_replay.gather_capture(capture)
    assert processes["processes"][0]["environment"]["GPUFLEET_ENGINE"] == "vllm==0.10.0"
    result = audit_result.audit_result(facts, processes, "gpu-a", deployed_plan(
        deployed={"engine": "vllm==0.11.0", "unit_sha1": "0" * 40}, max_instances_per_host=1))
    drift = by_code(result, "engine_drift")
    assert [(f["severity"], f["instance"]) for f in drift] == [("error", "vllm-0")]
    assert drift[0]["message"] == "instance vllm-0 runs vllm==0.10.0, the kept plan says vllm==0.11.0 was deployed"
    assert drift[0]["fix"] == "redeploy: the role restarts every instance whose engine changed"
    assert result["instances"][0]["engine"] == "vllm==0.10.0"


def test_no_engine_drift_when_it_matches_or_the_plan_is_older():
    same = audit(RUNNING, deployed_plan(deployed={"engine": "vllm==0.11.0"}, max_instances_per_host=1),
                 environment={"GPUFLEET_ENGINE": "vllm==0.11.0"})
    older = audit(RUNNING, deployed_plan(max_instances_per_host=1), environment={"GPUFLEET_ENGINE": "vllm==0.10.0"})
    assert by_code(same, "engine_drift") == [] and by_code(older, "engine_drift") == []
    assert same["findings"] == []


def test_an_engine_value_from_the_host_is_cut_and_escaped():
    hostile = "vllm==0.10.0\n" + "x" * 500
    result = audit(RUNNING, deployed_plan(deployed={"engine": "vllm==0.11.0"}, max_instances_per_host=1),
                   environment={"GPUFLEET_ENGINE": hostile})
    message = by_code(result, "engine_drift")[0]["message"]
    assert "\n" not in message and "x" * 200 not in message and "\\n" in message


def test_the_units_the_kept_plan_names_are_the_ones_read():
    plan = copy.deepcopy(deployed_plan(max_instances_per_host=1))
    plan["plan"]["instances"][0]["deployed"] = {"unit": "gpufleet-vllm-1.service"}
    result = audit({}, plan, source=False, unit_states=recorded_unit_states())
    assert result["instances"][0]["unit"] == "gpufleet-vllm-1.service"
    assert states(result) == [("vllm-0", "failed", None)]
