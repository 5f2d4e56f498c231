# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""One deploy run as one value (docs/deploy.md, "One run").

deploy_inference.yml carries a run from play to play as a single fact of
the controller, `__gpufleet_run`, made by proposed() (or loaded(), when the
planning play did not run: --tags, -l gateways) and advanced by the
functions below, one per event: the host preflight's refusals, each batch's
converged hosts, the hosts taken down, the gateway's backends, the
gateway's configuration. The report reads it. Nothing else keeps state
between plays, so "what happens to the record when host X fails in batch 2"
is answered here: X did not converge, so converged() leaves its entry in the
record as it was.

The run:
  record_before  the kept plan when the run started
  record         the kept plan now (hosts that converged replace their
                 entries batch by batch; hosts taken down leave it)
  proposal       what the run deploys
  summary        {replanned, kept, not_planned, dropped}: hosts by what the
                 proposal does with them
  unplannable    host -> why it keeps its recorded instances (planning or
                 the host preflight refused it)
  in_run         the GPU hosts this run targeted (None: the report's hosts)
  leaving        recorded hosts no longer in gpu_servers that the inventory
                 still has: the take-down play's hosts
  converged, removed   hosts recorded as deployed / taken down in this run
  slices         host -> what that host's tasks need, computed once per run
                 (_slices: every host of gpu_servers, of the proposal and
                 of the record has one)
  proposed_backends    the proposal as gateway backends (checked before
                 anything changes), or None without gateways
  gateway        {backends} from the record once the GPU hosts
                 were recorded, or None
  gateway_configured   whether the gateway play ran
  errors         what stops the run before anything changes, fleet-wide
                 (empty but for a fleet that cannot be planned: stopped()),
                 said once by the planning play
Pure functions over plain dicts; each returns a new run.
"""

from __future__ import annotations

import copy

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import backends as gateway_view
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import addresses as fleet_addresses
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import report as plan_report
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import table as plan_table

EMPTY_SLICE = {"instances": [], "node_addresses": {}, "drain_servers": [], "recorded": [], "files": {}}
NO_SUMMARY = {"replanned": [], "kept": [], "not_planned": [], "dropped": []}


def _slices(fleet, record, proposal, node_addresses, drain_servers):
    """host -> its own share of the run, so that no per-host task reads the
    whole fleet: its proposed instances, the head addresses of its multi-node
    instances, its servers on the gateways (drained before a restart or a
    take-down), and what the record holds of it (its instances' names and
    the files its units are in: what a take-down removes)."""
    slices = {}

    def host_slice(host):
        return slices.setdefault(host, copy.deepcopy(EMPTY_SLICE))

    for host in fleet:
        host_slice(host)

    for instance in contract.instances(proposal, "the proposal"):
        own = host_slice(instance["host"])
        own["instances"].append(instance)
        head = (instance.get("multinode") or {}).get("head")
        if head is not None and head in node_addresses:
            own["node_addresses"][head] = node_addresses[head]
    for instance in record["instances"]:
        host_slice(instance["host"])["recorded"].append(instance["name"])
    for host, entry in record["hosts"].items():
        host_slice(host)["files"] = entry.get("files") or {}
    for server in drain_servers:
        host_slice(server["host"])["drain_servers"].append(server)
    return slices


def _start(record, proposal, summary, unplannable, fleet, gateways, node_addresses, in_run, leaving):
    # The servers HAProxy has now (named from the record): each instance
    # that restarts or leaves is drained there first.
    drain_servers = gateway_view.gateway_servers(record) if gateways else []
    return {
        "record_before": record, "record": record, "proposal": proposal, "summary": summary,
        "unplannable": dict(unplannable), "in_run": sorted(in_run), "leaving": sorted(leaving),
        "converged": [], "removed": [],
        "slices": _slices(fleet, record, proposal, node_addresses, drain_servers),
        "proposed_backends": None, "gateway": None, "gateway_configured": False,
        "fleet": list(fleet), "gateways": list(gateways), "errors": [],
    }


def stopped(errors):
    """The run of a fleet that cannot be planned: ERRORS, fleet-wide (a kept
    plan that does not read, one served name for two models, hosts of one
    model with different keys, a plan with no instance), each one message.
    Nothing else is in it: the planning play fails once, naming them, before
    anything changes (a filter raising in a task's arguments would bury the
    message in ansible-core's own)."""
    return {"errors": ["The fleet cannot be planned; nothing was deployed: %s" % error for error in errors]}


def proposed(record, merge, in_run, fleet, gateways, addresses, node_addresses, inventory, api_keys=None):
    """The run after the planning play: MERGE is artifact.merge_plans's result
    (the proposal and what it does per host), RECORD the kept plan, IN_RUN
    the GPU hosts of the planning play, ADDRESSES host -> vllm_listen_host,
    NODE_ADDRESSES host -> the address multi-node partners reach it at,
    INVENTORY every host the inventory has (a leaving host it lacks cannot
    be reached and stays recorded as "to remove"), API_KEYS host -> its
    vllm_api_key (None: not checked). A plan with no instance is a ValueError."""
    unplannable = merge.get("unplannable") or {}
    if not merge["plan"]["instances"]:
        reasons = []
        for reason in [u.get("reason") for u in merge["plan"].get("unused") or ()] + list(unplannable.values()):
            if reason and str(reason) not in reasons:
                reasons.append(str(reason))
        raise ValueError("the plan has no instance: %s" % ("; ".join(reasons) or "no host to plan"))
    leaving = [h for h in plan_record.to_remove(record, fleet, gateways) if h in set(inventory)]
    summary = dict((key, list(merge.get(key, []))) for key in NO_SUMMARY)
    run = _start(record, merge["plan"], summary, unplannable, fleet, gateways,
                 node_addresses, in_run, leaving)
    if gateways:
        # Before anything changes: every instance has an address and a served
        # name, no served name stands for two models, and every host of one
        # model has the same key (the gateway sends one per model).
        run["proposed_backends"] = gateway_view.gateway_backends(merge["plan"], addresses)
        if api_keys is not None:
            gateway_view.gateway_api_keys(merge["plan"], api_keys)
    return run


def loaded(record, proposal, fleet, gateways, node_addresses):
    """The run of a play whose planning play did not run (-l gateways,
    --tags vllm or gateway, no GPU server reached): the proposal is PROPOSAL
    (the kept plan as deployable, or as the record), nothing was planned,
    nothing leaves, and the hosts in the run are the report's (in_run
    None)."""
    return dict(_start(record, proposal, dict(NO_SUMMARY), {}, fleet, gateways, node_addresses, [], []),
                in_run=None)


def refused(run, refusals):
    """The run once the host preflight refused REFUSALS (host -> why): they
    keep their recorded instances, as hosts that could not be planned do."""
    return dict(run, unplannable=dict(run["unplannable"], **refusals))


def converged(run, hosts, runs, listen=None, reach=None):
    """The run once HOSTS of a batch converged (RUNS: host -> what role vllm
    says it runs, vllm_deployed): their proposed entries replace their
    recorded ones, each host's with the address its units listen at now
    (LISTEN: host -> its vllm_listen_host, REACH: host -> its ansible_host;
    fleet/addresses.current). A host of the batch that failed is not among
    HOSTS and keeps its entry, and its address, as it was."""
    hosts = [h for h in hosts if h not in run["converged"]]
    if not hosts:
        return run
    addresses = fleet_addresses.current_of([h for h in hosts if h in (listen or {})], listen or {}, reach or {})
    record = plan_record.record_hosts(run["record"], run["proposal"], hosts, runs, addresses)
    return dict(run, record=record, converged=run["converged"] + hosts)


def removed(run, hosts):
    """The run once HOSTS were taken down: they leave the record."""
    hosts = [h for h in hosts if h not in run["removed"]]
    if not hosts:
        return run
    return dict(run, record=plan_record.forget_hosts(run["record"], hosts), removed=run["removed"] + hosts)


def routed(run, listen, reach=None):
    """The run with the gateway's backends, from the record (what runs, never
    what was only proposed): one server per recorded instance of a host in
    gpu_servers, at the address its entry keeps, the one its units listen
    at (fleet/addresses.deployed; an entry of a record that kept none: its
    vllm_listen_host now, LISTEN, or REACH where that is a wildcard).
    Nothing to route: gateway None. (The keys the gateway sends stay out of
    the run: it is a fact, printed by -v.)"""
    routed_plan = plan_record.routed(run["record"], run["fleet"])
    if not routed_plan["instances"]:
        return dict(run, gateway=None)
    addresses = fleet_addresses.deployed(routed_plan, listen, reach or {})
    return dict(run, gateway={"backends": gateway_view.gateway_backends(routed_plan, addresses)})


def host_share(run, host):
    """HOST's share of the run, taken once per host at the start of the
    vllm play: its slice, and whether role vllm deploys it (not
    unplannable, not refused). Every later task on the host reads this
    small host fact, not the run: each read of the run (a fact of the
    controller, through hostvars) costs Ansible a pass over every fact of
    the controller, so a read per task per host made a run's CPU grow with
    the square of the fleet."""
    if host not in run["slices"]:
        raise ValueError("host %s has no slice in the run (not in gpu_servers when the run was planned)" % host)
    return {"slice": run["slices"][host], "deploys": host not in run["unplannable"]}


def gateway_configured(run):
    """The run once the gateway play configured the gateways."""
    return dict(run, gateway_configured=True)


def deploys(run_tags, skip_tags):
    """Whether the vllm play deploys under these tags (ansible_run_tags,
    ansible_skip_tags): the role is tagged vllm."""
    tags, skipped = set(run_tags), set(skip_tags)
    return bool(tags & {"all", "vllm"}) and not skipped & {"all", "vllm"}


def plan_lines(run, run_tags, skip_tags, check_mode=False):
    """The plan the end of a run prints, labelled, with its warnings: the
    record (what runs now), or, in a run that planned but does not deploy
    (--tags plan, with or without --check), the proposal: what this run
    would deploy, never recorded. A run that planned nothing (--tags vllm,
    gateway, facts) shows the record; under --check (CHECK_MODE) the record
    the run would write, which was not written."""
    if run["in_run"] is not None and not deploys(run_tags, skip_tags):
        head, plan = "proposal (not deployed, not recorded: what a run without --tags would deploy):", run["proposal"]
    elif check_mode:
        head, plan = "the record this run would write (check mode: not written, nothing deployed):", run["record"]
    else:
        head, plan = "recorded plan (what runs now):", run["record"]
    return [head] + plan_table.plan_table(plan) + plan_table.plan_warning_lines(plan)


def unplannable_messages(run):
    """host -> why the run fails for it at its end, for each host that could
    not be planned or that the host preflight refused: each is failed on its
    own (the recap says failed of that host, never of another), and only one
    that the record holds instances of is said to keep them."""
    return dict((host, "could not be planned: %s" % plan_report.unplannable_phrase(run["record"], host, why))
                for host, why in sorted(run["unplannable"].items()))


def report(run, play_hosts, failed, finish, check_mode=False):
    """The end-of-run lines (plan/report.run_report): PLAY_HOSTS the report
    play's hosts (the hosts in the run when the planning play did not run),
    FAILED the hosts that failed or were unreachable, FINISH the command
    that completes a partial run, CHECK_MODE a --check run (the lines say
    what it would do)."""
    in_run = run["in_run"] if run["in_run"] is not None else sorted(play_hosts)
    return plan_report.run_report(run["record_before"], run["record"], {
        "fleet": run["fleet"], "in_run": in_run, "failed": sorted(failed),
        "converged": run["converged"], "removed": run["removed"], "gateways": run["gateways"],
        "gateway_configured": run["gateway_configured"], "unplannable": run["unplannable"], "finish": finish,
        "check_mode": bool(check_mode),
    })
