# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""One deploy run as one value (fleet/run.py, made by fleet/plan.py): what
the record holds after each event of a run, and each host's slice, on plans
of recorded machines."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures.fleet_runs import (
    FILES, FLEET, context, deployed, hostvars, machine_facts, propose, runs)
from ansible_collections.gpufleet.numa.plugins.filter import fleet_run as fleet_run_filter
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import plan as fleet_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import run as fleet_run
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact


@pytest.fixture(scope="module")
def facts():
    return machine_facts()


def test_a_first_run_records_nothing_until_a_host_converged(facts):
    run = propose(facts)
    assert run["record"] == run["record_before"] and run["record"]["hosts"] == {}
    assert [i["host"] for i in run["proposal"]["instances"]] == ["h100", "h100", "rtx4090", "rtx4090"]
    assert run["summary"] == {"replanned": FLEET, "kept": [], "not_planned": [], "dropped": []}
    assert (run["converged"], run["removed"], run["leaving"], run["unplannable"]) == ([], [], [], {})
    assert run["gateway"] is None and run["gateway_configured"] is False
    # the proposal as the gateway's backends, checked before anything changes
    assert [(b["host"], b["address"]) for b in run["proposed_backends"]] == [
        ("h100", "10.0.0.1"), ("h100", "10.0.0.1"), ("rtx4090", "10.0.0.2"), ("rtx4090", "10.0.0.2")]
    once = fleet_run.converged(run, ["h100"], runs(run, ["h100"]))
    assert sorted(once["record"]["hosts"]) == ["h100"] and once["converged"] == ["h100"]
    assert run["record"]["hosts"] == {}, "the run before the event is left as it was"


def test_a_host_that_fails_in_the_second_batch_keeps_its_recorded_entries(facts):
    """The question a run object answers in one place: tp 4 -> 2 on both
    hosts, h100 converges in batch 1, rtx4090 fails in batch 2."""
    kept = deployed(facts, tp=4)
    run = propose(facts, kept=kept, tp=2)
    assert len(run["proposal"]["instances"]) == 8
    before = [i for i in run["record"]["instances"] if i["host"] == "rtx4090"]
    run = fleet_run.converged(run, ["h100"], runs(run, ["h100"]))
    run = fleet_run.converged(run, [], {})  # batch 2: rtx4090 did not reach the role's end
    assert [i for i in run["record"]["instances"] if i["host"] == "rtx4090"] == before
    assert len([i for i in run["record"]["instances"] if i["host"] == "h100"]) == 4
    assert run["converged"] == ["h100"]
    lines = fleet_run.report(run, ["h100", "rtx4090", "lb"], ["rtx4090"], "finish")
    assert lines[0].startswith("deployed: h100: ") and lines[1].startswith("failed: rtx4090: not deployed")
    # a host recorded twice in one run is recorded once
    again = fleet_run.converged(run, ["h100"], runs(run, ["h100"]))
    assert again is run


def test_each_host_gets_its_own_slice(facts):
    kept = deployed(facts)
    run = propose(facts, kept=kept, tp=2)
    for host in FLEET:
        own = run["slices"][host]
        assert own["instances"] and all(i["host"] == host for i in own["instances"])
        assert own["recorded"] == ["vllm-0", "vllm-1"]
        assert own["files"] == FILES
        # its servers on the gateway as HAProxy has them now (from the record), none of another host's
        assert [s["name"] for s in own["drain_servers"]] == ["%s-vllm-0" % host, "%s-vllm-1" % host]
        assert own["node_addresses"] == {}
    # no gateway: nothing to drain, nothing proposed to it
    alone = propose(facts, kept=kept, gateways=())
    assert all(s["drain_servers"] == [] for s in alone["slices"].values())
    assert alone["proposed_backends"] is None


