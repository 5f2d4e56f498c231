# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Each host preflight finding from a recorded host that has it, and clean
hosts that have none (tests/fixtures/preflight/*.yml): the machine's
capture extended with the case's inputs, planned, its units rendered with
role vllm's defaults, replayed through the readers a live run uses, and
every finding compared field by field."""

from __future__ import annotations

import copy
import glob
import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import VARIABLES
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import findings, probe, readings
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.units import probe_units
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture, load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader

CASES = sorted(glob.glob(os.path.join(fixture_paths.FIXTURES, "preflight", "*.yml")))


def load_case(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def host_case(case):
    """(capture, units, facts, context) of a case: the machine's capture
    extended with the case's inputs, its plan's units, the probe outputs
    under their command lines."""
    machine = os.path.join(fixture_paths.FIXTURES, "machines", case["machine"], "capture.yml")
    capture = copy.deepcopy(load_capture(machine))
    facts = facts_from_capture(capture)
    cpu_host = not facts["gpus"]
    options = dict({"tp_size": 1, "device_class": "cpu"} if cpu_host else {}, **case["plan"])
    plan = placement.plan_fleet({"host": facts}, **options)
    variables = dict(VARIABLES, **case["variables"])
    rendered = probe_units(plan["instances"], variables)
    units = rendered["units"]
    for key, section in (case.get("capture") or {}).items():
        capture.setdefault(key, {}).update(section)
    commands = capture.setdefault("commands", {})
    for name in case.get("accounts") or []:
        commands[readings.getent_command("passwd", name)] = "%s:x:999:999::/var/lib/vllm:/usr/sbin/nologin\n" % name
        commands[readings.getent_command("group", name)] = "%s:x:999:\n" % name
    for unit in units:
        output = (case.get("probes") or {}).get(unit["name"], (case.get("probes") or {}).get("all"))
        if output is not None:
            accounts = case.get("accounts") or []
            commands[probe.probe_command(unit, unit["user"] in accounts, unit["group"] in accounts)] = output
    context = {"captured": not case["live"], "cgroup_slice": "system.slice",
               "numactl_installed_by_role": rendered["numactl_installed_by_role"]}
    return capture, units, facts, context


def case_findings(case):
    capture, units, facts, context = host_case(case)
    read = readings.read_host(CaptureReader(load_capture(capture)), units)
    return findings.host_findings(read, units, facts, context)


@pytest.mark.parametrize("path", CASES, ids=[os.path.basename(p)[:-4] for p in CASES])
def test_host_findings_recorded_host(path):
    case = load_case(path)
    found = case_findings(case)
    assert [(f["check"], f["severity"], f["subject"]) for f in found] == [
        (e["check"], e["severity"], e["subject"]) for e in case["expected"]], found
    for got, expected in zip(found, case["expected"]):
        for fragment in expected["message"]:
            assert fragment in got["message"], (fragment, got)
        for fragment in expected["fix"]:
            assert fragment in got["fix"], (fragment, got)
        assert set(got) == {"check", "severity", "subject", "message", "fix"}
        # every finding that is no information only says how to fix it
        assert got["fix"] or got["severity"] == "info", got


def test_host_findings_cases_cover_every_check_and_a_clean_host():
    cases = [load_case(path) for path in CASES]
    seen = set((e["check"], e["severity"]) for case in cases for e in case["expected"])
    for check in findings.CHECKS:
        assert any(name == check and severity != "info" or check == "sub_numa" and name == check
                   for name, severity in seen), check
    assert [case["machine"] for case in cases if not case["expected"]]


def test_host_findings_numactl_installed_by_role_is_info():
    case = load_case(os.path.join(fixture_paths.FIXTURES, "preflight", "numactl_missing.yml"))
    capture, units, facts, context = host_case(case)
    read = readings.read_host(CaptureReader(load_capture(capture)), units)
    found = findings.check_numactl(read, units, dict(context, numactl_installed_by_role=True))
    assert [(f["check"], f["severity"]) for f in found] == [("numactl", "info")]
    assert "role vllm installs it" in found[0]["message"]


def test_host_findings_systemd_binding_needs_no_numactl():
    case = load_case(os.path.join(fixture_paths.FIXTURES, "preflight", "numactl_missing.yml"))
    case["variables"] = dict(case["variables"], vllm_binding="systemd")
    case["probes"] = {"all": "set_mempolicy OK\nmbind OK\nsched_setaffinity OK\nexit-status 0\n"}
    assert case_findings(case) == []


def test_host_findings_not_pid1_is_not_checked():
    case = load_case(os.path.join(fixture_paths.FIXTURES, "preflight", "clean_this_machine.yml"))
    del case["capture"]["directories"]
    case["capture"]["files"]["/proc/1/comm"] = "bash\n"
    found = case_findings(case)
    assert [(f["check"], f["severity"], f["subject"]) for f in found] == [("syscalls", "info", "vllm-0")]
    assert "systemd is not PID 1 here" in found[0]["message"]


def test_host_findings_live_host_without_cpuset_or_gpu_tools():
    readings_ = {"numactl": None, "numa_balancing": None, "cpuset": None, "persistence": None, "nvswitches": [],
                 "fabric_manager": None, "systemd": True, "probes": [], "warnings": []}
    found = findings.host_findings(readings_, [], {"gpus": [{"vendor": "nvidia", "numa_node": 0}]},
                                   {"cgroup_slice": "system.slice"})
    assert [(f["check"], f["severity"]) for f in found] == [("cpuset_mems", "info"), ("persistence_mode", "info")]
    assert found[1]["message"] == "not checked: neither NVML nor nvidia-smi answered"


def test_worst():
    assert findings.worst([]) is None
    assert findings.worst([{"severity": "info"}, {"severity": "critical"}, {"severity": "warning"}]) == "critical"
