# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Checked before anything changes: the real playbook on a copy of the demo
inventory with one error of each kind stops in its first task, says every
error at once (host and variable), and writes nothing at all."""

import os
import pathlib
import shutil
import subprocess

import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import demo_fleet

REPO = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"


def test_one_broken_inventory_every_error_nothing_written(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventories" / "demo", inventory)
    with open(inventory / "group_vars" / "gateways.yml", "a", encoding="utf-8") as handle:
        handle.write("gateway_listen_port: eighty\n")
    with open(inventory / "group_vars" / "gpu_servers.yml", "a", encoding="utf-8") as handle:
        handle.write("gpufleet_rollout_hosts_at_once: 2\n")
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    groups = hosts["all"]["children"]
    groups["gpu_servers"]["hosts"]["demo-h100-nvswitch"].update(vllm_listen_host="0.0.0.0", gpufleet_tp_szie=2)
    groups["gpu_servers"]["hosts"]["demo-a6000-nvlink"].update(vllm_served_model_nmae="llama-3.1-70b",
                                                               vllm_extra_args={"enable-prefix-cacheing": True})
    groups["gateways"]["hosts"]["lb-1"] = {"ansible_host": "127.0.0.5", "gateway_listen_address": "0.0.0.0",
                                           "gateway_listen_port": 8081}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    staging = tmp_path / "staging"
    env = dict(os.environ, GPUFLEET_REPO=str(REPO), GPUFLEET_STAGING=str(staging),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), str(REPO / "playbooks" / "deploy_inference.yml"), "-i", str(inventory / "hosts.yml")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=300)
    out = proc.stdout
    assert proc.returncode == 2, out[-4000:]
    for expected in (
            "demo-gateway: gateway_listen_port: must be an integer (got 'eighty')",
            "lb-1: gateway_api_key: is required when the gateway listens beyond loopback",
            "demo-h100-nvswitch: vllm_api_key: is required when vllm_listen_host is not a loopback address "
            "(got 0.0.0.0)",
            "demo-h100-nvswitch: gpufleet_tp_szie: is no variable of the collection (did you mean gpufleet_tp_size?)",
            "demo-a6000-nvlink: vllm_served_model_nmae: is no variable of the collection "
            "(did you mean vllm_served_model_name?)",
            "demo-a6000-nvlink: vllm_extra_args key: is no option of vllm serve 0.33.0 (did you mean "
            "enable-prefix-caching?) (got 'enable-prefix-cacheing')",
            # set once for the group: said once, naming the group, not once per host
            "every GPU server (3 hosts): gpufleet_rollout_hosts_at_once: is a play keyword input (serial), which "
            "inventory variables do not reach: give it with -e or in the playbook's vars"):
        assert expected in out, out[-4000:]
    assert "demo-rtx4090-pcie: gpufleet_rollout_hosts_at_once" not in out
    # the first task of the run: no topology gathered, no argument_spec dump
    assert "Gather NUMA topology facts" not in out
    assert "argument_spec" not in out.lower()
    # nothing at all written: no unit, no haproxy.cfg, no plan file
    assert not staging.exists() or list(staging.rglob("*")) == []


def test_a_gateway_on_a_backends_own_address_and_port_stops_before_anything_changes(tmp_path):
    """The proposal's check: the gateway bound where demo-h100-nvswitch's
    vllm-0 serves (127.0.0.2:8000) would keep one of them from starting."""
    fleet = demo_fleet.demo_copy(tmp_path)

    def clash(groups):
        groups["gateways"]["hosts"]["demo-gateway"].update(gateway_listen_address="127.0.0.2",
                                                           gateway_listen_port=8000)
    out = demo_fleet.run_playbook(fleet, "deploy_inference.yml", demo_fleet.write_inventory(fleet, "hosts.yml", clash),
                                  rc=2)
    assert ("demo-gateway: gateway_listen_address: listens on 127.0.0.2:8000, where backend "
            "demo-h100-nvswitch-vllm-0 serves (127.0.0.2:8000 on demo-h100-nvswitch): give the gateway another "
            "port or address") in out
    assert "Deploy one NUMA-bound vLLM unit" not in out
    assert not fleet["staging"].exists() or list(fleet["staging"].rglob("*")) == []


def test_a_run_limited_to_the_gateway_is_checked_first(tmp_path):
    fleet = demo_fleet.demo_copy(tmp_path)

    def broken(groups):
        groups["gateways"]["hosts"]["demo-gateway"]["gateway_listen_port"] = "eighty"
    out = demo_fleet.run_playbook(fleet, "deploy_inference.yml", demo_fleet.write_inventory(fleet, "hosts.yml", broken),
                                  "-l", "gateways", rc=2)
    assert "demo-gateway: gateway_listen_port: must be an integer (got 'eighty')" in out
    assert "argument_spec" not in out.lower()
    assert not fleet["staging"].exists() or list(fleet["staging"].rglob("*")) == []


def test_tp_the_models_heads_do_not_divide_stops_before_anything_changes(tmp_path, monkeypatch):
    """The model's config.json at hand on the controller: a local path, and a
    snapshot in the Hugging Face cache (refs/main)."""
    model = tmp_path / "llama-70b"
    model.mkdir()
    (model / "config.json").write_text('{"num_attention_heads": 64, "num_hidden_layers": 80}')
    commit = "0123456789abcdef0123456789abcdef01234567"  # refs/main holds a commit hash
    snapshot = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"num_attention_heads": 2, "num_hidden_layers": 2}')
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    fleet = demo_fleet.demo_copy(tmp_path)

    def change(groups):
        groups["gpu_servers"]["hosts"][demo_fleet.H100].update(vllm_model=str(model), gpufleet_tp_size=3)
        groups["gpu_servers"]["hosts"][demo_fleet.RTX].update(vllm_model="org/tiny", gpufleet_pp_size=4,
                                                              gpufleet_tp_size=2)
    out = demo_fleet.run_playbook(fleet, "deploy_inference.yml", demo_fleet.write_inventory(fleet, "hosts.yml", change),
                                  rc=2)
    assert ("demo-h100-nvswitch: gpufleet_tp_size: must divide the model's 64 attention heads (%s/config.json): "
            "vLLM refuses it at start (got 3)" % model) in out
    assert ("demo-rtx4090-pcie: gpufleet_pp_size: must be at most the model's 2 layers (%s/config.json): vLLM "
            "refuses it at start (got 4)" % snapshot) in out
    assert "demo-a6000-nvlink:" not in out.split("Check every variable of the fleet", 1)[1].split("PLAY RECAP")[0]
    assert not fleet["staging"].exists() or list(fleet["staging"].rglob("*")) == []