def test_hosts_that_leave_the_fleet(facts):
    kept = deployed(facts)
    # rtx4090 left gpu_servers but is still in the inventory: it is taken down
    run = propose(facts, kept=kept, hosts=["h100"], fleet=["h100"], in_run=["h100"],
                  inventory=["h100", "rtx4090", "lb"])
    assert run["leaving"] == ["rtx4090"] and run["summary"]["dropped"] == ["rtx4090"]
    assert run["slices"]["rtx4090"]["recorded"] == ["vllm-0", "vllm-1"]
    assert run["slices"]["rtx4090"]["instances"] == []
    gone = fleet_run.removed(run, ["rtx4090"])
    assert sorted(gone["record"]["hosts"]) == ["h100"] and gone["removed"] == ["rtx4090"]
    assert fleet_run.removed(gone, ["rtx4090"]) is gone
    # not in the inventory: it cannot be reached and stays recorded, to remove
    unreachable = propose(facts, kept=kept, hosts=["h100"], fleet=["h100"], in_run=["h100"], inventory=["h100", "lb"])
    assert unreachable["leaving"] == []
    # a record that names a gateway as a GPU host is damaged: never taken down
    damaged = json_with_host_renamed(kept, "rtx4090", "lb")
    stopped = propose(facts, kept=damaged, hosts=["h100"], fleet=["h100"], in_run=["h100"])
    assert list(stopped) == ["errors"] and len(stopped["errors"]) == 1
    assert stopped["errors"][0].startswith("The fleet cannot be planned; nothing was deployed: ")
    assert "names lb as GPU host" in stopped["errors"][0]


def json_with_host_renamed(text, old, new):
    record = artifact.load_artifact(text)
    record["hosts"][new] = record["hosts"].pop(old)
    for entry in record["instances"] + record["unused"]:
        if entry["host"] == old:
            entry["host"] = new
    record["warnings"] = [dict(w, host=new) if w["host"] == old else w for w in record["warnings"]]
    return artifact.dump_artifact(record)


def test_refused_hosts_join_the_unplannable_and_the_gateway_routes_the_record(facts):
    kept = deployed(facts)
    run = propose(facts, kept=kept, tp=2)
    run = fleet_run.refused(run, {"rtx4090": "host rtx4090: numactl is missing"})
    assert run["unplannable"] == {"rtx4090": "host rtx4090: numactl is missing"}
    run = fleet_run.converged(run, ["h100"], runs(run, ["h100"]))
    routed = fleet_run.routed(run, {"h100": "10.0.0.1", "rtx4090": "10.0.0.2"})
    # what runs: h100's four new instances and rtx4090's two recorded ones
    assert [(b["host"], b["port"]) for b in routed["gateway"]["backends"]] == [
        ("h100", 8000), ("h100", 8001), ("h100", 8002), ("h100", 8003), ("rtx4090", 8000), ("rtx4090", 8001)]
    assert fleet_run.gateway_configured(routed)["gateway_configured"] is True
    lines = fleet_run.report(routed, FLEET, [], "finish")
    assert lines[1] == "unplannable: rtx4090: numactl is missing; it keeps its recorded instances vllm-0 :8000, vllm-1 :8001"
    # nothing recorded yet: the gateway is left as it is
    first = propose(facts)
    assert fleet_run.routed(first, {"h100": "10.0.0.1", "rtx4090": "10.0.0.2"})["gateway"] is None


def test_each_unplannable_host_has_its_own_message_and_keeps_only_what_is_recorded(facts):
    """The end of the run fails each host that could not be planned with its
    own message (the recap says failed of that host); only a host the record
    holds instances of is said to keep them."""
    kept = deployed(facts)
    run = fleet_run.refused(propose(facts, kept=kept, tp=2), {"rtx4090": "host rtx4090: numactl is missing"})
    assert fleet_run.unplannable_messages(run) == {
        "rtx4090": "could not be planned: numactl is missing; it keeps its recorded instances vllm-0 :8000, vllm-1 :8001"}
    # a first run: nothing recorded of it, nothing kept
    first = fleet_run.refused(propose(facts), {"rtx4090": "host rtx4090: numactl is missing"})
    message = "could not be planned: numactl is missing; it has no recorded instances: nothing was deployed on it"
    assert fleet_run.unplannable_messages(first) == {"rtx4090": message}
    assert fleet_run.report(first, FLEET, [], "finish")[1] == "unplannable: rtx4090: " + message[len("could not be planned: "):]
    assert fleet_run.unplannable_messages(propose(facts)) == {}


