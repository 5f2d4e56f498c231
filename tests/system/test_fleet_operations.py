# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Operating the demo fleet: partial runs, tags and an unreachable host.

The real playbook on the demo inventory (recorded topologies, everything in
a staging directory). A run limited to some hosts re-plans only those and
keeps the others' instances from the plan kept by the last run, so the
gateway never shrinks; runs that plan nothing (-l gateways, --tags vllm)
deploy from that plan; an unreachable GPU server drops out and is listed
at the end while the others deploy. Each server is planned with its own
placement variables, and a bad one stops the run before anything changes.
"""

import copy
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import playbook_output

REPO = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
HOSTS = ["demo-a6000-nvlink", "demo-h100-nvswitch", "demo-rtx4090-pcie"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """An inventory: the demo's, plus one GPU server that cannot be reached."""
    tmp = tmp_path_factory.mktemp("fleet-ops")
    inventory = tmp / "inventory"
    shutil.copytree(REPO / "inventories" / "demo" / "group_vars", inventory / "group_vars")
    hosts = yaml.safe_load((REPO / "inventories" / "demo" / "hosts.yml").read_text())
    # per-host settings: the a6000 runs TP 2 while the fleet runs TP 4
    hosts["all"]["children"]["gpu_servers"]["hosts"]["demo-a6000-nvlink"]["gpufleet_tp_size"] = 2
    # and serves another model than the rest of the fleet
    hosts["all"]["children"]["gpu_servers"]["hosts"]["demo-a6000-nvlink"].update(
        vllm_model="Qwen/Qwen2.5-7B-Instruct", vllm_served_model_name="qwen2.5-7b")
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    dead = copy.deepcopy(hosts)
    dead["all"]["children"]["gpu_servers"]["hosts"]["dead-host"] = {
        # nothing listens on port 1: unreachable at once
        "ansible_host": "127.0.0.9", "ansible_connection": "ssh", "ansible_port": 1,
    }
    (inventory / "with-dead.yml").write_text(yaml.safe_dump(dead))
    return {"inventory": inventory, "staging": tmp / "staging"}


def deploy(fleet, *args, hosts_file="hosts.yml", rc=0):
    env = dict(os.environ, GPUFLEET_REPO=str(REPO), GPUFLEET_STAGING=str(fleet["staging"]),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), str(REPO / "playbooks" / "deploy_inference.yml"),
         "-i", str(fleet["inventory"] / hosts_file), *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
    )
    assert proc.returncode == rc, playbook_output.failures(proc.stdout)
    return " ".join(proc.stdout.split())  # the YAML callback folds long lines


def backends(fleet):
    config = (fleet["staging"] / "demo-gateway" / "etc" / "haproxy" / "haproxy.cfg").read_text()
    return sorted(re.findall(r"^\s*server (\S+) ", config, re.M))


def models(fleet):
    """{HAProxy backend: sorted server names} of the gateway's configuration."""
    config = (fleet["staging"] / "demo-gateway" / "etc" / "haproxy" / "haproxy.cfg").read_text()
    found = {}
    for section in re.split(r"\n(?=backend )", config)[1:]:
        found[section.split()[1]] = sorted(re.findall(r"^\s*server (\S+) ", section, re.M))
    return found


def kept_plan(fleet):
    return json.loads((fleet["staging"] / "gpufleet-plan.json").read_text())


