# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""numa_facts end to end: the real ansible command on this machine, live
and replaying captures, plus the module run directly as a program."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)
MACHINES = os.path.join(REPO, "tests", "unit", "fixtures", "machines")


def ansible_env():
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
    })
    return env


def ad_hoc(module, args=None, extra=()):
    """Run `ansible localhost -m MODULE -a ARGS`; return (rc, result dict)."""
    argv = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", module]
    if args:
        argv += ["-a", args]
    argv += list(extra)
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120, check=False)
    dummy_head, sep, payload = proc.stdout.partition("=>")
    assert sep, "no result in ansible output:\n%s\n%s" % (proc.stdout, proc.stderr)
    return proc.returncode, json.loads(payload)


def test_numa_facts_ad_hoc_this_machine_short_name():
    rc, result = ad_hoc("numa_facts")
    assert rc == 0, result
    facts = result["ansible_facts"]["numa_topology"]
    assert result["changed"] is False
    assert facts["schema_version"] == 1
    assert facts["sources"][0] == "sysfs"
    assert facts["numa_nodes"] and facts["numa_nodes"][0]["cpus"]
    assert result["summary"][1].startswith("NUMA node 0")


def test_numa_facts_ad_hoc_check_mode_same_facts():
    rc, result = ad_hoc("gpufleet.numa.numa_facts", extra=["--check"])
    assert rc == 0, result
    assert result["changed"] is False
    assert result["ansible_facts"]["numa_topology"]["numa_nodes"]


@pytest.mark.parametrize("machine", ["rtx3090_2gpu_threadripper_numa_na", "dgx2_v100_16gpu_nvswitch"])
def test_numa_facts_ad_hoc_capture_replays_fixture(machine):
    path = os.path.join("tests", "unit", "fixtures", "machines", machine, "capture.yml")
    rc, result = ad_hoc("gpufleet.numa.numa_facts", "capture=%s" % path)
    assert rc == 0, result
    facts = result["ansible_facts"]["numa_topology"]
    with open(os.path.join(MACHINES, machine, "expected.yml")) as handle:
        expected = yaml.safe_load(handle)
    assert sorted(g["id"] for g in facts["gpus"]) == sorted(expected["gpus"])
    assert "capture" in facts["sources"]
    assert result["capture_file"] == os.path.join(REPO, path)


def test_numa_facts_ad_hoc_capture_missing_file_fails_naming_it():
    rc, result = ad_hoc("numa_facts", "capture=captures/no-such-host.yml")
    assert rc != 0
    assert "captures/no-such-host.yml not found" in result["msg"]


def test_numa_facts_ad_hoc_capture_bad_version_fails_naming_it(tmp_path):
    bad = tmp_path / "old.yml"
    bad.write_text("capture_version: 0\nhostname: x\n")
    rc, result = ad_hoc("numa_facts", "capture=%s" % bad)
    assert rc != 0
    assert "old.yml has capture_version 0" in result["msg"]


def test_numa_facts_ad_hoc_capture_with_record_fails():
    path = os.path.join(MACHINES, "this_machine_ci", "capture.yml")
    rc, result = ad_hoc("numa_facts", "capture=%s record=true" % path)
    assert rc != 0
    assert "cannot be used together" in result["msg"]


def test_numa_facts_ad_hoc_record_then_replay_same_facts(tmp_path):
    rc, recorded = ad_hoc("numa_facts", "record=true")
    assert rc == 0, recorded
    capture = recorded["capture"]
    assert capture["capture_version"] == 1
    assert "/sys/devices/system/cpu/online" in capture["files"]
    path = tmp_path / "here.yml"
    path.write_text(yaml.safe_dump(capture))
    rc, replayed = ad_hoc("numa_facts", "capture=%s" % path)
    assert rc == 0, replayed
    live = recorded["ansible_facts"]["numa_topology"]
    again = replayed["ansible_facts"]["numa_topology"]
    for key in ("numa_nodes", "sockets", "smt_siblings", "gpus", "nics", "links", "hostname"):
        assert again[key] == live[key], key
    assert again["sources"] == live["sources"] + ["capture"]


def test_numa_facts_module_program_refuses_capture_without_action(tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"capture": "x.yml"}}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, ".collections"))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", "numa_facts.py"), str(args)],
                          env=env, stdout=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    result = json.loads(proc.stdout)
    assert result["failed"] is True
    assert "must be replayed on the controller" in result["msg"]


@pytest.mark.parametrize("name", ["numa_facts", "gpufleet.numa.numa_facts"])
def test_numa_facts_ansible_doc_renders(name):
    proc = subprocess.run([os.path.join(BIN, "ansible-doc"), "-j", name], cwd=REPO, env=ansible_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    doc = list(json.loads(proc.stdout).values())[0]
    assert set(doc["doc"]["options"]) == {"root", "record", "capture", "nvml", "nvidia_smi"}
    assert "numa_topology" in doc["return"]["ansible_facts"]["contains"]
