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
MACHINES = os.path.join(REPO, "tests", "fixtures", "machines")


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


def ad_hoc(module, args=None, extra=(), raw=False):
    """Run `ansible localhost -m MODULE -a ARGS`; return (rc, result dict),
    and with raw=True also everything ansible printed."""
    argv = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", module]
    if args:
        argv += ["-a", args]
    argv += list(extra)
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120, check=False)
    dummy_head, sep, payload = proc.stdout.partition("=>")
    assert sep, "no result in ansible output:\n%s\n%s" % (proc.stdout, proc.stderr)
    if raw:
        return proc.returncode, json.loads(payload), proc.stdout + proc.stderr
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
    path = os.path.join("tests", "fixtures", "machines", machine, "capture.yml")
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
    assert set(doc["doc"]["options"]) == {"root", "record", "capture", "capture_max_bytes", "nvml", "nvidia_smi",
                                          "nvidia_smi_timeout", "cgroup_slice"}
    assert "numa_topology" in doc["return"]["ansible_facts"]["contains"]


def escape_probe_tree(tmp_path):
    """A two-GPU sysfs tree an attacker prepared: links out of the root to
    /etc/passwd (relative and absolute), a FIFO, and a hanging nvidia-smi."""
    from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import SysfsBuilder, write_tree

    b = SysfsBuilder()
    b.node(0, "0-1", memory_kb=1 << 20).node(1, "2-3", memory_kb=1 << 20).online("0-3")
    b.device("0000:01:00.0", ["pci0000:00", "0000:00:01.0"], "0x030200", "0x10de", numa_node="0", local_cpus="0-1")
    b.device("0000:81:00.0", ["pci0000:80", "0000:80:01.0"], "0x030200", "0x10de", numa_node="1", local_cpus="2-3")
    root = tmp_path / "root"
    write_tree(b.capture(), root)
    node = root / "sys" / "devices" / "system" / "node"
    (node / "node0" / "cpulist").unlink()
    os.symlink("../" * 12 + "etc/passwd", str(node / "node0" / "cpulist"))
    (node / "node1" / "meminfo").unlink()
    os.symlink("/etc/passwd", str(node / "node1" / "meminfo"))
    fifo = root / "sys" / "devices" / "pci0000:80" / "0000:80:01.0" / "0000:81:00.0" / "numa_node"
    fifo.unlink()
    os.mkfifo(str(fifo))
    hangs = tmp_path / "nvidia-smi"
    hangs.write_text("#!/bin/sh\nsleep 3600\n")
    hangs.chmod(0o755)
    return root, hangs


def test_numa_facts_module_escape_probe_reads_nothing_outside_root(tmp_path):
    root, hangs = escape_probe_tree(tmp_path)
    rc, result, printed = ad_hoc(
        "gpufleet.numa.numa_facts",
        "root=%s nvml=false nvidia_smi=%s nvidia_smi_timeout=1" % (root, hangs), raw=True)
    assert rc == 0, result
    with open("/etc/passwd") as handle:
        secrets = [line.strip() for line in handle if len(line.strip()) > 8]
    assert secrets and not [line for line in secrets if line in printed]
    assert "root:x:0:0" not in printed
    facts = result["ansible_facts"]["numa_topology"]
    warnings = facts["warnings"]
    assert "/sys/devices/system/node/node0/cpulist: leads above the root %s; not read" % root in warnings
    assert any(w.startswith("/sys/devices/system/node/node1/meminfo: symlink to '/etc/passwd': taken below the root")
               for w in warnings), warnings
    assert "/sys/bus/pci/devices/0000:81:00.0/numa_node: is a FIFO, not a regular file; not read" in warnings
    assert any("no answer within 1 s" in w for w in warnings), warnings
    assert facts["numa_nodes"][0]["cpus"] is None and facts["numa_nodes"][1]["memory_mb"] is None
    assert [g["id"] for g in facts["gpus"]] == ["0000:01:00.0", "0000:81:00.0"]
    # The topology warnings are Ansible warnings too.
    assert "[WARNING]: /sys/devices/system/node/node0/cpulist: leads above the root" in printed


def test_numa_facts_module_missing_root_fails_naming_it(tmp_path):
    rc, result = ad_hoc("numa_facts", "root=%s" % (tmp_path / "gone"))
    assert rc != 0
    assert result["msg"] == "numa_facts: root %s does not exist" % (tmp_path / "gone")


def test_numa_facts_module_bad_cgroup_slice_fails_naming_it():
    rc, result = ad_hoc("numa_facts", "cgroup_slice=../../etc")
    assert rc != 0
    assert result["msg"] == "numa_facts: cgroup_slice: must not contain '..' (got '/../../etc')"


def test_numa_facts_action_replay_reads_the_given_slice(tmp_path):
    path = os.path.join(MACHINES, "mi300x_8gpu_lxc_cpuset", "capture.yml")
    with open(path) as handle:
        text = handle.read()
    # the same container, its services in vllm.slice, which has a cpuset of its own
    copy = tmp_path / "capture.yml"
    copy.write_text(text.replace("files:\n", 'files:\n  /sys/fs/cgroup/vllm.slice/cpuset.cpus.effective: "0-7,112-119"\n', 1))
    rc, result = ad_hoc("numa_facts", "capture=%s cgroup_slice=vllm.slice" % copy)
    assert rc == 0, result
    assert [n["usable_cpus"] for n in result["ansible_facts"]["numa_topology"]["numa_nodes"]] == ["0-7,112-119", ""]
    rc, result = ad_hoc("numa_facts", "capture=%s" % copy)
    assert [n["usable_cpus"] for n in result["ansible_facts"]["numa_topology"]["numa_nodes"]] == [
        "0-14,112-126", "56-71,168-183"]


def test_numa_facts_action_replay_warnings_are_ansible_warnings():
    path = os.path.join(MACHINES, "rtx3090_2gpu_threadripper_numa_na", "capture.yml")
    rc, result, printed = ad_hoc("numa_facts", "capture=%s" % path, raw=True)
    assert rc == 0, result
    assert "GPU GPU0: NUMA node unknown (no source gives it)" in result["ansible_facts"]["numa_topology"]["warnings"]
    assert "[WARNING]: GPU GPU0: NUMA node unknown (no source gives it)" in printed


@pytest.mark.parametrize("text, args, problem", [
    ("capture_version: 1\nnotes:\n  a: &a [x, x, x, x, x, x, x, x, x]\n"
     + "".join("  %s: &%s [%s]\n" % (c, c, ",".join(["*" + p] * 9)) for p, c in zip("abcdefgh", "bcdefghi")),
     "", "aliases expand to more than 10000 extra nodes"),
    ("capture_version: 1\nnotes: " + "[" * 100000 + "]" * 100000 + "\n", "", "nested more than 32 levels deep"),
    ("capture_version: 1\nnotes: %s\n" % ("x" * 300), "capture_max_bytes=100",
     "is larger than 100 bytes (capture_max_bytes)"),
])
def test_numa_facts_action_hostile_capture_fails_cleanly(tmp_path, text, args, problem):
    path = tmp_path / "hostile.yml"
    path.write_text(text)
    rc, result, printed = ad_hoc("numa_facts", "capture=%s %s" % (path, args), raw=True)
    assert rc != 0
    assert str(path) in result["msg"] and problem in result["msg"], result["msg"]
    assert "Traceback" not in printed and "dead state" not in printed
