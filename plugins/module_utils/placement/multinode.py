# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 5: instances over several hosts (fleet_plan, nodes_per_instance > 1).

vLLM's multi-node launch (--nnodes N --node-rank r, multiprocessing backend)
gives node r the ranks r*L .. (r+1)*L - 1, with rank = stage * tp_size +
tp_rank and L = tp_size * pp_size / N: every tensor-parallel group stays on
one host and each host runs pp_size / N consecutive pipeline stages. So each
host is planned exactly as a single host is, with pp_size / N stages and at
most one instance, and the hosts are taken N at a time in planning order.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import fmt_ints
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts import host_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import Note, host_warning, host_warnings
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.host import plan_host_view, read_host_view
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract


def plan_multinode(hosts, names, opts, host_opts, fleet_slots):
    """The fleet_plan result (docs/plan.md) for opts["nodes_per_instance"] > 1.

    hosts: mapping host -> vars or facts; names: the hosts in planning order;
    host_opts: the per-host options as fleet_plan plans a single host;
    fleet_slots: fleet_plan's name and port slots (instance ordinal 0 only).
    """
    nodes = opts["nodes_per_instance"]
    if len(names) < nodes:
        raise PlacementError("nodes_per_instance %d needs at least %d hosts, got %d (%s)"
                             % (nodes, nodes, len(names), ", ".join(names) or "none"))
    check_master_port(opts)
    if host_opts.get("device_class") == "cpu":
        raise PlacementError("nodes_per_instance %d (gpufleet_nodes_per_instance) with gpufleet_device_class cpu: a CPU "
                             "instance never spans hosts; leave it 1 (hosts %s)" % (nodes, ", ".join(names)))
    read = []
    for host in names:
        facts = host_facts(host, hosts[host])
        read.append((facts, read_host_view(facts, str(host))))
    check_shapes([view for dummy, view in read], nodes)

    exclude = opts["exclude_gpus"]
    # Each host runs its share of the stages, and holds one share at most.
    share_opts = contract.share_options(dict(host_opts, pp_size=opts["pp_size"]), nodes)
    instances, unused, warnings = [], [], []
    count = len(read) // nodes
    for first in range(0, count * nodes, nodes):
        chunk = read[first : first + nodes]
        members = [view.host for dummy, view in chunk]
        for rank, (facts, view) in enumerate(chunk):
            if isinstance(exclude, dict):
                share_opts["exclude_gpus"] = exclude.get(view.host, frozenset())
            try:
                plan = plan_host_view(view, share_opts, fleet_slots)
            except PlacementError as exc:
                raise PlacementError("%s (nodes_per_instance %d: each host runs pp_size %d / %d = %d pipeline "
                                     "stage(s))" % (exc, nodes, opts["pp_size"], nodes, share_opts["pp_size"]))
            (entry,) = plan["groups"]
            if rank and entry["device"] != instances[-1]["device"]:
                # NCCL and RCCL do not form one instance: every host of it serves on one class
                raise PlacementError("nodes_per_instance %d: hosts %s and %s of one instance serve on %s and %s "
                                     "GPUs (gpufleet_device_class); pair hosts of one class"
                                     % (nodes, members[0], view.host, instances[-1]["device"], entry["device"]))
            nics = host_nics(facts, view.host, entry["numa_nodes"])
            entry["multinode"] = {
                "nnodes": nodes,
                "node_rank": rank,
                "head": members[0],
                "hosts": list(members),
                "master_port": opts["master_port"],
                "nics": nics,
            }
            instances.append(entry)
            for gpu in plan["unused"]:
                unused.append({"host": view.host, "id": gpu["id"], "index": gpu["index"],
                               "reason": _share_reason(gpu["reason"], nodes)})
            warnings.extend(host_warnings(view.host, plan["warnings"]))
            if not any(nic["interfaces"] for nic in nics):
                warnings.append(host_warning(view.host, Note(
                    "multi-node instance %s (head %s): no NIC on NUMA node(s) %s of its GPUs in the facts; "
                    "NCCL traffic leaves through whatever interface NCCL picks (set gpufleet_socket_ifname)"
                    % (entry["name"], members[0], fmt_ints(entry["numa_nodes"])),
                    nodes=tuple(entry["numa_nodes"]))))

    left = [view for dummy, view in read[count * nodes :]]
    why = "not enough hosts for another %d-host instance (nodes_per_instance %d)" % (nodes, nodes)
    for view in left:
        warnings.extend(host_warnings(view.host, view.warnings))
        unused.extend({"host": view.host, "id": gpu.id, "index": gpu.index, "reason": why} for gpu in view.gpus)
    if left:
        # one warning, under the first host left over (a kept plan keeps each host's warnings with it)
        warnings.append(host_warning(left[0].host, (
            "nodes_per_instance %d: %d host(s) make %d instance(s); %s left over with no instance, their GPUs "
            "unused (add hosts or plan them in another group)" % (nodes, len(read), count, ", ".join(v.host for v in left)))))

    gpu_total = sum(len(view.gpus) for dummy, view in read)
    return {"instances": instances, "unused": unused, "warnings": warnings,
            "totals": contract.plan_totals(len(names), gpu_total, instances)}


