# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The kept plan, checked as a whole before a run trusts it (docs/plan.md,
"Checks on the kept plan").

The plan file lives on the controller, but whoever can write it decides
what every unit binds to and what the gateway routes: it is untrusted
input. check_artifact() checks every field a consumer reads (type, range,
pattern), bounds every size, makes entries unique per host, requires a
multi-node instance's entries to agree, and checks each host's entries
against the hardware the plan recorded for that host when it was planned
(hosts[HOST].hardware: GPU ids and indices, NUMA nodes, CPUs). Plans
written before the record existed are checked by schema only. An
instance's own fields (name, device, sizes, gpu_indices, multinode,
binding, a CPU instance's ranks, ports) are checked as role vllm checks
them (placement/contract.check_instance_fields); a CPU instance's gpus
and numa_nodes are plan/check_device.py's.

Errors are ValueError("PLAN: FIELD: RULE (got VALUE)"), e.g.
"/srv/plan.json: instances[3].binding.mems: must be NUMA nodes this host has
(0, 1) (got [4095])". Pure functions, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import checks as bandwidth_checks
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import WARNING_FIELDS
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import check_device, run_record
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks, names
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist

from ansible_collections.gpufleet.numa.plugins.module_utils.common.record_values import (
    GPU_ID as _GPU_ID,
    GPU_ID_RULE as _GPU_ID_RULE,
    MAX_ENTRIES,
    MAX_GPUS_PER_HOST,
    MAX_HOSTS,
    MAX_NUMA_NODE,
    a_list as _list,
    cpus as _cpus,
    host as _host,
    index as _index,
    integer as _int,
    known_fields as _known,
    mapping as _mapping,
    nodes as _nodes,
    port as _port,
    short_text as _short_text,
)


def check_artifact(plan, name):
    """Check a kept plan (its JSON already parsed) as a whole; returns it.
    Raises ValueError("NAME: FIELD: RULE (got VALUE)")."""
    try:
        _check_plan(plan)
    except ValueError as exc:
        raise ValueError("%s: %s" % (name, exc))
    return plan


def _check_plan(plan):
    hosts = _mapping("hosts", plan.get("hosts"))
    if len(hosts) > MAX_HOSTS:
        checks.fail("hosts", "must hold at most %d hosts" % MAX_HOSTS, "%d hosts" % len(hosts))
    records = {}
    for host in sorted(hosts, key=str):
        records[host] = _check_host_entry(host, hosts[host])
    instances = _list("instances", plan.get("instances"))
    _check_counts(instances, hosts)
    checked = [_check_instance("instances[%d]" % i, entry, hosts) for i, entry in enumerate(instances)]
    for i, entry in enumerate(_list("unused", plan.get("unused"))):
        _check_unused("unused[%d]" % i, entry, hosts, records)
    for i, warning in enumerate(_list("warnings", plan.get("warnings"))):
        _check_warning("warnings[%d]" % i, warning)
    totals = plan.get("totals", {})
    for key, value in _mapping("totals", totals).items():
        _int("totals.%s" % _short_text("totals key", key), value, 0, MAX_ENTRIES * MAX_GPUS_PER_HOST)
    _check_per_host(checked, hosts, records)
    _check_multinode(checked)


def _check_warning(where, warning):
    """warnings[i]: {host, text, gpus, nodes} (placement/fleet_warnings.py): an inventory host,
    a bounded text, the GPU ids and the NUMA nodes it concerns."""
    warning = _known(where, warning, WARNING_FIELDS, WARNING_FIELDS)
    names.inventory_host(where + ".host", warning["host"])
    _short_text(where + ".text", warning["text"])
    gpus = _list(where + ".gpus", warning["gpus"], MAX_GPUS_PER_HOST)
    for i, gpu in enumerate(gpus):
        checks.text("%s.gpus[%d]" % (where, i), gpu, _GPU_ID, _GPU_ID_RULE)
    _nodes(where + ".nodes", warning["nodes"])


