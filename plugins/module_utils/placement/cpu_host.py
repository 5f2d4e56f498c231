# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The plan of a CPU host (gpufleet_device_class: cpu; docs/plan.md, "CPU instances").

The planner treats a CPU host's NUMA nodes as it treats a GPU host's
GPUs: an instance is tp_size ranks, one NUMA node each, all on one socket
(vLLM's CPU backend runs tensor parallel over ranks; a rank across the
socket interconnect would read its memory remotely). A node without a
known socket stands as its own socket, as for GPU hosts. Nodes a socket
cannot fill an instance with are left over with a reason. The CPUs of
each instance come from the same helper as a GPU host's
(placement/cpus.py: reserved cores per socket, usable CPUs, SMT).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import reasons
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import SocketKey, assign_cpus, node_sockets
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import Note, note
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError


def _error(host, text):
    error = PlacementError("host %s: %s" % (host, text))
    error.host = host
    return error


def check_cpu_options(opts, host):
    """The options a CPU host refuses: pipeline stages and instances over several hosts."""
    if opts["pp_size"] > 1:
        raise _error(host, "pp_size %d (gpufleet_pp_size): a CPU host (gpufleet_device_class: cpu) runs tensor "
                           "parallel ranks only, one per NUMA node; leave pp_size 1" % opts["pp_size"])
    if opts["worker_binding"] == "per_worker":
        raise _error(host, "worker_binding per_worker (gpufleet_worker_binding) binds each GPU worker to its GPU's "
                           "node; a CPU instance binds each rank to its node (binding.ranks): leave it auto or process")
    nodes = opts.get("nodes_per_instance", 1)
    if nodes > 1:
        raise _error(host, "nodes_per_instance %d (gpufleet_nodes_per_instance): a CPU instance never spans hosts "
                           "(gpufleet_device_class: cpu); leave it 1" % nodes)


def _sockets(topology, node_socket, memory):
    """[(SocketKey, [node, ...])] of the nodes with usable CPUs, sockets and nodes in order;
    and the (node, why) of nodes with CPUs none of which services may use, or without memory."""
    by_socket = {}
    bare = []
    for node in topology.nodes:
        if node.memory_only or not node.cpus:
            continue  # memory-only nodes (HBM, CXL) hold no rank
        if memory.get(node.id) == 0:
            # A rank's memory is bound to its node (--membind): a node without memory cannot hold one.
            bare.append((node.id, "it has CPUs %s but no memory (0 MB): a rank's memory is bound to its node"
                         % node.cpus))
            continue
        if not node.usable:
            bare.append((node.id, "none of its CPUs %s is usable by services (cgroup cpuset, allowed CPUs or "
                                  "isolcpus)" % node.cpus))
            continue
        by_socket.setdefault(SocketKey.of(node.id, node_socket), []).append(node.id)
    return sorted(by_socket.items(), key=lambda item: item[0].order()), bare


