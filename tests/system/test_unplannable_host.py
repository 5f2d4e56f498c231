# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A host that cannot be planned never stops the fleet (docs/deploy.md, "A
host that cannot be planned"), on the demo fleet with the real playbooks and
real HAProxy configuration checks: the other hosts deploy and are routed,
the host keeps its recorded instances, and the run fails at its end naming it.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"
H100, RTX, A6000 = "demo-h100-nvswitch", "demo-rtx4090-pcie", "demo-a6000-nvlink"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unplannable")
    inventory = tmp / "inventory"
    shutil.copytree(REPO / "inventories" / "demo" / "group_vars", inventory / "group_vars")
    hosts = yaml.safe_load((REPO / "inventories" / "demo" / "hosts.yml").read_text())
    return {"tmp": tmp, "inventory": inventory, "hosts": hosts, "staging": tmp / "staging"}


def write_inventory(fleet, name, host_vars=None):
    hosts = json.loads(json.dumps(fleet["hosts"]))
    for host, variables in (host_vars or {}).items():
        hosts["all"]["children"]["gpu_servers"]["hosts"][host].update(variables)
    path = fleet["inventory"] / name
    path.write_text(yaml.safe_dump(hosts))
    return path


def run(fleet, inventory, rc=0):
    env = dict(os.environ, GPUFLEET_REPO=str(REPO), GPUFLEET_STAGING=str(fleet["staging"]),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "deploy_inference.yml"), "-i", str(inventory)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=900)
    assert (proc.returncode == 0) == (rc == 0), proc.stdout[-5000:]
    return " ".join(proc.stdout.split())  # the YAML callback folds long lines


def record(fleet):
    return json.loads((fleet["staging"] / "gpufleet-plan.json").read_text())


def recorded(fleet, host):
    return [i for i in record(fleet)["instances"] if i["host"] == host]


def routed(fleet):
    config = (fleet["staging"] / "demo-gateway" / "etc" / "haproxy" / "haproxy.cfg").read_text()
    return sorted(re.findall(r"^\s*server (\S+) \S+:(\d+)", config, re.M))


def test_one_unplannable_host_keeps_its_instances_while_the_others_deploy(fleet):
    run(fleet, write_inventory(fleet, "hosts.yml"))
    before = dict((h, recorded(fleet, h)) for h in (H100, RTX, A6000))
    assert all(before.values())

    # tp 16 fits none of the rtx4090's 8 GPUs: the others are planned again and deployed
    out = run(fleet, write_inventory(fleet, "tp16.yml", {RTX: {"gpufleet_tp_size": 16}}), rc=2)
    assert recorded(fleet, RTX) == before[RTX]
    assert recorded(fleet, H100) == before[H100] and recorded(fleet, A6000) == before[A6000]
    assert "planned again: %s, %s" % (A6000, H100) in out
    expected = sorted((i["host"] + "-" + i["name"], str(i["port"])) for i in record(fleet)["instances"])
    assert routed(fleet) == expected
    assert any(name.startswith(RTX + "-") for name, _port in expected)
    assert "deployed: %s:" % A6000 in out and "deployed: %s:" % H100 in out
    assert re.search(r"unplannable: %s: tp_size 16 \S.*?; it keeps its recorded instances vllm-0 :8000" % RTX, out)
    final = re.search(r"msg: '(1 host\(s\) could not be planned and keep their recorded instances: [^']*)'", out)
    assert final, out[-3000:]
    assert RTX in final.group(1) and H100 not in final.group(1) and A6000 not in final.group(1)
    # the failure comes at the end: after the gateway play
    assert out.index("Configure the load balancer") < out.index("could not be planned and keep")
