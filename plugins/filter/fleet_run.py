# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters that make and advance a deploy run (docs/deploy.md, "One run"):
run_proposed, run_loaded, run_refused, run_host, run_shares, run_converged, run_removed,
run_routed, run_configured, run_plan_lines, run_report and
unplannable_messages. Each reads what Ansible holds
(hostvars, the play's hosts) into plain values and makes one call into
module_utils/fleet/ (plan.py, run.py).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import addresses as fleet_addresses
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import plan as fleet_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import run as fleet_run
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import host_list, plain, plain_data
from ansible_collections.gpufleet.numa.plugins.plugin_utils.role_files import listen_and_reach
from ansible_collections.gpufleet.numa.plugins.plugin_utils import vllm_results


def _hostvars(name, value):
    if not hasattr(value, "keys"):
        raise ValueError("%s must be hostvars (a mapping host -> variables)" % name)
    return value


def _run(value):
    value = plain_data(value)
    if isinstance(value, dict) and value.get("errors") and "record" not in value:
        raise ValueError("the run could not be planned: %s" % "; ".join(str(e) for e in value["errors"]))
    if not isinstance(value, dict) or "record" not in value or "slices" not in value:
        raise ValueError("the run must be what run_proposed or run_loaded made")
    return value


def _kept(value):
    value = plain(value)
    if value is not None and not isinstance(value, (str, dict)):
        raise ValueError("the kept plan must be its file's JSON text or a mapping")
    return value


def _filter(name, call):
    """call(*args) with every error named after the filter."""
    def run(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleFilterError("gpufleet.numa.%s: %s" % (name, exc))
    return run


def _role_output(hostvars, batch, name):
    """host -> its NAME fact (what role vllm says it did), for the hosts of
    BATCH that set it: the hosts where the role ran to its end (set by
    set_fact from the role's filter: data, read raw)."""
    out = {}
    for host in host_list("the batch", batch):
        value = hostvars[host].get(name) if host in hostvars else None
        if value is not None:
            out[host] = plain_data(value)
    return out


def _proposed(hostvars, hosts, kept, plan_file, fleet, gateways, in_run, api_keys=None):
    hostvars = _hostvars("input", hostvars)
    hosts = sorted(host_list("hosts", hosts))
    missing = [h for h in hosts if h not in hostvars]
    if missing:
        raise ValueError("hosts not in the input: %s" % ", ".join(missing))
    # a host asked for without facts is the caller's error; facts that do not read are the host's
    facts = dict((h, plain(contract.facts_view(h, hostvars[h]))) for h in hosts)
    context = {"fleet": host_list("fleet", fleet), "gateways": host_list("gateways", gateways),
               "inventory": [str(h) for h in hostvars.keys()], "in_run": host_list("in_run", in_run)}
    if api_keys is not None:
        api_keys = plain(api_keys)
        if not isinstance(api_keys, dict):
            raise ValueError("api_keys must map host -> vllm_api_key")
        context["api_keys"] = api_keys
    return fleet_plan.propose(hostvars, facts, _kept(kept), str(plan_file), hosts, context)


def _loaded(hostvars, kept, plan_file, deployable, fleet, gateways):
    context = {"fleet": host_list("fleet", fleet), "gateways": host_list("gateways", gateways)}
    return fleet_plan.load(_hostvars("input", hostvars), _kept(kept), str(plan_file), bool(deployable), context)


def _refused(run, refusals):
    refusals = plain(refusals)
    if not isinstance(refusals, dict):
        raise ValueError("refusals must map host -> why")
    return fleet_run.refused(_run(run), dict((str(h), str(v)) for h, v in refusals.items()))


def _check_mode(value):
    if not isinstance(value, bool):
        raise ValueError("check_mode must be true or false (ansible_check_mode)")
    return value


def _report(run, play_hosts, failed, finish, check_mode=False):
    return fleet_run.report(_run(run), host_list("play_hosts", play_hosts), host_list("failed", failed), str(finish),
                            _check_mode(check_mode))


def _converged(run, hostvars, batch):
    """The batch's hosts where role vllm ran to its end: still in the batch
    (a host that failed leaves it) and with what the role registered (its
    look, not skipped, and its write: plugin_utils/vllm_results.py), but
    for those it did not run on (unplannable or refused)."""
    hostvars = _hostvars("hostvars", hostvars)
    run = _run(run)
    batch = host_list("the batch", batch)
    try:
        runs = vllm_results.deployed_by_role(hostvars, batch)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError("hostvars must hold role vllm's registered __vllm and __vllm_written (%s)" % exc)
    hosts = [h for h in batch if h in runs and h not in run["unplannable"]]
    # Where each converged host's units now listen: kept in its record entry.
    return fleet_run.converged(run, hosts, runs, *listen_and_reach(hostvars, hosts))


def _removed(run, hostvars, batch):
    """The batch's hosts where the take-down ran to its end (they set vllm_removed)."""
    return fleet_run.removed(_run(run), sorted(_role_output(_hostvars("hostvars", hostvars), batch, "vllm_removed")))


def _host(run, host):
    return fleet_run.host_share(_run(run), str(host))


def _shares(run, hosts):
    # One pass over the run for the whole batch: a run_host per host reads
    # the whole run once per host (the run's CPU grows with the square of the fleet).
    run = _run(run)
    return [{"host": host, "share": fleet_run.host_share(run, host)} for host in host_list("hosts", hosts)]


def _routed(run, hostvars):
    run = _run(run)
    # Today's addresses only of the hosts whose record entry keeps none.
    hosts = fleet_addresses.unaddressed(run["record"], run["fleet"])
    return fleet_run.routed(run, *listen_and_reach(_hostvars("hostvars", hostvars), hosts))


def _plan_lines(run, run_tags, skip_tags, check_mode=False):
    return fleet_run.plan_lines(_run(run), host_list("run_tags", run_tags), host_list("skip_tags", skip_tags),
                                _check_mode(check_mode))


def _unplannable(run):
    return fleet_run.unplannable_messages(_run(run))


def _configured(run):
    return fleet_run.gateway_configured(_run(run))


FILTERS = {
    # hostvars | run_proposed(hosts, kept, plan_file, fleet, gateways, in_run, api_keys=...): the run, or
    # {errors} for a fleet that cannot be planned
    "run_proposed": _proposed,
    # hostvars | run_loaded(kept, plan_file, deployable, fleet, gateways)
    "run_loaded": _loaded,
    "run_refused": _refused,
    # run | run_converged(hostvars, ansible_play_batch)
    "run_converged": _converged,
    # run | run_removed(hostvars, ansible_play_batch)
    "run_removed": _removed,
    # run | run_host(inventory_hostname): {slice, deploys}, taken once per host
    "run_host": _host,
    # run | run_shares(ansible_play_batch): [{host, share}], each share as run_host's, in one pass
    "run_shares": _shares,
    # run | run_routed(hostvars): the gateway's backends from the record
    "run_routed": _routed,
    "run_configured": _configured,
    # run | run_plan_lines(ansible_run_tags, ansible_skip_tags, check_mode=ansible_check_mode): the plan the end shows
    "run_plan_lines": _plan_lines,
    # run | run_report(ansible_play_hosts_all, failed hosts, finish, check_mode=ansible_check_mode)
    "run_report": _report,
    # run | unplannable_messages: host -> why the run fails for it (its own failure, at the end)
    "unplannable_messages": _unplannable,
}


class FilterModule(object):
    def filters(self):
        return dict((name, _filter(name, call)) for name, call in FILTERS.items())
