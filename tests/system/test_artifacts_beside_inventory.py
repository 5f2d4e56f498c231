# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A demo deploy run twice on a copy of inventories/demo given as a
directory, with the plan file left at its default: the plan is kept
beside the inventory (<inventory>.gpufleet/), so the second run parses no
phantom host from it; a clean run prints no [WARNING] and no
[DEPRECATION WARNING]."""

import json
import os
import pathlib
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"


def deploy(inventory, env, extra):
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "playbooks/deploy_inference.yml", "-i", str(inventory), "-e", "@%s" % extra],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=900)


def test_demo_deploy_twice_keeps_the_plan_beside_a_directory_inventory(tmp_path):
    inventory = tmp_path / "inventories" / "demo"
    shutil.copytree(REPO / "inventories" / "demo", inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    # The plan file at its default (the demo keeps it in staging).
    group_vars.write_text("".join(line for line in group_vars.read_text().splitlines(True)
                                  if not line.startswith("gpufleet_plan_file:")))
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"gateway_manage_service": False, "vllm_manage_service": False}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", GPUFLEET_REPO=str(REPO),
               GPUFLEET_STAGING=str(tmp_path / "staging"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible-tmp"))
    first = deploy(inventory, env, extra)
    assert first.returncode == 0, first.stdout[-6000:]
    assert (tmp_path / "inventories" / "demo.gpufleet" / "gpufleet-plan.json").is_file()
    assert not (inventory / "gpufleet-plan.json").exists()
    for run in (first, deploy(inventory, env, extra)):
        assert run.returncode == 0, run.stdout[-6000:]
        assert "[WARNING]" not in run.stdout and "[DEPRECATION WARNING]" not in run.stdout, run.stdout[-6000:]
        assert "ok: [{]" not in run.stdout and "Failed to parse" not in run.stdout


def test_a_plan_at_the_old_default_place_stops_the_run_saying_to_move_it(tmp_path):
    inventory = tmp_path / "demo"
    shutil.copytree(REPO / "inventories" / "demo", inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    group_vars.write_text("".join(line for line in group_vars.read_text().splitlines(True)
                                  if not line.startswith("gpufleet_plan_file:")))
    (inventory / "gpufleet-plan.json").write_text("")
    extra = tmp_path / "extra.json"
    extra.write_text("{}")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", GPUFLEET_REPO=str(REPO),
               GPUFLEET_STAGING=str(tmp_path / "staging"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible-tmp"))
    run = deploy(inventory, env, extra)
    assert run.returncode != 0
    assert "gpufleet_plan_file: is unset, and a file is kept at the old default place" in run.stdout, run.stdout[-6000:]
    assert (inventory / "gpufleet-plan.json").exists()
