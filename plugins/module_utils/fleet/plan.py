# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The planning use case of a deploy run (docs/plan.md): each host planned
with its own gpufleet_* variables, deployed instances kept where no change
forces another ("Stable identity"), the result merged into the kept plan.

plan_by_host() is what the fleet_plan_by_host filter returns; propose()
is the first value of a run (fleet/run.py). HOST_VARS is a mapping host ->
that host's variables (Ansible's hostvars, or plain dicts); FACTS host ->
its topology facts as plain dicts, for the hosts to plan.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import run as fleet_run
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import by_host
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import identity
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record


def plan_by_host(host_vars, hosts, facts, kept):
    """The fresh plan of HOSTS (sorted inventory names), each with its own
    settings; KEPT the kept plan (load_artifact's result, or None). A host
    that cannot be planned is left out and listed in "unplannable" (host ->
    reason): it keeps what the kept plan records. A bad variable is a
    ValueError (the variable check reports them all before)."""
    unplannable = {}
    settings = host_settings.host_settings(host_vars, hosts)
    models = host_settings.host_models(host_vars, hosts)
    settings = by_host.resolve_settings(settings, facts, unplannable)
    plans = by_host.plan_each(settings, facts, unplannable)
    settings = dict((h, s) for h, s in settings.items() if h not in unplannable)
    planned_facts = dict((h, facts[h]) for h in settings)
    hardware = dict((h, artifact.hardware_record(planned_facts[h])) for h in settings)
    plan = identity.stable_plan(artifact.combine_plans(plans), kept, settings, planned_facts, _plan_one)
    # What each instance serves, as its host's vllm_* variables say now:
    # kept in the plan, so the gateway routes a host's instances by model
    # even in a run that does not reach it.
    for instance in plan["instances"]:
        instance.update(models.get(instance["host"], {}))
    # What each host has, kept with its entry: a later run checks the
    # host's kept instances against it (plan_check).
    return dict(plan, settings=settings, hardware=hardware, unplannable=unplannable)


def _plan_one(host, facts, options):
    """The planner stable_plan plans the rest of a host with."""
    return placement.plan_fleet({host: facts}, hosts=[host], **options)


def listen_addresses(host_vars, fleet):
    """GPU server -> the address its instances listen on and the gateway
    reaches them at (vllm_listen_host; '' when unset), and -> the address
    the other hosts of a multi-node instance reach it at (its
    gpufleet_node_address, else the former)."""
    addresses, node_addresses = {}, {}
    for host in fleet:
        variables = host_vars[host] if host in host_vars else {}
        addresses[host] = str(variables.get("vllm_listen_host", "") or "")
        node = variables.get("gpufleet_node_address")
        node_addresses[host] = addresses[host] if node is None else str(node)
    return addresses, node_addresses


def propose(host_vars, facts, kept_text, plan_file, hosts, context):
    """The run after the planning play (fleet/run.py): HOSTS the GPU hosts
    planned again (those of the play whose topology was gathered), KEPT_TEXT
    the kept plan file's text (or a mapping), CONTEXT {fleet, gateways,
    inventory, in_run, and optionally api_keys} (gpu_servers, the gateways,
    every inventory host, the planning play's hosts, host -> vllm_api_key).
    A fleet that cannot be planned (a kept plan that does not read, one
    served name for two models, ...) is a run holding only its errors
    (fleet_run.stopped): the playbook says them once, in its own words."""
    try:
        kept = artifact.load_artifact(kept_text, name=plan_file)
        record = kept or plan_record.empty_record()
        fresh = plan_by_host(host_vars, hosts, facts, kept)
        merge = artifact.merge_plans(fresh, kept, hosts, context["fleet"])
        addresses, node_addresses = listen_addresses(host_vars, context["fleet"])
        return fleet_run.proposed(record, merge, context["in_run"], context["fleet"], context["gateways"],
                                  addresses, node_addresses, context["inventory"], context.get("api_keys"))
    except ValueError as exc:
        return fleet_run.stopped([str(exc)])


def load(host_vars, kept_text, plan_file, deployable, context):
    """The run of a play whose planning play did not run: the kept plan as
    the record and the proposal (DEPLOYABLE: it must hold a plan, as the
    vllm and gateway plays need; else an empty record will do)."""
    record = artifact.load_artifact(kept_text, name=plan_file) or plan_record.empty_record()
    proposal = artifact.require_artifact(kept_text, name=plan_file) if deployable else record
    return fleet_run.loaded(record, plan_record.as_proposal(proposal), context["fleet"], context["gateways"],
                            listen_addresses(host_vars, context["fleet"])[1])
