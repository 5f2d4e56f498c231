# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""run_converged reads what role vllm said on each host of the batch
(vllm_deployed); a host the role did not run on (unplannable or refused)
is never converged, even when it holds a vllm_deployed from an earlier run
in the same ansible-playbook (the per-host reset it replaced)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.filter.fleet_run import FilterModule
from ansible_collections.gpufleet.numa.tests.fixtures.fleet_runs import FLEET, hostvars, machine_facts, propose, runs

FILTERS = FilterModule().filters()


@pytest.fixture(scope="module")
def facts():
    return machine_facts()


def test_a_host_the_role_did_not_run_on_is_not_converged_by_an_earlier_runs_output(facts):
    run = FILTERS["run_refused"](propose(facts), {"rtx4090": "host rtx4090: refused"})
    said = runs(run, FLEET)
    variables = hostvars(facts)
    for host in FLEET:
        variables[host] = dict(variables[host], vllm_deployed=said[host])
    converged = FILTERS["run_converged"](run, variables, FLEET)
    assert converged["converged"] == ["h100"]
    assert sorted(converged["record"]["hosts"]) == ["h100"]


def test_the_shares_of_a_batch_are_each_hosts_run_host_in_the_batchs_order(facts):
    run = FILTERS["run_refused"](propose(facts), {"rtx4090": "host rtx4090: refused"})
    batch = ["rtx4090", "h100"]
    assert FILTERS["run_shares"](run, batch) == [
        {"host": host, "share": FILTERS["run_host"](run, host)} for host in batch]
    assert [share["share"]["deploys"] for share in FILTERS["run_shares"](run, batch)] == [False, True]
    with pytest.raises(Exception, match="gpufleet.numa.run_shares: host gw has no slice"):
        FILTERS["run_shares"](run, ["h100", "gw"])