def _instances(sockets, tp, cap):
    """(instances as node tuples, [(node, why)] left over): tp consecutive nodes of one socket each."""
    instances, left = [], []
    for key, nodes in sockets:
        full = len(nodes) - len(nodes) % tp
        instances += [tuple(nodes[i : i + tp]) for i in range(0, full, tp)]
        place = "socket %d" % key.socket if key.known else "NUMA node %d (socket unknown)" % key.node
        for node in nodes[full:]:
            left.append((node, "%s holds %d NUMA node(s) with usable CPUs: tp_size %d forms %d instance(s) there "
                               "and leaves this one (a CPU instance never spans sockets)"
                         % (place, len(nodes), tp, full // tp)))
    if cap is not None and len(instances) > cap:
        left += [(node, "max_instances_per_host (%d) reached" % cap) for inst in instances[cap:] for node in inst]
        instances = instances[:cap]
    return instances, sorted(left)


def _no_instance(host, tp, sockets, bare):
    most = max([len(nodes) for dummy, nodes in sockets] or [0])
    if not sockets and not bare:
        return _error(host, "gpufleet_device_class is cpu, but the topology facts list no NUMA node with CPUs")
    unknown = any(not key.known for key, dummy in sockets)
    alone = " (a node whose socket the facts do not know stands as its own socket)" if unknown else ""
    return _error(host, "tp_size %d (gpufleet_tp_size) needs %d NUMA nodes with usable CPUs on one socket for a CPU "
                        "instance (one rank per node, never across sockets; gpufleet_allow_span does not apply); its sockets "
                        "hold at most %d%s" % (tp, tp, most, alone))


def plan_cpu_host(view, opts, fleet_slots=None, gpu_warnings=()):
    """The plan of a CPU host (HostFacts), in plan_host_view's shape: {host, groups, unused, warnings}.

    Its GPUs, if any, are unused. fleet_slots as for GPU hosts (same slot rules).
    """
    host = view.host
    check_cpu_options(opts, host)
    topology = view.topology
    node_socket = node_sockets(topology)
    memory = dict(view.node_memory)
    sockets, bare = _sockets(topology, node_socket, memory)
    instances, left = _instances(sockets, opts["tp_size"], opts["max_instances_per_host"])
    if not instances:
        raise _no_instance(host, opts["tp_size"], sockets, bare)
    cpu_sets, notes = assign_cpus(topology, node_socket, [tuple((n, 1) for n in inst) for inst in instances],
                                  opts["reserved_cpus_per_socket"], host)
    node_cpus = dict((node.id, set(parse_cpulist(node.cpus))) for node in topology.nodes)
    slots = fleet_slots(len(instances), host) if fleet_slots is not None else None
    groups = []
    for ordinal, (nodes, cpu_set) in enumerate(zip(instances, cpu_sets)):
        group = _group(nodes, cpu_set, node_cpus, node_socket, memory)
        if slots is not None:
            slot = slots.slots[ordinal]
            group.update(host=host, name=slot.name, ordinal=ordinal, tp_size=len(nodes), pp_size=1, port=slot.port,
                         dist_port=slot.dist_port, dist_port_range=[slot.dist_port, slot.dist_port + slots.range_last])
        groups.append(group)
    warnings = [note(w) for w in list(gpu_warnings) + list(notes)]
    warnings += [Note("NUMA node %d left over: %s" % (node, why), nodes=(node,)) for node, why in sorted(left + bare)]
    reason = "gpufleet_device_class is cpu: GPUs are not used on a CPU host"
    unused = [{"id": gpu.id, "index": gpu.index, "reason": reason} for gpu in view.gpus]
    return {"host": host, "groups": groups, "unused": unused, "warnings": warnings}


def _group(nodes, cpu_set, node_cpus, node_socket, memory):
    """One CPU instance (without its fleet fields): ranks in node order."""
    mine = set(parse_cpulist(cpu_set.cpus)) if cpu_set.cpus else set()
    ranks = [{"node": node, "cpus": format_cpulist(mine & node_cpus.get(node, set())), "memory_mb": memory.get(node)}
             for node in nodes]
    sockets = sorted(set(node_socket[n] for n in nodes if n in node_socket))
    by_node = bool(cpu_set.whole_nodes and not cpu_set.shared_node)
    count = len(mine)
    reason = "CPU instance%s on %s, %d CPU%s" % (
        "" if len(nodes) == 1 else " of %d ranks (one per NUMA node)" % len(nodes), reasons.where(list(nodes), sockets),
        count, "" if count == 1 else "s")
    return {
        "device": "cpu",
        "gpus": [],
        "gpu_indices": [],
        "stages": [],
        "numa_nodes": list(nodes),
        "sockets": sockets,
        "cpus": cpu_set.cpus,
        "cpus_shared_node": cpu_set.shared_node,
        "cpus_whole_nodes": cpu_set.whole_nodes,
        "memory_policy": "bind",
        "binding": {"mode": "process", "cpus": cpu_set.cpus, "mems": list(nodes), "policy": "bind",
                    "by_node": by_node, "workers": [], "ranks": ranks},
        "worst_link": None,
        "reason": reason,
    }
