# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""run_converged reads what role vllm registered on each host of the batch
(its look and its write, __vllm and __vllm_written); a host the role did
not run on (unplannable or refused) is never converged, even when it holds
what the role registered in an earlier run of the same ansible-playbook,
nor is one where the role was skipped (a skipped look)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.filter.fleet_run import FilterModule
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import run as fleet_run
from ansible_collections.gpufleet.numa.tests.fixtures.fleet_runs import (
    FLEET, hostvars, machine_facts, propose, registered, runs)

FILTERS = FilterModule().filters()


@pytest.fixture(scope="module")
def facts():
    return machine_facts()


def test_a_host_the_role_did_not_run_on_is_not_converged_by_an_earlier_runs_output(facts):
    run = FILTERS["run_refused"](propose(facts), {"rtx4090": "host rtx4090: refused"})
    said = runs(run, FLEET)
    variables = hostvars(facts)
    for host in FLEET:
        variables[host] = dict(variables[host], **registered(said[host]))
    converged = FILTERS["run_converged"](run, variables, FLEET)
    assert converged["converged"] == ["h100"]
    assert sorted(converged["record"]["hosts"]) == ["h100"]
    # What it records of the host is what the role's own record (vllm_deployed) says.
    assert FILTERS["run_converged"](run, variables, ["h100"])["record"] == \
        fleet_run.converged(run, ["h100"], {"h100": said["h100"]},
                            {"h100": "10.0.0.1"}, {"h100": "h100"})["record"]


def test_a_host_the_role_was_skipped_on_or_did_not_run_on_is_not_converged(facts):
    run = propose(facts)
    said = runs(run, FLEET)
    variables = hostvars(facts)
    variables["h100"] = dict(variables["h100"], **registered(said["h100"]))
    variables["h100"]["__vllm"] = {"skipped": True, "changed": False, "skip_reason": "Conditional result was False"}
    assert FILTERS["run_converged"](run, variables, FLEET)["converged"] == []
    variables["rtx4090"] = dict(variables["rtx4090"], **registered(said["rtx4090"]))
    del variables["rtx4090"]["__vllm_written"]
    assert FILTERS["run_converged"](run, variables, FLEET)["converged"] == []
    variables["rtx4090"]["__vllm_written"] = {"results": []}  # a unit the write did not report: an error
    with pytest.raises(Exception, match="gpufleet.numa.run_converged: .*content_sha1 of every unit"):
        FILTERS["run_converged"](run, variables, FLEET)


def test_the_shares_of_a_batch_are_each_hosts_run_host_in_the_batchs_order(facts):
    run = FILTERS["run_refused"](propose(facts), {"rtx4090": "host rtx4090: refused"})
    batch = ["rtx4090", "h100"]
    assert FILTERS["run_shares"](run, batch) == [
        {"host": host, "share": FILTERS["run_host"](run, host)} for host in batch]
    assert [share["share"]["deploys"] for share in FILTERS["run_shares"](run, batch)] == [False, True]
    with pytest.raises(Exception, match="gpufleet.numa.run_shares: host gw has no slice"):
        FILTERS["run_shares"](run, ["h100", "gw"])