def test_a_hosts_share_is_its_slice_and_whether_the_role_deploys_it(facts):
    run = fleet_run.refused(propose(facts, kept=deployed(facts), tp=2), {"rtx4090": "host rtx4090: refused"})
    h100, rtx = fleet_run.host_share(run, "h100"), fleet_run.host_share(run, "rtx4090")
    assert h100 == {"slice": run["slices"]["h100"], "deploys": True}
    assert rtx == {"slice": run["slices"]["rtx4090"], "deploys": False}
    assert [i["host"] for i in h100["slice"]["instances"]] == ["h100"] * len(h100["slice"]["instances"])
    with pytest.raises(ValueError, match="host gw has no slice in the run"):
        fleet_run.host_share(run, "gw")


def test_the_events_never_change_the_run_they_are_given(facts):
    run = propose(facts, kept=deployed(facts), tp=2)
    frozen = copy.deepcopy(run)
    fleet_run.removed(fleet_run.converged(fleet_run.refused(run, {"h100": "x"}), ["rtx4090"], runs(run, ["rtx4090"])),
                      ["h100"])
    fleet_run.routed(run, {"h100": "10.0.0.1", "rtx4090": "10.0.0.2"})
    fleet_run.gateway_configured(run)
    assert run == frozen


def test_a_host_that_did_not_converge_is_routed_at_its_recorded_address(facts):
    """Issue 35: h100's address changes while it is down. The record keeps
    where its units listen (hosts.h100.address), and the gateway routes it
    there; rtx4090 converges at its new address, which the record takes."""
    run = propose(facts)
    run = fleet_run.converged(run, FLEET, runs(run, FLEET), {"h100": "10.0.0.1", "rtx4090": "10.0.0.2"})
    assert [run["record"]["hosts"][h]["address"] for h in FLEET] == ["10.0.0.1", "10.0.0.2"]
    kept = artifact.dump_artifact(run["record"])
    assert artifact.load_artifact(kept, name="/k/plan.json")["hosts"]["h100"]["address"] == "10.0.0.1"
    moved = {"h100": "10.9.9.1", "rtx4090": "10.9.9.2"}
    run = propose(facts, kept=kept)
    run = fleet_run.converged(run, ["rtx4090"], runs(run, ["rtx4090"]), moved)  # h100 unreachable
    assert run["record"]["hosts"]["h100"]["address"] == "10.0.0.1"
    assert run["record"]["hosts"]["rtx4090"]["address"] == "10.9.9.2"
    backends = fleet_run.routed(run, moved)["gateway"]["backends"]
    assert sorted(set((b["host"], b["address"]) for b in backends)) == [("h100", "10.0.0.1"), ("rtx4090", "10.9.9.2")]


def test_a_record_without_addresses_is_routed_at_todays_inventory(facts):
    """A record written before hosts.HOST.address: its hosts are routed at
    their vllm_listen_host now (a wildcard: their ansible_host), until they
    converge and record one."""
    run = propose(facts, kept=deployed(facts))
    assert all("address" not in entry for entry in run["record"]["hosts"].values())
    routed = fleet_run.routed(run, {"h100": "0.0.0.0", "rtx4090": "10.0.0.2"}, {"h100": "gpu-a.example"})
    assert sorted(set((b["host"], b["address"]) for b in routed["gateway"]["backends"])) == [
        ("h100", "gpu-a.example"), ("rtx4090", "10.0.0.2")]


