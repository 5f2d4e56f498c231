# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters of the host preflight (docs/preflight.md): preflight_units (what
each host's planned units are, for gpufleet.numa.numa_preflight to probe),
preflight_refusals (the hosts the deploy refuses, per gpufleet_preflight)
and preflight_report (every finding of every host, once). Thin shells
around module_utils/preflight/units.py and policy.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import variable_check
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import policy
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.units import probe_units
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain
from ansible_collections.gpufleet.numa.plugins.plugin_utils.role_files import inventory_variables


def preflight_units(hostvars, host, plan, node_addresses=None):
    """hostvars, a GPU host and the proposal (or the host's own instances,
    its slice of the run) -> {units, numactl_installed_by_role} for numa_preflight."""
    if not hasattr(hostvars, "keys") or host not in hostvars:
        raise AnsibleFilterError("gpufleet.numa.preflight_units expects hostvars and one of its hosts (got %r)" % (host,))
    try:
        plan = plain(plan)
        if isinstance(plan, list):
            plan = {"instances": plan}
        instances = [i for i in contract.instances(plan, "gpufleet.numa.preflight_units") if i["host"] == host]
        errors = []
        own = inventory_variables(hostvars, host, errors, ("vllm_", "gpufleet_socket_ifname"))
        if errors:
            raise ValueError("; ".join(errors))
        variables = variable_check.role_variables(role_files.defaults("vllm"), own, dict(
            variable_check.VLLM_FROM_PLAYBOOK, vllm_node_addresses=plain(node_addresses or {}),
            vllm_socket_ifname=own.get("gpufleet_socket_ifname", ""), host=host))
        return probe_units(instances, variables)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.preflight_units: %s: %s" % (host, exc))


def _results(hostvars, hosts, result_name):
    """host -> its registered numa_preflight findings, for the hosts that ran it."""
    found = {}
    for host in hosts:
        result = hostvars[host].get(result_name) if host in hostvars else None
        if isinstance(result, dict) and isinstance(result.get("findings"), list):
            found[str(host)] = plain(result["findings"])
    return found


def preflight_refusals(hostvars, hosts, result_name="__gpufleet_preflight_result"):
    """hostvars and the play's hosts -> {host: why it is refused} (policy fail and a critical finding)."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.preflight_refusals expects hostvars")
    try:
        found = _results(hostvars, hosts, result_name)
        policies = dict((host, plain(hostvars[host].get(policy.VARIABLE))) for host in found)
        return policy.refusals(found, policies)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.preflight_refusals: %s" % exc)


def preflight_report(hostvars, hosts, result_name="__gpufleet_preflight_result"):
    """hostvars and the play's hosts -> one line per finding of every host, then the refused hosts."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.preflight_report expects hostvars")
    found = _results(hostvars, hosts, result_name)
    return policy.report_lines(found, preflight_refusals(hostvars, hosts, result_name))


class FilterModule(object):
    def filters(self):
        return {"preflight_units": preflight_units, "preflight_refusals": preflight_refusals,
                "preflight_report": preflight_report}
