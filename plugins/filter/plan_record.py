# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the state of record (docs/plan.md, "Proposal and record"):
kept_record, record_deployed, record_proposal, forget_hosts, routed_plan, hosts_to_remove,
decommission_hosts, decommission_lines and deploy_report. Thin shells around module_utils/plan/record.py and
report.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import host_list, plain as _plain, plain_data
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import report as plan_report


def _record(value, name):
    # The kept plan's text, or the record the run holds (data the run
    # filters made: read raw, plain_data).
    value = plain_data(value)
    if value is None or value == "":
        return plan_record.empty_record()
    if not isinstance(value, (str, dict)):
        raise ValueError("%s must be the kept plan (its JSON text or a mapping)" % name)
    return plan_artifact.load_artifact(value, name) or plan_record.empty_record()


def kept_record(text, name="<plan>"):
    """The kept plan from its file's text; an empty record before the first deploy."""
    try:
        return _record(text, str(name))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.kept_record: %s" % exc)


def record_deployed(record, proposal, hosts, runs):
    try:
        runs = _plain(runs)
        if not isinstance(runs, dict):
            raise ValueError("runs must map host -> vllm_deployed")
        return plan_record.record_hosts(_record(record, "the record"), _record(proposal, "the proposal"),
                                        host_list("hosts", hosts), runs)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.record_deployed: %s" % exc)


def _on_record(name, call):
    """call(the record) with every error named after the filter."""
    def run(record):
        try:
            return call(_record(record, "the record"))
        except (TypeError, ValueError) as exc:
            raise AnsibleFilterError("gpufleet.numa.%s: %s" % (name, exc))
    return run


def record_proposal(record):
    return _on_record("record_proposal", plan_record.as_proposal)(record)


def forget_hosts(record, hosts):
    return _on_record("forget_hosts", lambda r: plan_record.forget_hosts(r, host_list("hosts", hosts)))(record)


def routed_plan(record, fleet):
    return _on_record("routed_plan", lambda r: plan_record.routed(r, host_list("fleet", fleet)))(record)


def hosts_to_remove(record, fleet, gateways=None):
    return _on_record("hosts_to_remove", lambda r: plan_record.to_remove(
        r, host_list("fleet", fleet), host_list("gateways", gateways or [])))(record)


def decommission_hosts(record, value, fleet=None, gateways=None):
    return _on_record("decommission_hosts", lambda r: plan_record.chosen_hosts(
        r, _plain(value), fleet=host_list("fleet", fleet or []), gateways=host_list("gateways", gateways or [])))(record)


def deploy_report(after, before, context):
    try:
        context = _plain(context)
        if not isinstance(context, dict):
            raise ValueError("context must be a mapping")
        for key in ("fleet", "in_run", "failed", "converged", "removed", "gateways"):
            context[key] = host_list(key, context.get(key, []))
        unplannable = context.setdefault("unplannable", {})
        if not isinstance(unplannable, dict) or not all(isinstance(v, str) for v in unplannable.values()):
            raise ValueError("context unplannable must map host -> reason")
        context["unplannable"] = dict(zip(host_list("unplannable", list(unplannable)), unplannable.values()))
        context.setdefault("gateway_configured", False)
        context.setdefault("finish", "the same command without --limit")
        return plan_report.run_report(_record(before, "the record before"), _record(after, "the record"), context)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.deploy_report: %s" % exc)


def decommission_lines(down, inventory, fleet):
    try:
        return plan_report.decommission_lines(host_list("the chosen hosts", _plain(down)),
                                              host_list("inventory", list(inventory)), host_list("fleet", fleet or []))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.decommission_lines: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"kept_record": kept_record, "record_deployed": record_deployed, "forget_hosts": forget_hosts,
                "record_proposal": record_proposal,
                "routed_plan": routed_plan, "hosts_to_remove": hosts_to_remove,
                "decommission_hosts": decommission_hosts, "deploy_report": deploy_report,
                "decommission_lines": decommission_lines}
