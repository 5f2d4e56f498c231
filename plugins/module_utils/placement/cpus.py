# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 3: the CPUs of each instance (rule 5 of docs/placement.md).

Each instance gets the CPUs of its own NUMA node(s), minus the reserved
housekeeping cores; instances sharing a node split it by physical core in
proportion to their GPUs there. Reads only the host's Topology
(placement/facts.py).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from ansible_collections.gpufleet.numa.plugins.module_utils.common import cpulist as _cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts import cpulist_cpus
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError


class CpuSet(NamedTuple):
    cpus: str  # cpulist; "" when no CPUs are known
    shared_node: bool  # another instance takes CPUs from the same node
    whole_nodes: bool  # exactly all CPUs of the instance's nodes (bind by node)


def fmt_ints(values):
    return ",".join(str(v) for v in values)


def node_sockets(topology):
    """NUMA node -> socket id from either side of the facts; missing = unknown."""
    result = {}
    for sock in topology.sockets:
        if sock.id is not None:
            for n in sock.numa_nodes:
                result[n] = sock.id
    for node in topology.nodes:
        if node.socket is not None:
            result[node.id] = node.socket
    return result


class SocketKey(NamedTuple):
    """A socket as placement keys it: the socket id the facts give, or, for a
    NUMA node whose socket is unknown, that node standing alone as its own
    socket (docs/placement.md, rule 7). The one type every socket is keyed by."""

    socket: Optional[int]  # None: the socket is unknown
    node: Optional[int]  # the node standing for an unknown socket; None when the socket is known

    @classmethod
    def of(cls, node, node_socket):
        """The key of NUMA node `node`'s socket (node_socket from node_sockets)."""
        socket = node_socket.get(node)
        return cls(socket, None) if socket is not None else cls(None, node)

    @property
    def known(self):
        return self.socket is not None

    def order(self):
        """Sort key: known sockets by id, then the nodes of unknown sockets by id."""
        return (0, self.socket) if self.socket is not None else (1, self.node)


def assign_cpus(topology, node_socket, inst_nodes, reserved, host):
    """(CpuSet per instance, notes).

    inst_nodes: per instance, ((node, GPUs of the instance on it), ...) sorted by node.
    """
    notes = []
    node_cpus, usable = _node_cpus(topology, inst_nodes, notes)
    cores = _Cores(topology, node_cpus, notes)
    # Only usable CPUs are handed out (cgroup cpuset, allowed list, isolcpus):
    # numactl refuses a CPU outside the service's allowed set.
    available = dict((n, set(c)) for n, c in usable.items())
    if reserved:
        _reserve(available, node_cpus, node_socket, cores, reserved, host)
    sources = _cpu_sources(topology, inst_nodes, node_socket, available, notes)
    users = {}
    for idx, src in enumerate(sources):
        for n, w in src:
            users.setdefault(n, []).append((idx, w))
    _note_unusable(sorted(set(n for entry in inst_nodes for n, _w in entry) | set(users)), node_cpus, usable, notes)
    parts, shared = _share_nodes(users, available, cores, len(inst_nodes), notes)
    plan = []
    for i, part in enumerate(parts):
        # Whole nodes: binding by node (numactl --cpunodebind) means the same
        # CPUs; otherwise (reserved cores, shared or borrowed nodes) bind by CPU list.
        node_set = set()
        for n, _w in inst_nodes[i]:
            node_set.update(node_cpus.get(n) or ())
        plan.append(CpuSet(_cpulist.format_cpulist(part), shared[i], bool(part) and part == node_set))
    return plan, notes


def _node_cpus(topology, inst_nodes, notes):
    """(node -> its CPUs, node -> its usable CPUs); a node missing from numa_nodes takes its GPUs' local_cpus."""
    node_cpus = dict((n.id, cpulist_cpus(n.cpus)) for n in topology.nodes)
    usable = dict((n.id, cpulist_cpus(n.usable)) for n in topology.nodes)
    for entry in inst_nodes:
        for n, _w in entry:
            if n not in node_cpus:
                node_cpus[n] = usable[n] = _gpu_local_cpus(topology, n)
                notes.append("NUMA node %d is not in numa_nodes; using its GPUs' local_cpus (%s)" % (
                    n, _cpulist.format_cpulist(node_cpus[n]) or "none"))
    return node_cpus, usable