def test_the_end_shows_the_proposal_of_a_run_that_does_not_deploy(facts):
    """Issue 35: --tags plan (with or without --check) shows what the run
    would deploy (tp 2), labelled, never the record's tp-4 table."""
    run = propose(facts, kept=deployed(facts, tp=4), tp=2)
    lines = fleet_run.plan_lines(run, ["plan"], [])
    assert lines[0].startswith("proposal (not deployed, not recorded")
    assert sum(1 for line in lines if line.startswith("h100 ")) == 4
    assert not any("tp_size 4" in line for line in lines)
    for tags, skipped in ((["all"], []), (["plan", "vllm"], []), (["plan"], ["vllm"])):
        shown = fleet_run.plan_lines(run, tags, skipped)
        expected = "recorded plan" if fleet_run.deploys(tags, skipped) else "proposal"
        assert shown[0].startswith(expected), (tags, skipped)
    assert fleet_run.plan_lines(run, ["all"], [])[0].startswith("recorded plan")
    assert sum(1 for line in fleet_run.plan_lines(run, ["all"], []) if line.startswith("h100 ")) == 2
    # a run that planned nothing (--tags vllm, gateway) shows the record
    loaded = fleet_run.loaded(run["record"], run["record"], FLEET, [], {})
    assert fleet_run.plan_lines(loaded, ["gateway"], [])[0].startswith("recorded plan")


def test_a_fleet_that_cannot_be_planned_is_a_run_holding_only_its_errors(facts):
    """Said once by the planning play (one fail task, its own words), never
    raised inside a task's arguments, where ansible-core wraps it."""
    stop = "The fleet cannot be planned; nothing was deployed: "
    # one served name for two models
    variables = hostvars(facts, h100={"vllm_served_model_name": "llama"},
                         rtx4090={"vllm_model": "meta-llama/Llama-3.1-8B-Instrcut", "vllm_served_model_name": "llama"})
    run = propose(facts, variables=variables)
    assert list(run) == ["errors"] and len(run["errors"]) == 1 and run["errors"][0].startswith(stop)
    assert "h100 and rtx4090 both serve the name" in run["errors"][0]
    # hosts of one model with different keys (checked where api_keys are given: with gateways)
    keys = {"h100": "a" * 20, "rtx4090": "b" * 20}
    run = fleet_plan.propose(hostvars(facts), dict(facts), None, "/k/plan.json", FLEET, dict(context(), api_keys=keys))
    assert "hosts h100 and rtx4090 serve model" in run["errors"][0] and "a" * 20 not in run["errors"][0]
    same = fleet_plan.propose(hostvars(facts), dict(facts), None, "/k/plan.json", FLEET,
                              dict(context(), api_keys={"h100": "a" * 20, "rtx4090": "a" * 20}))
    assert same["errors"] == [] and same["proposal"]["instances"]
    # no instance anywhere: every host unplannable on a first run
    run = propose(facts, tp=16)
    assert run["errors"][0].startswith(stop + "the plan has no instance: ") and "tp_size 16" in run["errors"][0]
    # the run filters refuse it by its errors
    with pytest.raises(ValueError, match="the run could not be planned: " + stop):
        fleet_run_filter._run(run)


def test_a_check_run_shows_the_record_it_would_write(facts):
    run = propose(facts)
    run = fleet_run.converged(run, FLEET, runs(run, FLEET))
    lines = fleet_run.plan_lines(run, ["all"], [], check_mode=True)
    assert lines[0] == "the record this run would write (check mode: not written, nothing deployed):"
    assert fleet_run.plan_lines(run, ["all"], [])[0] == "recorded plan (what runs now):"
    report = fleet_run.report(fleet_run.gateway_configured(run), FLEET + ["lb"], [], "finish", check_mode=True)
    assert report[0].startswith("check mode: ") and report[1].startswith("would deploy: h100: vllm-0 new")
    assert report[-1].startswith("gateway would route ")
