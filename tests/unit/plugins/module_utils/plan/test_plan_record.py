# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The state of record: only hosts that converged take their proposed
entries; hosts leave the record only once taken down; the gateway routes
the recorded entries of hosts in the fleet. On plans of recorded machines."""

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


@pytest.fixture(scope="module")
def facts():
    return dict((host, topology.facts_from_capture(os.path.join(fixture_paths.MACHINES, folder, "capture.yml")))
                for host, folder in MACHINES.items())


def proposal(facts, previous=None, hosts=FLEET, **options):
    options.setdefault("tp_size", 4)
    fresh = placement.plan_fleet(dict((h, facts[h]) for h in hosts), **options)
    return plan_artifact.merge_plans(fresh, previous, hosts, FLEET)["plan"]


def runs(plan, hosts, engine="vllm==0.11.0"):
    return dict((h, {"engine": engine, "files": FILES, "instances": dict(
        (i["name"], {"unit": "gpufleet-%s.service" % i["name"], "unit_sha1": SHA, "engine": engine})
        for i in plan["instances"] if i["host"] == h)}) for h in hosts)


def test_nothing_is_recorded_before_a_host_converged(facts):
    first = proposal(facts)
    assert plan_record.record_hosts(None, first, [], {}) == plan_record.empty_record()
    only_h100 = plan_record.record_hosts(None, first, ["h100"], runs(first, ["h100"]))
    assert sorted(only_h100["hosts"]) == ["h100"]
    assert [i["host"] for i in only_h100["instances"]] == ["h100", "h100"]
    assert only_h100["totals"] == {"hosts": 1, "instances": 2, "gpus": 8, "gpus_used": 8, "gpus_unused": 0}
    # what runs is recorded with each instance, and where the host's units are
    assert only_h100["instances"][0]["deployed"] == {"engine": "vllm==0.11.0", "unit": "gpufleet-vllm-0.service",
                                                     "unit_sha1": SHA}
    assert only_h100["hosts"]["h100"]["files"] == FILES
    # the record passes the kept plan's own checks
    assert plan_artifact.load_artifact(plan_artifact.dump_artifact(only_h100)) == only_h100


def test_a_host_that_did_not_converge_keeps_its_recorded_entries(facts):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    # the next run proposes tp 2 on both; only rtx4090 converges
    second = proposal(facts, record, tp_size=2)
    after = plan_record.record_hosts(record, second, ["rtx4090"], runs(second, ["rtx4090"]))
    assert [i for i in after["instances"] if i["host"] == "h100"] == [
        i for i in record["instances"] if i["host"] == "h100"]
    assert [len(i["gpus"]) for i in after["instances"] if i["host"] == "rtx4090"] == [2, 2, 2, 2]
    assert after["hosts"]["h100"] == record["hosts"]["h100"]
    assert after["totals"]["instances"] == 6


def test_a_converged_host_the_proposal_does_not_hold_keeps_its_entries(facts):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    limited = proposal(facts, record, hosts=["rtx4090"])
    without_h100 = dict(limited, hosts=dict((h, e) for h, e in limited["hosts"].items() if h != "h100"),
                        instances=[i for i in limited["instances"] if i["host"] != "h100"])
    after = plan_record.record_hosts(record, without_h100, FLEET, runs(without_h100, ["rtx4090"]))
    assert [i for i in after["instances"] if i["host"] == "h100"] == [
        i for i in record["instances"] if i["host"] == "h100"]


def test_a_recorded_deployed_field_of_the_proposal_never_survives_without_a_report(facts):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    # a kept host re-proposed as recorded (deployed fields included) and reported without instances
    again = plan_record.record_hosts(record, copy.deepcopy(record), ["h100"], {"h100": {"engine": "x"}})
    assert all("deployed" not in i for i in again["instances"] if i["host"] == "h100")


def test_forget_routed_and_to_remove(facts):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    # h100 left gpu_servers: still recorded (its units may run), no longer routed
    assert plan_record.to_remove(record, ["rtx4090"]) == ["h100"]
    routed = plan_record.routed(record, ["rtx4090"])
    assert sorted(routed["hosts"]) == ["rtx4090"] and set(i["host"] for i in routed["instances"]) == {"rtx4090"}
    forgotten = plan_record.forget_hosts(record, ["h100"])
    assert forgotten == routed
    assert plan_record.to_remove(forgotten, ["rtx4090"]) == []
    assert plan_record.forget_hosts(forgotten, ["rtx4090"]) == plan_record.empty_record()


def test_warnings_follow_their_hosts(facts):
    first = proposal(facts)
    one = {"host": "h100", "text": "one", "gpus": [], "nodes": [0]}
    first["warnings"] = [one, {"host": "rtx4090", "text": "two", "gpus": [], "nodes": []}]
    record = plan_record.record_hosts(None, first, ["h100"], {})
    assert record["warnings"] == [one]
    assert plan_record.forget_hosts(record, ["h100"])["warnings"] == []


def test_retired_instances_are_the_recorded_ones_no_longer_proposed(facts):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    narrower = proposal(facts, record, max_instances_per_host=1)
    assert plan_record.retired_instances(record, narrower, FLEET) == {"h100": ["vllm-1"], "rtx4090": ["vllm-1"]}


@pytest.mark.parametrize("value, expected", [
    ("all", ["h100", "rtx4090"]), ("h100", ["h100"]), (" rtx4090 , h100 ", ["h100", "rtx4090"]),
    (["rtx4090"], ["rtx4090"])])
def test_chosen_hosts(facts, value, expected):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    assert plan_record.chosen_hosts(record, value) == expected


@pytest.mark.parametrize("value, message", [
    (None, "gpufleet_decommission: is required: name the hosts to take down"),
    ("", "gpufleet_decommission: is required"),
    ("gpu-z", r"gpufleet_decommission: gpu-z is not in the kept plan \(recorded: h100, rtx4090\)"),
    ("gpu-y,gpu-z", "gpufleet_decommission: gpu-y, gpu-z are not in the kept plan"),
    (7, "gpufleet_decommission: must be all, or a list of inventory hosts"),
    ([1], "gpufleet_decommission: must be all, or a list of inventory hosts")])
def test_chosen_hosts_refuses(facts, value, message):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    with pytest.raises(ValueError, match="^" + message):
        plan_record.chosen_hosts(record, value)


def test_a_report_that_is_no_mapping_is_refused(facts):
    first = proposal(facts)
    with pytest.raises(ValueError, match="host h100: vllm_deployed must be the mapping role vllm sets"):
        plan_record.record_hosts(None, first, ["h100"], {"h100": ["not", "a", "mapping"]})


def test_the_record_as_a_proposal_holds_no_run_records(facts):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    again = plan_record.as_proposal(record)
    assert [dict(i, deployed=r["deployed"]) for i, r in zip(again["instances"], record["instances"])] == record["instances"]
    assert not any("deployed" in i for i in again["instances"])
    assert again["hosts"] == record["hosts"]


def test_a_gateway_or_the_controller_is_never_taken_down_as_a_gpu_host(facts):
    # The red-team probe: a record naming the gateway as a GPU host made a
    # plain deploy "take down" the gateway.
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    with pytest.raises(ValueError, match=r"^the kept plan names h100 as GPU host\(s\) \(hosts\.h100\), but it is the "
                                         r"controller or a gateway, not in gpu_servers"):
        plan_record.to_remove(record, ["rtx4090"], gateways=["h100", "lb"])
    # A host that is both a gateway and a GPU server stays a GPU server.
    assert plan_record.to_remove(record, FLEET, gateways=["h100"]) == []
    with pytest.raises(ValueError, match="names h100"):
        plan_record.chosen_hosts(record, "all", fleet=["rtx4090"], gateways=["h100"])
    assert plan_record.chosen_hosts(record, "all", fleet=FLEET, gateways=["h100"]) == FLEET
    local = dict(record, hosts=dict(record["hosts"], localhost=record["hosts"]["h100"]))
    with pytest.raises(ValueError, match=r"names localhost as GPU host"):
        plan_record.to_remove(local, FLEET)