def test_partial_runs_tags_and_dead_hosts(fleet):
    # One module-long story: each step starts from the state the last left.
    deploy(fleet)
    full = backends(fleet)
    assert len(full) == 8 and kept_plan(fleet)["totals"]["instances"] == 8
    assert kept_plan(fleet)["hosts"]["demo-a6000-nvlink"]["options"]["tp_size"] == 2
    # One backend per served model: the a6000's instances serve qwen2.5-7b.
    assert sorted(models(fleet)) == ["model-llama-3.1-70b", "model-qwen2.5-7b"]
    assert all(name.startswith("demo-a6000-nvlink-") for name in models(fleet)["model-qwen2.5-7b"])
    assert len(models(fleet)["model-qwen2.5-7b"]) == 4

    # --limit one GPU server and the gateway, with another TP size: only that
    # server is re-planned, the gateway keeps every other server's backends.
    # The served name given on the command line applies to the hosts of the
    # run only: the kept a6000 keeps the model its plan recorded.
    out = deploy(fleet, "-l", "demo-h100-nvswitch,demo-gateway", "-e", "gpufleet_tp_size=2",
                 "-e", "vllm_served_model_name=llama-3.1-70b")
    assert "planned again: demo-h100-nvswitch" in out
    assert "kept as recorded in %s: demo-a6000-nvlink, demo-rtx4090-pcie" % (
        fleet["staging"] / "gpufleet-plan.json") in out
    assert "kept: demo-a6000-nvlink: not in this run (--limit)" in out
    after = backends(fleet)
    assert len(after) == 10
    assert [b for b in after if "h100" not in b] == [b for b in full if "h100" not in b]
    plan = kept_plan(fleet)
    assert [len(i["gpus"]) for i in plan["instances"] if i["host"] == "demo-h100-nvswitch"] == [2, 2, 2, 2]
    assert set((i["host"], i["served_model_name"]) for i in plan["instances"]) == {
        ("demo-a6000-nvlink", "qwen2.5-7b"), ("demo-h100-nvswitch", "llama-3.1-70b"),
        ("demo-rtx4090-pcie", "llama-3.1-70b")}
    assert len(models(fleet)["model-qwen2.5-7b"]) == 4 and len(models(fleet)["model-llama-3.1-70b"]) == 6

    # The gateway alone deploys from the kept plan.
    deploy(fleet, "-l", "gateways")
    assert backends(fleet) == after

    # Every tag runs on its own.
    for tag in ("facts", "vllm", "gateway"):
        deploy(fleet, "--tags", tag)
    # --tags plan proposes (the h100 at tp 4 again) and shows that proposal,
    # not the record (h100 at tp 2), but deploys and records nothing.
    recorded = kept_plan(fleet)
    out = deploy(fleet, "--tags", "plan", "--check")
    assert "proposal (not deployed, not recorded: what a run without --tags would deploy):" in out
    assert "recorded plan" not in out
    assert re.search(r"demo-h100-nvswitch vllm-0 llama-3\.1-70b 0,1,2,3 0 \S+ \S+ \S+ 4x1 8000", out), out[-3000:]
    assert re.search(r"demo-h100-nvswitch vllm-1 llama-3\.1-70b 4,5,6,7 1 \S+ \S+ \S+ 4x1 8001", out), out[-3000:]
    assert not re.search(r"demo-h100-nvswitch vllm-[23] llama", out) and "2x1" in out  # the a6000's tp 2
    assert kept_plan(fleet) == recorded and len(backends(fleet)) == 10

    # An unreachable server: the others deploy, it is listed at the end, and
    # the gateway keeps every reachable server's instances.
    out = deploy(fleet, hosts_file="with-dead.yml", rc=4)
    assert "failed: dead-host: not deployed (its errors are above); it has no recorded instances: nothing was deployed on it" in out
    assert "never planned (no instances yet): dead-host" in out
    assert len(backends(fleet)) == 8  # every reachable server at its own tp again

    # A bad per-host value fails before anything changes, naming host and variable.
    before = (fleet["staging"] / "gpufleet-plan.json").read_text()
    out = deploy(fleet, "-e", "gpufleet_pp_size=0", rc=2)
    assert "gpufleet_pp_size: must be at least 1 (got 0)" in out
    assert (fleet["staging"] / "gpufleet-plan.json").read_text() == before

    # One served name for two models: the run stops before anything changes,
    # naming both hosts and the variable.
    config = (fleet["staging"] / "demo-gateway" / "etc" / "haproxy" / "haproxy.cfg").read_text()
    out = deploy(fleet, "-e", "vllm_served_model_name=shared", rc=2)
    assert re.search(r"vllm_served_model_name: hosts demo-\S+ and demo-\S+ both serve the name shared "
                     r"but with different models", out), out[-3000:]
    assert "demo-a6000-nvlink" in out.split("both serve the name shared", maxsplit=1)[0][-80:]
    assert (fleet["staging"] / "gpufleet-plan.json").read_text() == before
    assert (fleet["staging"] / "demo-gateway" / "etc" / "haproxy" / "haproxy.cfg").read_text() == config


def test_a_kept_plan_that_cannot_be_read_stops_the_run(tmp_path_factory):
    """Hostile input, round 2: a plan file that exists but cannot be read
    (a dangling symbolic link, a directory, a FIFO) stops a limited run
    naming the file, before the gateway loses the hosts it does not reach;
    only a path where nothing exists is the first run. A batch size serial
    would misread stops the run before anything changes."""
    tmp = tmp_path_factory.mktemp("fleet-unreadable")
    inventory = tmp / "inventory"
    shutil.copytree(REPO / "inventories" / "demo", inventory)
    fleet = {"inventory": inventory, "staging": tmp / "staging"}
    plan_file = fleet["staging"] / "gpufleet-plan.json"
    deploy(fleet)
    full = backends(fleet)
    assert len(full) == 6  # the demo: TP 4 on three 8-GPU servers
    kept = plan_file.read_text()
    moved = tmp / "kept.json"
    plan_file.rename(moved)
    for make, reason in (
            (lambda: plan_file.symlink_to(tmp / "share-not-mounted" / "gpufleet-plan.json"),
             "it is a symbolic link to '%s', which does not exist" % (tmp / "share-not-mounted" / "gpufleet-plan.json")),
            (plan_file.mkdir, "it is a directory, not a regular file"),
            (lambda: os.mkfifo(str(plan_file)), "it is a FIFO, not a regular file")):
        make()
        # the plan play, and a run that plans nothing (the vllm and gateway plays' pre_tasks)
        for args in (("-l", "demo-h100-nvswitch,demo-gateway"), ("-l", "gateways")):
            out = deploy(fleet, *args, rc=2)
            assert "gpufleet.numa.kept_plan: plan file %s cannot be read: %s" % (plan_file, reason) in out, out[-2000:]
            assert backends(fleet) == full
        if plan_file.is_dir() and not plan_file.is_symlink():
            plan_file.rmdir()
        else:
            plan_file.unlink()
    moved.rename(plan_file)
    assert plan_file.read_text() == kept

    for value in ("abc", "0", "-1", "101%"):
        out = deploy(fleet, "-e", "gpufleet_rollout_hosts_at_once=%s" % value, rc=2)
        assert ("gpufleet_rollout_hosts_at_once: must be a positive integer or a percentage 1%%-100%% (got '%s')"
                % value) in out, out[-2000:]
        assert plan_file.read_text() == kept