class _Cores(object):
    """Physical cores from the SMT sibling lists, or the sibling pairs assumed without them (told once per node)."""

    def __init__(self, topology, node_cpus, notes):
        self.notes = notes
        self.core_of = {}
        for core in topology.smt_siblings:
            for cpu in core:
                self.core_of[cpu] = tuple(sorted(core))
        self.assumed = {}  # node -> offset of the sibling pairs assumed for it (SMT unknown)
        if not topology.smt_siblings:
            self.assumed = assumed_smt_offsets(node_cpus)
            for n, offset in self.assumed.items():
                have = set(node_cpus[n])
                for cpu in node_cpus[n]:
                    if cpu + offset in have:
                        self.core_of[cpu] = self.core_of[cpu + offset] = (cpu, cpu + offset)
        self.told = set()

    def tell(self, n, why):
        """Say once per node that its sibling pairs are assumed, and what for."""
        if n in self.assumed and n not in self.told:
            self.told.add(n)
            self.notes.append("SMT siblings unknown (smt_siblings is empty): NUMA node %d's CPUs are taken as "
                              "sibling pairs n and n+%d, the usual Linux numbering, to %s" % (n, self.assumed[n], why))

    def of(self, cpus):
        """Physical cores (tuples of threads) of a CPU set, by lowest thread."""
        if self.core_of:
            seen = {}
            for cpu in cpus:
                core = self.core_of.get(cpu, (cpu,))
                seen[core] = tuple(c for c in core if c in cpus)
            return sorted(seen.values())
        return [(c,) for c in sorted(cpus)]


def _reserve(available, node_cpus, node_socket, cores, reserved, host):
    """Take the reserved housekeeping CPUs out of available: the first `reserved` physical cores of each socket."""
    sockets = {}
    for n in available:
        sockets.setdefault(SocketKey.of(n, node_socket), set()).update(available[n])
    taken = set()
    for cpus in sockets.values():
        for core in cores.of(cpus)[:reserved]:
            taken.update(core)
    for n in sorted(node_cpus):
        if taken & set(node_cpus[n]):
            cores.tell(n, "reserve whole cores (reserved_cpus_per_socket)")
    for n in available:
        if available[n] and not (available[n] - taken):
            raise PlacementError("host %s: reserved_cpus_per_socket %d leaves no CPUs on NUMA node %d"
                                 % (host, reserved, n))
        available[n] -= taken


def _cpu_sources(topology, inst_nodes, node_socket, available, notes):
    """Per instance, the ((node, weight), ...) that give it CPUs (never a memory-only node)."""
    sources = []
    for idx, entry in enumerate(inst_nodes):
        src = [(n, w) for n, w in entry if available.get(n)]
        if not src:
            (first_node, _w) = entry[0]
            fallback = _nearest_cpu_node(topology, first_node, node_socket, available)
            if fallback is None:
                notes.append("instance %d: no CPUs known for NUMA node(s) %s; not CPU-pinned" % (
                    idx, fmt_ints(n for n, _w in entry)))
            else:
                notes.append("instance %d: NUMA node(s) %s have no CPUs; using CPUs of nearest node %d" % (
                    idx, fmt_ints(n for n, _w in entry), fallback))
                src = [(fallback, 1)]
        sources.append(src)
    return sources


def _note_unusable(nodes, node_cpus, usable, notes):
    for n in nodes:
        left_out = set(node_cpus.get(n) or ()) - set(usable.get(n) or ())
        if left_out:
            notes.append("NUMA node %d: CPUs %s are not usable by services (not in its usable_cpus %s: cgroup "
                         "cpuset, allowed CPUs or isolcpus); not handed out" % (
                             n, _cpulist.format_cpulist(left_out), _cpulist.format_cpulist(usable[n]) or "none"))


