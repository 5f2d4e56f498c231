# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""playbooks/audit_topology.yml on a copy of the demo fleet: it audits the
GPU servers (their recorded captures), not the gateway, and its report
holds a diagram per GPU server."""

import os
import pathlib
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
GPU_SERVERS = ("demo-h100-nvswitch", "demo-rtx4090-pcie", "demo-a6000-nvlink")


def test_audit_playbook_audits_the_gpu_servers_not_the_gateway(tmp_path):
    inventory = tmp_path / "fleet" / "inventory"
    shutil.copytree(REPO / "inventories" / "demo", inventory)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", GPUFLEET_REPO=str(REPO),
               GPUFLEET_STAGING=str(tmp_path / "staging"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible-tmp"))
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "playbooks/audit_topology.yml", "-i", str(inventory)], check=False,
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:]
    recap = done.stdout.split("PLAY RECAP", 1)[1]
    assert "demo-gateway" not in done.stdout, done.stdout[-6000:]
    assert all(host in recap for host in GPU_SERVERS), recap
    page = (tmp_path / "staging" / "reports" / "topology-audit.html").read_text()
    assert page.count('class="host-diagram"') == 3 and "demo-gateway" not in page
