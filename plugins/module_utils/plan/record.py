# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The state of record (docs/plan.md, "Proposal and record").

A run computes a proposal (artifact.merge_plans). The kept plan holds
only what was deployed: a host's proposed entries replace its kept ones
once that host converged in the run (record_hosts, with what each of its
instances runs: the engine and the unit's sha1), and a host leaves it
only once its instances were taken down (forget_hosts). Hosts that
failed, were unreachable or were not in the run keep their entries as
they were. routed() is what the gateway serves from the record: the
entries of hosts still in the fleet. Pure functions over plain dicts.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import names
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import checks as bandwidth_checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import by_host
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.plan.run_record import RUN_FIELDS


def empty_record():
    """The kept plan before the first deploy: nothing deployed."""
    return {"artifact_version": artifact.ARTIFACT_VERSION, "hosts": {}, "instances": [], "unused": [],
            "warnings": [], "totals": contract.plan_totals(0, 0, [])}


def _of_hosts(entries, hosts):
    return [e for e in entries if e["host"] in hosts]


def _warnings_of(plan, hosts):
    return [w for w in plan["warnings"] if w["host"] in hosts]


def _rebuilt(hosts, instances, unused, warnings):
    instances = sorted(instances, key=lambda i: (i["host"], i.get("ordinal", 0)))
    unused = sorted(unused, key=lambda u: (u["host"], u.get("index") if u.get("index") is not None else -1))
    gpus = sum(int(entry.get("gpus", 0)) for entry in hosts.values())
    return {
        "artifact_version": artifact.ARTIFACT_VERSION,
        "hosts": dict((h, hosts[h]) for h in sorted(hosts)),
        "instances": instances,
        "unused": unused,
        "warnings": by_host(warnings),
        "totals": contract.plan_totals(len(hosts), gpus, instances),
    }


def _check_run(host, run):
    """A host's vllm_deployed: {engine, instances: {name: {engine, unit, unit_sha1}}}."""
    if not isinstance(run, dict) or not isinstance(run.get("instances", {}), dict):
        raise ValueError("host %s: vllm_deployed must be the mapping role vllm sets ({engine, instances})" % host)
    return run.get("instances", {})


def record_hosts(record, proposal, hosts, runs, addresses=None):
    """The kept plan once `hosts` converged: their entries (instances,
    unused GPUs, warnings, host entry) are the proposal's, each instance
    with what the host reported it runs (runs: host -> vllm_deployed),
    each host entry with the address its units now listen at and are
    reached at (addresses: host -> it, fleet/addresses.current; a host
    without one records none); every other host's entries stay as recorded.

    A converged host the proposal does not hold (no topology, never
    planned) keeps its entries too."""
    record = record or empty_record()
    converged = set(h for h in hosts if h in proposal["hosts"])
    instances = [i for i in record["instances"] if i["host"] not in converged]
    for inst in _of_hosts(proposal["instances"], converged):
        ran = _check_run(inst["host"], runs.get(inst["host"], {})).get(inst["name"])
        inst = dict((k, v) for k, v in inst.items() if k != "deployed")
        if isinstance(ran, dict):
            inst["deployed"] = dict((k, ran[k]) for k in RUN_FIELDS if ran.get(k) is not None)
        instances.append(inst)
    hosts_out = dict((h, e) for h, e in record["hosts"].items() if h not in converged)
    for host in converged:
        entry = dict((k, v) for k, v in proposal["hosts"][host].items() if k != "address")
        if (addresses or {}).get(host):
            entry["address"] = addresses[host]
        files = runs.get(host, {}).get("files")
        if isinstance(files, dict):
            entry["files"] = files
        kept_bandwidth(entry, record["hosts"].get(host))
        hosts_out[host] = entry
    unused = [u for u in record["unused"] if u["host"] not in converged] + _of_hosts(proposal["unused"], converged)
    kept = set(hosts_out) - converged
    warnings = _warnings_of(record, kept) + _warnings_of(proposal, converged)
    return _rebuilt(hosts_out, instances, unused, warnings)


def kept_bandwidth(entry, recorded):
    """A host entry that replaces a recorded one keeps its `bandwidth`
    (docs/bandwidth.md) while the host's hardware record is the same: the
    figures describe the hardware, not the plan. Changed hardware drops
    them (measure again). Updates `entry` in place."""
    if recorded and "bandwidth" in recorded and recorded.get("hardware") == entry.get("hardware"):
        entry["bandwidth"] = recorded["bandwidth"]


def record_bandwidth(record, measured):
    """The kept plan with each measured host's figures (measured: host ->
    a checked `bandwidth` record) in its host entry. Only recorded hosts
    keep them: a host entry stands for a deployed host, so a host the
    record does not hold gets none (its figures are shown, not kept).
    Returns {record, kept: [hosts], not_kept: {host: why}}."""
    record = record or empty_record()
    hosts = dict(record["hosts"])
    kept, not_kept = [], {}
    for host in sorted(measured):
        if host not in hosts:
            not_kept[host] = "not in the kept plan (deploy it first; its figures are shown above)"
            continue
        nodes = (hosts[host].get("hardware") or {}).get("numa_nodes")
        try:
            bandwidth_checks.check_bandwidth("hosts.%s.bandwidth" % show(host), measured[host],
                                             None if nodes is None else set(nodes))
        except ValueError as exc:
            not_kept[host] = "its figures do not fit its kept entry (%s): deploy it again, then measure" % exc
            continue
        hosts[host] = dict(hosts[host], bandwidth=measured[host])
        kept.append(host)
    return {"record": dict(record, hosts=hosts), "kept": kept, "not_kept": not_kept}


def as_proposal(record):
    """The record as the proposal of a run that plans nothing: the same
    entries, without what each instance ran (recorded again once its host
    converged)."""
    record = record or empty_record()
    return dict(record, instances=[dict((k, v) for k, v in i.items() if k != "deployed")
                                   for i in record["instances"]])


def forget_hosts(record, hosts):
    """The kept plan without `hosts` (their instances were taken down)."""
    record = record or empty_record()
    gone = set(hosts)
    keep = set(record["hosts"]) - gone
    return _rebuilt(dict((h, record["hosts"][h]) for h in keep),
                    [i for i in record["instances"] if i["host"] in keep],
                    [u for u in record["unused"] if u["host"] in keep],
                    _warnings_of(record, keep))


def routed(record, fleet_hosts):
    """What the gateway serves: the recorded entries of hosts still in the
    fleet (a host taken out of gpu_servers is no longer routed, even
    while it waits to be taken down)."""
    record = record or empty_record()
    return forget_hosts(record, set(record["hosts"]) - set(fleet_hosts))


def to_remove(record, fleet_hosts, gateways=()):
    """Hosts the record holds that are no longer in the fleet, sorted; a
    gateway or the controller among them is an error (never_gpu_hosts)."""
    fleet = set(fleet_hosts)
    return never_gpu_hosts(sorted(h for h in (record or empty_record())["hosts"] if h not in fleet), fleet, gateways)


def never_gpu_hosts(hosts, fleet, gateways):
    """`hosts` to take down, when none is a gateway outside the fleet or the
    controller: a record that names one as a GPU host is damaged, and taking
    it down would act on the gateway's or the controller's services."""
    wrong = [h for h in hosts if h not in fleet and (h in gateways or h == names.CONTROLLER)]
    if wrong:
        raise ValueError(
            "the kept plan names %s as GPU host(s) (hosts.%s), but %s the controller or a gateway, not in "
            "gpu_servers: never taken down as a GPU host. If it really ran instances, take them down with "
            "decommission.yml while it is in gpu_servers; otherwise the kept plan is damaged: remove the host's "
            "entries from it (or restore an earlier copy)"
            % (", ".join(wrong), wrong[0], "it is" if len(wrong) == 1 else "they are"))
    return hosts


def retired_instances(record, proposal, hosts):
    """Per host of `hosts`: the recorded instance names the proposal no
    longer has there (they are taken down when the host deploys)."""
    out = {}
    for host in hosts:
        planned = set(i["name"] for i in proposal["instances"] if i["host"] == host)
        gone = sorted(i["name"] for i in (record or empty_record())["instances"]
                      if i["host"] == host and i["name"] not in planned)
        if gone:
            out[host] = gone
    return out


def chosen_hosts(record, value, name="gpufleet_decommission", fleet=(), gateways=()):
    """The recorded hosts `value` names: "all", a comma-separated string or
    a list of inventory hosts, each of which the record must hold, none a
    gateway outside the fleet or the controller."""
    return never_gpu_hosts(_chosen(record, value, name), set(fleet), gateways)


def _chosen(record, value, name):
    record = record or empty_record()
    if value is None or value == "" or value == []:
        raise ValueError("%s: is required: name the hosts to take down (a list, or comma-separated), or all"
                         % name)
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(h, str) for h in value):
        raise ValueError("%s: must be all, or a list of inventory hosts (got %s)" % (name, type(value).__name__))
    recorded = sorted(record["hosts"])
    if list(value) == ["all"]:
        return recorded
    unknown = sorted(set(value) - set(recorded))
    if unknown:
        raise ValueError("%s: %s %s not in the kept plan (recorded: %s)" % (
            name, ", ".join(unknown), "is" if len(unknown) == 1 else "are", ", ".join(recorded) or "none"))
    return sorted(set(value))
