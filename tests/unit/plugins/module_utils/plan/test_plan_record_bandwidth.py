# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A host's measured bandwidth in the kept plan (hosts.HOST.bandwidth,
docs/bandwidth.md): written for recorded hosts only, kept across later
deploys while the host's hardware record is the same, removed with the
host, and checked field by field when the kept plan is loaded. On plans of
recorded machines."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology

MACHINES = {"h100": "h100_sxm_8gpu_nvswitch", "rtx4090": "rtx4090_8gpu_pcie_switch_quads"}
FLEET = sorted(MACHINES)
SHA = "0123456789abcdef0123456789abcdef01234567"
FILES = {"unit_dir": "/etc/systemd/system", "config_dir": "/etc/vllm", "unit_prefix": "gpufleet-"}


def figures(nodes=(0, 1), gbps=90.0):
    return {"version": 1, "measured_at": "2025-05-01T12:00:00Z", "python": "/opt/vllm/bin/python", "size_mib": 256,
            "seconds": 0.5,
            "memory": {"method": "torch-triad", "notes": [], "pairs": [
                {"cpu_node": c, "memory_node": m, "gbps": gbps if c == m else gbps / 2, "threads": 8}
                for c in nodes for m in nodes]},
            "gpus": {"method": None, "copies": [], "notes": ["not measured: gpus is false"]}}


@pytest.fixture(scope="module")
def facts():
    return dict((host, topology.facts_from_capture(os.path.join(fixture_paths.MACHINES, folder, "capture.yml")))
                for host, folder in MACHINES.items())


def proposal(facts, previous=None, hosts=FLEET):
    fresh = placement.plan_fleet(dict((h, facts[h]) for h in hosts), tp_size=4)
    fresh["hardware"] = dict((h, plan_artifact.hardware_record(facts[h])) for h in hosts)
    return plan_artifact.merge_plans(fresh, previous, hosts, FLEET)["plan"]


def runs(plan, hosts):
    return dict((h, {"engine": "vllm==0.11.0", "files": FILES, "instances": dict(
        (i["name"], {"unit": "gpufleet-%s.service" % i["name"], "unit_sha1": SHA, "engine": "vllm==0.11.0"})
        for i in plan["instances"] if i["host"] == h)}) for h in hosts)


@pytest.fixture
def recorded(facts):
    """The kept plan once h100 converged (rtx4090 never deployed)."""
    first = proposal(facts)
    return plan_record.record_hosts(None, first, ["h100"], runs(first, ["h100"]))


def test_record_bandwidth_keeps_the_figures_of_recorded_hosts_only(recorded):
    assert recorded["hosts"]["h100"]["hardware"]["numa_nodes"] == [0, 1]
    found = plan_record.record_bandwidth(recorded, {"h100": figures(), "rtx4090": figures()})
    assert found["kept"] == ["h100"]
    assert found["not_kept"] == {"rtx4090": "not in the kept plan (deploy it first; its figures are shown above)"}
    assert found["record"]["hosts"]["h100"]["bandwidth"] == figures()
    assert sorted(found["record"]["hosts"]) == ["h100"]  # no host entry made for a host never deployed
    assert "bandwidth" not in recorded["hosts"]["h100"]  # the record given is not changed
    # the new record passes the kept plan's own checks, through its JSON
    text = plan_artifact.dump_artifact(found["record"])
    assert plan_artifact.load_artifact(text, "p")["hosts"]["h100"]["bandwidth"] == figures()


def test_record_bandwidth_refuses_figures_of_nodes_the_host_was_not_deployed_with(recorded):
    found = plan_record.record_bandwidth(recorded, {"h100": figures(nodes=(0, 1, 2))})
    assert found["kept"] == [] and "bandwidth" not in found["record"]["hosts"]["h100"]
    assert found["not_kept"]["h100"].startswith(
        "its figures do not fit its kept entry (hosts.'h100'.bandwidth.memory.pairs[2].memory_node: must be a NUMA "
        "node this host has (0, 1) (got 2)): deploy it again, then measure")


def test_a_later_deploy_keeps_the_figures_while_the_hardware_is_the_same(facts, recorded):
    measured = plan_record.record_bandwidth(recorded, {"h100": figures()})["record"]
    again = proposal(facts, previous=measured)
    assert "bandwidth" not in again["hosts"]["h100"]  # the proposal is the plan's, not the record's
    after = plan_record.record_hosts(measured, again, ["h100", "rtx4090"], runs(again, ["h100", "rtx4090"]))
    assert after["hosts"]["h100"]["bandwidth"] == figures()
    assert "bandwidth" not in after["hosts"]["rtx4090"]
    assert plan_artifact.load_artifact(plan_artifact.dump_artifact(after), "p") == after
    # a host that did not converge keeps its whole entry, figures included
    assert plan_record.record_hosts(measured, again, [], {})["hosts"]["h100"]["bandwidth"] == figures()


def test_changed_hardware_drops_the_figures(facts, recorded):
    measured = plan_record.record_bandwidth(recorded, {"h100": figures()})["record"]
    changed = copy.deepcopy(facts["h100"])
    changed["numa_nodes"] = changed["numa_nodes"][:1]
    again = plan_artifact.merge_plans(dict(placement.plan_fleet({"h100": facts["h100"]}, tp_size=4),
                                           hardware={"h100": plan_artifact.hardware_record(changed)}),
                                      measured, ["h100"], FLEET)["plan"]
    after = plan_record.record_hosts(measured, again, ["h100"], runs(again, ["h100"]))
    assert "bandwidth" not in after["hosts"]["h100"]


def test_taking_the_host_down_removes_its_figures(recorded):
    measured = plan_record.record_bandwidth(recorded, {"h100": figures()})["record"]
    assert plan_record.forget_hosts(measured, ["h100"])["hosts"] == {}


@pytest.mark.parametrize("change, message", [
    (lambda b: b["memory"]["pairs"][0].update(gbps="fast"),
     "plan file p: hosts.'h100'.bandwidth.memory.pairs[0].gbps: must be a number of GB/s (got 'fast')"),
    (lambda b: b["memory"]["pairs"][1].update(memory_node=7),
     "plan file p: hosts.'h100'.bandwidth.memory.pairs[1].memory_node: must be a NUMA node this host has (0, 1) (got 7)"),
    (lambda b: b.update(verdict="binding worth 100x here"),
     "plan file p: hosts.'h100'.bandwidth: has unknown field(s) verdict"),
    (lambda b: b["gpus"].update(copies=[{}] * 70000),
     "plan file p: hosts.'h100'.bandwidth.gpus.copies: must hold at most 65536 entries"),
])
def test_the_kept_plan_refuses_bad_figures_naming_the_field(recorded, change, message):
    measured = plan_record.record_bandwidth(recorded, {"h100": figures()})["record"]
    bad = copy.deepcopy(measured)
    change(bad["hosts"]["h100"]["bandwidth"])
    with pytest.raises(ValueError) as caught:
        plan_artifact.load_artifact(plan_artifact.dump_artifact(bad), "p")
    assert str(caught.value).startswith(message)
