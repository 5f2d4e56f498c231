# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The numa_facts action plugin in real playbook runs: a capture replays on
the controller without contacting the host, relative paths resolve like
other controller files, and the audit playbook honours numa_capture."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)
FIXTURE = os.path.join(REPO, "tests", "fixtures", "machines", "rtx4090_8gpu_pcie_switch_quads", "capture.yml")


def playbook(path, inventory, cwd):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), str(path)],
        cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
        timeout=180, check=False)
    return proc.returncode, proc.stdout


def test_audit_playbook_replays_numa_capture_without_contacting_host(tmp_path):
    # 192.0.2.0/24 is TEST-NET-1: nothing answers there, so any attempt to
    # reach the host would fail the play.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_servers:\n      hosts:\n        gpu-unreachable:\n          ansible_host: 192.0.2.1\n"
        "          ansible_connection: ssh\n          numa_capture: %s\n" % FIXTURE)
    rc, out = playbook(os.path.join(REPO, "playbooks", "audit_topology.yml"), inventory, REPO)
    assert rc == 0, out
    assert "rtx4090-8gpu: 2 NUMA node(s), 0 socket(s), 8 GPU(s); sources: nvidia-smi, capture" in out
    assert "unreachable=0" in out and "failed=0" in out


def test_action_capture_relative_to_playbook_files_dir(tmp_path):
    play_dir = tmp_path / "site"
    (play_dir / "files" / "captures").mkdir(parents=True)
    shutil.copy(FIXTURE, str(play_dir / "files" / "captures" / "gpu-a.yml"))
    (play_dir / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - gpufleet.numa.numa_facts:\n        capture: captures/gpu-a.yml\n"
        "    - ansible.builtin.assert:\n        that:\n"
        "          - ansible_facts.numa_topology.gpus | length == 8\n"
        "          - ansible_facts.numa_topology.links.GPU0.GPU1 == 'PIX'\n")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("gpu-a ansible_host=192.0.2.1 ansible_connection=ssh\n")
    # Run from elsewhere: the path must resolve against the playbook, not cwd.
    rc, out = playbook(play_dir / "play.yml", inventory, tmp_path)
    assert rc == 0, out


def test_action_capture_invalid_file_fails_task_with_message(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("capture_version: 1\nfilez: {}\n")
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - gpufleet.numa.numa_facts:\n        capture: %s\n" % bad)
    (tmp_path / "hosts.ini").write_text("gpu-a ansible_host=192.0.2.1 ansible_connection=ssh\n")
    rc, out = playbook(tmp_path / "play.yml", tmp_path / "hosts.ini", tmp_path)
    assert rc != 0
    assert "bad.yml has unknown keys filez" in out
    assert "Traceback" not in out


def test_adhoc_numa_facts_replays_each_hosts_numa_capture(tmp_path):
    # Ad hoc, no capture= argument: each recorded host reports its own
    # capture (TEST-NET-1 hosts: contacting one would fail), summary first.
    h100 = os.path.join(REPO, "tests", "fixtures", "machines", "h100_sxm_8gpu_nvswitch", "capture.yml")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: ssh\n  hosts:\n"
        "    gpu-a:\n      ansible_host: 192.0.2.1\n      numa_capture: %s\n"
        "    gpu-b:\n      ansible_host: 192.0.2.2\n      numa_capture: \"{{ '%s' }}\"\n" % (FIXTURE, h100))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(
        [os.path.join(BIN, "ansible"), "all", "-i", str(inventory), "-m", "gpufleet.numa.numa_facts", "-f", "1"],
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
        timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "UNREACHABLE" not in proc.stdout
    assert proc.stdout.count(FIXTURE) == 1 and proc.stdout.count(h100) == 1, proc.stdout[-4000:]
    assert "rtx4090-8gpu: 2 NUMA node(s)" in proc.stdout
    # what a person sees first per host is the summary (numa_summary sorts before numa_topology)
    for block in proc.stdout.split(" | SUCCESS =>")[1:]:
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        assert lines[:2] == ["ansible_facts:", "numa_summary:"], lines[:6]
        assert re.match(r"^- \S+: \d+ NUMA node\(s\), \d+ socket\(s\), \d+ GPU\(s\)", lines[2]), lines[:6]
