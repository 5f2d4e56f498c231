# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The take-down path acts only on what the collection wrote (docs/deploy.md,
"Taking instances and hosts down"), with the real playbooks on the demo fleet.

Red-team round 3: a kept plan whose hosts.HOST.files named another
directory and an empty prefix made a plain deploy stop, disable and delete
planted ssh.service and haproxy.service as root, never touch the host's
real units, and forget the host; a record naming the gateway as a GPU host
made the deploy "take down" the gateway.
"""

import json

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    A6000, demo_copy, record, run_playbook as run, write_inventory)

MARKER = "# Managed by gpufleet.numa (role vllm)\n"


# The host's agent for the gateways (a socket and its service), beside its instances.
AGENT = ["gpufleet-agent-weights.service", "gpufleet-agent.socket", "gpufleet-agent@.service"]


def units(fleet, host):
    """Every unit file of the role on the host: its instances' and its agent's."""
    folder = fleet["staging"] / host / "etc" / "systemd" / "system"
    return sorted(p.name for p in folder.glob("gpufleet-*") if p.suffix in (".service", ".socket")) \
        if folder.exists() else []


def retire_a6000(groups):
    # Out of gpu_servers, still in the inventory with its connection.
    groups["retired"] = {"hosts": {A6000: groups["gpu_servers"]["hosts"].pop(A6000)}}


def _edit_record(fleet, change):
    path = fleet["staging"] / "gpufleet-plan.json"
    text = change(path.read_text())
    path.write_text(text)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """The demo fleet deployed once for the module: each refused run below
    changes nothing, and puts the record it damaged back; the test that
    changes the fleet comes last."""
    fleet = demo_copy(tmp_path_factory.mktemp("take-down"))
    run(fleet, "deploy_inference.yml", write_inventory(fleet, "hosts.yml"))
    assert units(fleet, A6000) == AGENT + ["gpufleet-vllm-0.service", "gpufleet-vllm-1.service"]
    return fleet


@pytest.fixture
def fleet(deployed):
    path = deployed["staging"] / "gpufleet-plan.json"
    kept = path.read_bytes()
    yield deployed
    path.write_bytes(kept)


def test_a_damaged_record_cannot_take_down_what_it_names(fleet, tmp_path):
    # Planted services that carry the role's marker, and a record pointing there.
    planted = tmp_path / "planted"
    planted.mkdir()
    for name in ("ssh.service", "haproxy.service", "secrets.env"):
        (planted / name).write_text(MARKER + "[Service]\n")

    def tamper(text):
        plan = json.loads(text)
        plan["hosts"][A6000]["files"] = {"unit_dir": str(planted), "config_dir": str(planted), "unit_prefix": ""}
        return json.dumps(plan)
    _edit_record(fleet, tamper)
    before = (fleet["staging"] / "gpufleet-plan.json").read_bytes()
    out = run(fleet, "deploy_inference.yml", write_inventory(fleet, "retired.yml", retire_a6000), rc=2)
    # Refused where the record is read, before anything changes.
    assert "hosts.'%s'.files.unit_prefix: must not be empty" % A6000 in out, out[-3000:]
    assert "Deploy one NUMA-bound vLLM unit" not in out
    assert sorted(p.name for p in planted.iterdir()) == ["haproxy.service", "secrets.env", "ssh.service"]
    assert (fleet["staging"] / "gpufleet-plan.json").read_bytes() == before
    assert units(fleet, A6000) == AGENT + ["gpufleet-vllm-0.service", "gpufleet-vllm-1.service"]


def test_a_record_naming_the_gateway_as_a_gpu_host_stops_the_run(fleet):
    base = fleet["inventory"] / "hosts.yml"
    # The A6000's entries renamed to the gateway's name: the deploy would
    # take "demo-gateway" down as a GPU host that left gpu_servers.
    _edit_record(fleet, lambda text: text.replace(A6000, "demo-gateway"))
    before = (fleet["staging"] / "gpufleet-plan.json").read_bytes()
    out = run(fleet, "deploy_inference.yml", base, rc=2)
    assert ("the kept plan names demo-gateway as GPU host(s) (hosts.demo-gateway), but it is the controller or a "
            "gateway, not in gpu_servers: never taken down as a GPU host") in out, out[-3000:]
    assert (fleet["staging"] / "gpufleet-plan.json").read_bytes() == before
    assert "Deploy one NUMA-bound vLLM unit" not in out


def test_a_host_leaves_the_record_only_once_its_units_are_gone(fleet):
    """Last: the run takes vllm-0 down."""
    # A unit edited by hand (no marker): the take-down does not delete it,
    # so the host is not taken down and stays recorded.
    unit = fleet["staging"] / A6000 / "etc" / "systemd" / "system" / "gpufleet-vllm-1.service"
    unit.write_text(unit.read_text().split("\n", 1)[1])
    out = run(fleet, "deploy_inference.yml", write_inventory(fleet, "retired.yml", retire_a6000), rc=2)
    assert ("%s stays in the kept plan: its recorded unit(s) are still there after the take-down: "
            "gpufleet-vllm-1.service (a unit file is still at %s)" % (A6000, unit)) in out, out[-3000:]
    assert A6000 in record(fleet)["hosts"] and unit.exists()
    assert "removed: %s" % A6000 not in out