def _share_reason(reason, nodes):
    # The cap is how a host is limited to one share, not an option the caller set.
    if reason == "max_instances_per_host (1) reached":
        return "%s: a host holds one share of one multi-node instance (nodes_per_instance %d)" % (reason, nodes)
    return reason


def check_master_port(opts):
    """The head's rendezvous port must not be one of its instance's own ports."""
    port = opts["master_port"]
    if port == opts["base_port"]:
        raise PlacementError("master_port %d equals base_port %d, the API port of each host's instance; "
                             "move master_port or base_port" % (port, opts["base_port"]))
    low = opts["dist_port_base"]
    high = low + opts["dist_port_stride"] - 1
    if low <= port <= high:
        raise PlacementError("master_port %d falls inside the VLLM_PORT range %d-%d of each host's instance "
                             "(dist_port_base %d, dist_port_stride %d); move master_port or dist_port_base"
                             % (port, low, high, low, opts["dist_port_stride"]))


def shape(view):
    """What hosts of one instance must share: the GPU count and the sorted GPU names."""
    return len(view.gpus), tuple(sorted(g.name or "" for g in view.gpus))


def _show_shape(key):
    count, gpu_names = key
    if not count:
        return "no GPUs"
    return " + ".join("%d x %s" % (len(list(same)), name or "(name unknown)")
                      for name, same in itertools.groupby(gpu_names))


def check_shapes(views, nodes):
    """Refuse hosts of different shapes: an instance's hosts must run identical shares."""
    by_shape = {}
    for view in views:
        by_shape.setdefault(shape(view), []).append(view.host)
    if len(by_shape) > 1:
        raise PlacementError("nodes_per_instance %d: hosts differ in shape (%s); plan them in separate groups" % (
            nodes, "; ".join("%s: %s" % (_show_shape(key), ", ".join(members)) for key, members in by_shape.items())))


def host_nics(facts, host, numa_nodes):
    """The host's NICs on the given NUMA nodes, as {id, interfaces, numa_node}, in facts order."""
    raw = facts.get("nics")
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple)):
        raise PlacementError("host %s: numa_topology.nics must be a list, got %s" % (host, show(raw)))
    wanted = set(numa_nodes)
    out = []
    for i, nic in enumerate(raw):
        path = "host %s: numa_topology.nics[%d]" % (host, i)
        if not isinstance(nic, Mapping):
            raise PlacementError("%s must be a mapping, got %s" % (path, show(nic)))
        nic_id = nic.get("id")
        if not isinstance(nic_id, str) or not nic_id:
            raise PlacementError("%s.id must be a non-empty string, got %s" % (path, show(nic_id)))
        node = nic.get("numa_node")
        if node is not None and (not isinstance(node, int) or isinstance(node, bool)):
            raise PlacementError("%s.numa_node must be an integer or null, got %s" % (path, show(node)))
        interfaces = nic.get("interfaces")
        interfaces = [] if interfaces is None else interfaces
        if not isinstance(interfaces, (list, tuple)) or not all(isinstance(x, str) and x for x in interfaces):
            raise PlacementError("%s.interfaces must be a list of interface names, got %s" % (path, show(interfaces)))
        if node in wanted:
            out.append({"id": str(nic_id), "interfaces": [str(x) for x in interfaces], "numa_node": int(node)})
    return out
