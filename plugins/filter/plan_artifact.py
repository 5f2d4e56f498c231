# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters for planning a fleet run by run: fleet_plan_by_host (each host with
its own settings) and the deployed plan kept between runs: merge_plan,
load_plan, plan_artifact_json; and rollout_batch, the batch size of a rollout.

Thin shells around module_utils/fleet/plan.py (the planning use case) and
module_utils/plan/artifact.py; see docs/plan.md.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain as _plain
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import plan as fleet_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks


def fleet_plan_by_host(host_vars, hosts=None, deployed=None):
    """Plan each host with its own gpufleet_* variables (docs/deploy.md);
    with `deployed` (the kept plan), deployed instances keep their identity
    where no change forces another (docs/plan.md, "Stable identity").
    A host that cannot be planned is left out and listed in "unplannable"
    (host -> reason): it keeps what the kept plan records."""
    try:
        if deployed is not None and not isinstance(deployed, (str, dict)):
            raise ValueError("deployed must be the plan file's JSON text or a mapping")
        kept = plan_artifact.load_artifact(_plain(deployed), name="<deployed>")
        if not hasattr(host_vars, "keys"):
            raise ValueError("input must be a mapping host -> variables (hostvars)")
        hosts = sorted(str(h) for h in (host_vars.keys() if hosts is None else hosts))
        missing = [h for h in hosts if h not in host_vars]
        if missing:
            raise ValueError("hosts not in the input: %s" % ", ".join(missing))
        # a host asked for without facts is the caller's error; facts that do not read are the host's
        facts = dict((h, _plain(contract.facts_view(h, host_vars[h]))) for h in hosts)
        return fleet_plan.plan_by_host(host_vars, hosts, facts, kept)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.fleet_plan_by_host: %s" % exc)


def merge_plan(fresh, previous=None, replanned=None, fleet_hosts=None, previous_name="<plan>"):
    try:
        if previous is not None and not isinstance(previous, (str, dict)):
            raise ValueError("previous must be the plan file's JSON text or a mapping")
        if replanned is None or fleet_hosts is None:
            raise ValueError("replanned and fleet_hosts are required")
        old = plan_artifact.load_artifact(_plain(previous), name=str(previous_name))
        return plan_artifact.merge_plans(_plain(fresh), old, _plain(replanned), _plain(fleet_hosts))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.merge_plan: %s" % exc)


def load_plan(text, name="<plan>"):
    try:
        if text is not None and not isinstance(text, (str, dict)):
            raise ValueError("the plan file's content must be JSON text")
        return plan_artifact.require_artifact(_plain(text), name=str(name))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.load_plan: %s" % exc)


def plan_artifact_json(plan):
    try:
        return plan_artifact.dump_artifact(_plain(plan))
    except (TypeError, ValueError) as exc:  # TypeError: a value JSON cannot hold
        raise AnsibleFilterError("gpufleet.numa.plan_artifact_json: %s" % exc)


def rollout_batch(value, name="gpufleet_rollout_hosts_at_once"):
    try:
        return checks.batch_size(str(name), _plain(value))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.rollout_batch: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"fleet_plan_by_host": fleet_plan_by_host, "merge_plan": merge_plan, "load_plan": load_plan,
                "plan_artifact_json": plan_artifact_json, "rollout_batch": rollout_batch}