def _check_counts(instances, hosts):
    """Before each entry is read: no host holds more GPU instances than GPUs."""
    counts = {}
    for entry in instances:
        host = entry.get("host") if isinstance(entry, dict) else None
        # CPU instances hold no GPU: one per NUMA node at most (_check_per_host)
        if isinstance(host, str) and entry.get("device") != "cpu":
            counts[host] = counts.get(host, 0) + 1
    for host, count in sorted(counts.items()):
        gpus = hosts.get(host, {}).get("gpus") if isinstance(hosts.get(host), dict) else None
        if isinstance(gpus, int) and count > gpus:
            checks.fail("instances", "must hold at most one instance per GPU of host %s (%s GPUs)" % (checks.show(host), gpus),
                        "%d instances" % count)


def _check_host_entry(host, entry):
    """hosts[HOST]: {gpus, options?, files?, address?, hardware?, bandwidth?}; returns the hardware record or None."""
    where = "hosts.%s" % checks.show(host)
    _host("hosts key", host)
    entry = _mapping(where, entry)
    _int(where + ".gpus", entry.get("gpus"), 0, MAX_GPUS_PER_HOST)
    if "options" in entry:
        for option, value in sorted(_mapping(where + ".options", entry["options"]).items(), key=str):
            host_settings.check_option(option, value, host, "%s.options.%s" % (where, checks.show(option)))
    if "files" in entry:
        run_record.check_files(where + ".files", entry["files"])
    # Where the host's units listen, as deployed (fleet/addresses.py): the
    # gateway and Prometheus connect there. Records before it have none.
    if "address" in entry:
        checks.connect_address(where + ".address", entry["address"], "the gateway")
    # Plans written before the record have no "hardware" key; a null one is
    # damage (it would switch the hardware checks off), refused below.
    hardware = None if "hardware" not in entry else _check_hardware(where + ".hardware", entry["hardware"])
    if "bandwidth" in entry:
        bandwidth_checks.check_bandwidth(where + ".bandwidth", entry["bandwidth"],
                                         None if hardware is None else hardware["numa_nodes"])
    return hardware


def _check_hardware(where, record):
    """{gpus: [[id, index], ...], numa_nodes: [...], cpus: cpulist} -> the sets."""
    record = _mapping(where, record)
    gpus = {}
    for i, gpu in enumerate(_list(where + ".gpus", record.get("gpus"), MAX_GPUS_PER_HOST)):
        pair = _list("%s.gpus[%d]" % (where, i), gpu, 2, 2)
        gpu_id = checks.text("%s.gpus[%d][0]" % (where, i), pair[0], _GPU_ID, _GPU_ID_RULE)
        index = _index("%s.gpus[%d][1]" % (where, i), pair[1])
        if gpu_id in gpus or (index is not None and index in gpus.values()):
            checks.fail("%s.gpus[%d]" % (where, i), "must not repeat a GPU id or index", pair)
        gpus[gpu_id] = index
    nodes = _nodes(where + ".numa_nodes", record.get("numa_nodes"))
    cpus = _cpus(where + ".cpus", record.get("cpus"), allow_empty=True)
    return {"gpus": gpus, "numa_nodes": set(nodes), "cpus": cpus}