def _share_nodes(users, available, cores, count, notes):
    """(CPU set per instance, whether it shares a node): a node's CPUs to its one user, or split by core."""
    parts = [set() for _inst in range(count)]
    shared = [False] * count
    for n, members in users.items():
        cpus = available[n]
        if len(members) == 1:
            ((only, _w),) = members
            parts[only].update(cpus)
            continue
        for idx, _w in members:
            shared[idx] = True
        cores.tell(n, "split it between the %d instances sharing it by core" % len(members))
        # by physical core; without SMT information, contiguous runs of the cpulist
        units = cores.of(cpus)
        if len(units) < len(members):
            units = [(c,) for c in sorted(cpus)]
            if len(units) >= len(members):
                notes.append("NUMA node %d has fewer physical cores than the %d instances sharing it; "
                             "SMT siblings split between them" % (n, len(members)))
        if len(units) < len(members):
            notes.append("NUMA node %d has %d CPUs for %d instances; their CPU sets overlap" % (
                n, len(units), len(members)))
            for k, (idx, _w) in enumerate(members):
                parts[idx].update(units[k % len(units)] if units else ())
            continue
        for (idx, _w), chunk in zip(members, _split(units, [w for _i, w in members])):
            for unit in chunk:
                parts[idx].update(unit)
    return parts, shared


def assumed_smt_offsets(node_cpus):
    """node -> d for the nodes whose CPUs look like two equal halves, thread n and n+d of one core.

    Linux numbers the second hardware thread of every core after all first
    threads: CPU n's sibling is n + (CPUs of the host / 2). A node is taken
    so when its CPUs, sorted, are two halves of equal size, the second the
    first moved up by one constant d, with a gap between them (two runs, as
    "0-47,96-143") or d half of all CPUs known (one node, "0-31"). A node of
    one contiguous run on a larger host ("24-47" of 96) is left alone.
    """
    total = len(set().union(*node_cpus.values())) if node_cpus else 0
    out = {}
    for n, cpus in node_cpus.items():
        half = len(cpus) // 2
        if not half or len(cpus) % 2:
            continue
        low, high = cpus[:half], cpus[half:]
        offset = high[0] - low[0]
        if low[-1] >= high[0] or any(b - a != offset for a, b in zip(low, high)):
            continue
        if high[0] > low[-1] + 1 or 2 * offset == total:
            out[n] = offset
    return out


def _gpu_local_cpus(topology, node):
    """CPUs of a node missing from numa_nodes: the local_cpus of its GPUs."""
    cpus = set()
    for n, local in zip(topology.gpu_nodes, topology.gpu_local_cpus):
        if n == node and local:
            cpus.update(cpulist_cpus(local))
    return tuple(sorted(cpus))


def _split(units, weights):
    """Consecutive chunks of units, sized in proportion to weights, each >= 1."""
    total = sum(weights)
    count = len(units)
    sizes = [max(1, count * w // total) for w in weights]
    # hand out what rounding left, earliest first; take back from the largest if over
    i = 0
    while sum(sizes) < count:
        sizes[i % len(sizes)] += 1
        i += 1
    while sum(sizes) > count:
        biggest = max(range(len(sizes)), key=lambda k: sizes[k])
        sizes[biggest] -= 1
    out = []
    start = 0
    for size in sizes:
        out.append(units[start : start + size])
        start += size
    return out


def _nearest_cpu_node(topology, node, node_socket, available):
    """The node of the same socket with CPUs left that is nearest by SLIT distance."""
    distances = {}
    for entry in topology.nodes:
        if entry.id == node:
            distances = dict(entry.distances)
    same_socket = node_socket.get(node)
    candidates = [
        n for n in sorted(available)
        if available[n] and same_socket is not None and node_socket.get(n) == same_socket
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda n: (distances.get(n, 1000), n))
