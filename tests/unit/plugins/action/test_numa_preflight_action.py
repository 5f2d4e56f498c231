# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The numa_preflight action plugin in real ad-hoc runs: a host with
numa_capture is replayed without being contacted (and capture="" reads it
live anyway); the findings are worked out on the controller; units of the
wrong shape are refused by name; the preflight_units filter's result is
taken whole (planned), never beside units."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.action.numa_preflight import planned_args

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)
CASE = os.path.join(REPO, "tests", "fixtures", "preflight", "numa_balancing_on.yml")
MACHINE = os.path.join(REPO, "tests", "fixtures", "machines", "this_machine_ci", "capture.yml")


def adhoc(inventory, args, cwd):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([os.path.join(BIN, "ansible"), "all", "-i", str(inventory), "-m",
                           "gpufleet.numa.numa_preflight"] + (["-a", json.dumps(args)] if args else []),
                          cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=180, check=False)
    return proc.returncode, proc.stdout


def result(out):
    """The result the minimal callback prints after "HOST | STATUS => " (YAML, as ansible.cfg says)."""
    return yaml.safe_load(out[out.index("=> ") + 3:])


def test_adhoc_replays_numa_capture_without_contacting_host(tmp_path):
    with open(MACHINE) as handle:
        capture = yaml.safe_load(handle)
    with open(CASE) as handle:
        case = yaml.safe_load(handle)
    for key, section in case["capture"].items():
        capture.setdefault(key, {}).update(section)
    (tmp_path / "capture.yml").write_text(yaml.safe_dump(capture))
    inventory = tmp_path / "hosts.yml"
    # 192.0.2.1 is TEST-NET-1: contacting it would fail the run
    inventory.write_text("all:\n  hosts:\n    gpu-a:\n      ansible_host: 192.0.2.1\n      ansible_connection: ssh\n"
                         "      numa_capture: %s\n" % (tmp_path / "capture.yml"))
    rc, out = adhoc(inventory, {}, REPO)
    assert rc == 0, out
    got = result(out)
    assert got["findings"] == [{
        "check": "numa_balancing", "severity": "warning", "subject": "kernel.numa_balancing",
        "message": got["findings"][0]["message"], "fix": got["findings"][0]["fix"]}]
    assert "numa_balancing is 1" in got["findings"][0]["message"] and got["worst"] == "warning"
    assert got["summary"][0].startswith("warning numa_balancing kernel.numa_balancing: automatic NUMA balancing")
    assert got["capture_file"] == str(tmp_path / "capture.yml") and got["changed"] is False


def test_adhoc_live_local_host_and_bad_units(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    here:\n      ansible_connection: local\n"
                         "      ansible_python_interpreter: %s\n      numa_capture: /nonexistent.yml\n" % sys.executable)
    unit = {"name": "vllm-0", "device": "cpu", "mems": "0", "cpus": "0", "prefix": ["/usr/bin/numactl", "--membind=0"]}
    rc, out = adhoc(inventory, {"capture": "", "units": [unit]}, REPO)
    assert rc == 0, out
    got = result(out)
    assert set(got["readings"]) == {"numactl", "numa_balancing", "cpuset", "persistence", "nvswitches",
                                    "fabric_manager", "systemd", "probes", "warnings"}
    assert got["readings"]["probes"][0]["instance"] == "vllm-0"
    assert "capture_file" not in got
    assert all(set(f) == {"check", "severity", "subject", "message", "fix"} for f in got["findings"])
    rc, out = adhoc(inventory, {"capture": "", "units": [{"name": "vllm-0", "mems": "0"}]}, REPO)
    assert rc != 0 and "units[0].cpus: is required" in out, out
    rc, out = adhoc(inventory, {"capture": "", "planned": {"units": [unit], "numactl_installed_by_role": True}}, REPO)
    assert rc == 0, out
    assert result(out)["readings"]["probes"][0]["instance"] == "vllm-0"


def test_planned_is_the_filters_result_whole_and_never_beside_its_parts():
    planned = {"units": [{"name": "vllm-0"}], "numactl_installed_by_role": True}
    assert planned_args({"planned": planned, "timeout": 5}) == dict(planned, timeout=5)
    assert planned_args({"units": []}) == {"units": []}
    with pytest.raises(ValueError, match="or numactl_installed_by_role, not both"):
        planned_args({"planned": planned, "numactl_installed_by_role": False})
    with pytest.raises(ValueError, match="or numactl_installed_by_role and units, not both"):
        planned_args({"planned": planned, "units": [], "numactl_installed_by_role": False})
    for wrong in ([], {"units": []}, dict(planned, extra=1)):
        with pytest.raises(ValueError, match="must be what the gpufleet.numa.preflight_units filter returns"):
            planned_args({"planned": wrong})