def _check_instance(where, entry, hosts):
    """One instance entry: its own fields (contract.check_instance_fields,
    as the role checks them), then the kept plan's: its GPUs, stages, ports'
    range, model and texts; returns the fields the checks across entries use."""
    fields = contract.check_instance_fields(where, entry, contract.INSTANCE_FIELDS, hosts, unknown_index=True)
    _int(where + ".ordinal", entry.get("ordinal", 0), 0, MAX_GPUS_PER_HOST - 1)
    indices = fields["gpu_indices"]
    check_device.check_cpu_entry(where, entry, fields)
    gpus = _check_gpus(where + ".gpus", entry["gpus"], indices)
    binding = _check_binding(where + ".binding", entry["binding"], fields["binding"], indices)
    cpus = set(binding["cpus"])
    if "cpus" in entry:
        cpus |= _cpus(where + ".cpus", entry["cpus"])
    nodes = set(binding["nodes"])
    if "numa_nodes" in entry:
        nodes |= set(_nodes(where + ".numa_nodes", entry["numa_nodes"]))
    for i, stage in enumerate(_list(where + ".stages", entry.get("stages", []), MAX_GPUS_PER_HOST)):
        nodes |= _check_stage("%s.stages[%d]" % (where, i), stage, indices)
    if "dist_port_range" in entry:
        low, high = [_port("%s.dist_port_range[%d]" % (where, i), p)
                     for i, p in enumerate(_list(where + ".dist_port_range", entry["dist_port_range"], 2, 2))]
        if low > high:
            checks.fail(where + ".dist_port_range", "must be [first, last] with first <= last", [low, high])
    if entry.get("model") is not None:
        checks.command_word(where + ".model", entry["model"])
    if entry.get("served_model_name") is not None:
        contract.check_served_name(where + ".served_model_name", entry["served_model_name"])
    for field in ("reason", "worst_link", "memory_policy"):
        _short_text("%s.%s" % (where, field), entry.get(field), allow_none=True)
    if "deployed" in entry:
        run_record.check_run(where + ".deployed", entry["deployed"])
    return {"where": where, "host": fields["host"], "name": fields["name"], "tp_size": fields["tp_size"],
            "pp_size": fields["pp_size"], "ports": [fields["port"], fields["dist_port"]], "gpus": gpus, "cpus": cpus,
            "nodes": nodes, "multinode": fields["multinode"], "ranks": [rank["node"] for rank in fields["ranks"]],
            "device": fields["device"], "serves": (entry.get("model"), entry.get("served_model_name"))}


def _check_gpus(where, gpus, indices):
    """gpus: one {id, index, ...} per entry of gpu_indices, in that order; returns [(id, index)]."""
    out = []
    for i, gpu in enumerate(_list(where, gpus, MAX_GPUS_PER_HOST)):
        at = "%s[%d]" % (where, i)
        gpu = _mapping(at, gpu)
        gpu_id = checks.text(at + ".id", gpu.get("id"), _GPU_ID, _GPU_ID_RULE)
        for field in ("pci_bus_id", "uuid", "name"):
            _short_text("%s.%s" % (at, field), gpu.get(field), allow_none=True)
        out.append((gpu_id, _index(at + ".index", gpu.get("index"))))
    if [index for dummy, index in out] != indices:
        checks.fail(where, "must hold one GPU per entry of gpu_indices %s, in that order"
                    % ",".join(str(i) for i in indices), [index for dummy, index in out])
    if len(set(gpu_id for gpu_id, dummy in out)) != len(out):
        checks.fail(where, "must not repeat a GPU id", [gpu_id for gpu_id, dummy in out])
    return out


def _check_binding(where, binding, checked, indices):
    """binding.workers (contract.check_binding checked the rest): every CPU
    and node they name, with the binding's, for the record checks."""
    cpus, nodes, mode = set(checked["cpu_set"]), set(checked["mems"]), checked["mode"]
    workers = _list(where + ".workers", binding.get("workers", []), MAX_GPUS_PER_HOST)
    for i, worker in enumerate(workers):
        at = "%s.workers[%d]" % (where, i)
        worker = _mapping(at, worker)
        _index(at + ".gpu_index", worker.get("gpu_index"))
        nodes.add(_int(at + ".node", worker.get("node"), 0, MAX_NUMA_NODE))
        cpus |= _cpus(at + ".cpus", worker.get("cpus", ""), allow_empty=True)
    if mode == "per_worker" and [w.get("gpu_index") for w in workers] != indices:
        checks.fail(where + ".workers", "must hold one entry per GPU in the order of gpu_indices",
                    [w.get("gpu_index") for w in workers])
    return {"cpus": cpus, "nodes": nodes}


def _check_stage(where, stage, indices):
    stage = _mapping(where, stage)
    stage_gpus = [_index("%s.gpu_indices[%d]" % (where, i), g)
                  for i, g in enumerate(_list(where + ".gpu_indices", stage.get("gpu_indices", []),
                                              MAX_GPUS_PER_HOST))]
    if not set(stage_gpus) <= set(indices):
        checks.fail(where + ".gpu_indices", "must be GPUs of the instance's gpu_indices", stage_gpus)
    return set(_nodes(where + ".numa_nodes", stage.get("numa_nodes", [])))


def _check_unused(where, entry, hosts, records):
    entry = _mapping(where, entry)
    host = _host(where + ".host", entry.get("host"), hosts)
    gpu_id = None if entry.get("id") is None else checks.text(where + ".id", entry["id"], _GPU_ID, _GPU_ID_RULE)
    index = _index(where + ".index", entry.get("index"))
    _short_text(where + ".reason", entry.get("reason"), allow_none=True)
    record = records.get(host)
    if record is not None and gpu_id is not None and (gpu_id not in record["gpus"] or record["gpus"][gpu_id] != index):
        checks.fail(where, "must be a GPU this host has (its record: %s)" % _show_gpus(record), [gpu_id, index])


def _show_gpus(record):
    return ", ".join("%s=%s" % (g, i) for g, i in sorted(record["gpus"].items(), key=lambda item: str(item[1])))[
        :200] or "none"


def _check_per_host(checked, hosts, records):
    """Per host: at most one instance per GPU, no GPU, name or port twice, and
    only the GPUs, NUMA nodes and CPUs its record lists."""
    by_host = {}
    for inst in checked:
        by_host.setdefault(inst["host"], []).append(inst)
    for host, entries in sorted(by_host.items()):
        count = hosts[host]["gpus"]
        used = sum(len(inst["gpus"]) for inst in entries)
        if used > count:
            checks.fail("hosts.%s.gpus" % checks.show(host), "must be at least the GPUs its instances use (%d in %d "
                        "instances)" % (used, len(entries)), count)
        seen = {}
        for inst in entries:
            keys = [("name", inst["name"])] + [("port", p) for p in inst["ports"]] + [
                ("GPU", g) for pair in inst["gpus"] for g in pair if g is not None] + [
                ("CPU instance's NUMA node", n) for n in inst["ranks"]]
            for key in keys:
                if key in seen:
                    checks.fail(inst["where"], "must not share %s %s with %s on host %s"
                                % (key[0], key[1], seen[key], host), inst["name"])
                seen[key] = inst["where"]
            if records.get(host) is not None:
                _check_against_record(inst, records[host])


def _check_against_record(inst, record):
    where = inst["where"]
    for gpu_id, index in inst["gpus"]:
        if record["gpus"].get(gpu_id) != index:
            checks.fail(where + ".gpus", "must be GPUs this host has (its record: %s)" % _show_gpus(record),
                        [gpu_id, index])
    outside = sorted(inst["nodes"] - record["numa_nodes"])
    if outside:
        checks.fail(where + ".binding.mems", "must be NUMA nodes this host has (%s)"
                    % ", ".join(str(n) for n in sorted(record["numa_nodes"])), outside)
    outside = inst["cpus"] - record["cpus"]
    if outside:
        checks.fail(where + ".binding.cpus", "must be CPUs this host has (%s)" % format_cpulist(record["cpus"]),
                    format_cpulist(outside))


def _check_multinode(checked):
    """A multi-node instance has exactly one entry on each of its hosts, and they agree."""
    groups = {}
    for inst in checked:
        if inst["multinode"] is not None:
            groups.setdefault((inst["name"], tuple(inst["multinode"]["hosts"])), []).append(inst)
    for (name, hosts), entries in sorted(groups.items()):
        first = entries[0]
        on = sorted(inst["host"] for inst in entries)
        if on != sorted(hosts):
            checks.fail(first["where"] + ".multinode.hosts", "must each hold one entry of instance %s (entries on: %s)"
                        % (name, ", ".join(on)), list(hosts))
        for inst in entries[1:]:
            for field in ("tp_size", "pp_size", "serves", "device"):
                if inst[field] != first[field]:
                    checks.fail(inst["where"] + "." + field, "must be the same on every host of multi-node instance "
                                "%s (%s has %s)" % (name, first["where"], checks.show(first[field])), inst[field])
            if inst["multinode"]["master_port"] != first["multinode"]["master_port"]:
                checks.fail(inst["where"] + ".multinode.master_port", "must be the same on every host of multi-node "
                            "instance %s" % name, inst["multinode"]["master_port"])
