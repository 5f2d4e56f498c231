# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 1: read and check one host's topology facts.

The one place where the facts (docs/facts.md, schema 1) given to the
planner are checked: every field the planner reads, its shape and its
type. Anything else fails with a PlacementError naming the host and the
field path (placement/facts_checks.py says what is wrong). A numa_node of
-1 (the kernel's NUMA_NO_NODE) reads as unknown, with a warning. A node's
usable_cpus must be a subset of its cpus. A GPU's vendor and a node's
memory_mb are read for the device class (placement/device.py). Fields the
planner does not read (a GPU's memory_mb, pcie, nics, a node's kind, a
GPU's memory_numa_node, ...) are neither checked nor kept.

The result is a frozen view in plain types: the GPUs' identities in PCI
order, and a Topology holding everything else the planner reads. The plan
of a host is a function of its Topology, the excluded GPUs and the
options, so that triple is the key of the plan cache (placement/host.py):
a fact the planner reads is in the key because the planner reads it from
the key.

Hosts of one kind hold the same links, NUMA nodes, sockets and SMT
siblings: that part is checked once per distinct content (CheckedParts,
keyed by an exact serialisation of the plain values), the GPUs of every
host each time.
"""

from __future__ import annotations

import functools
import itertools
import marshal
import operator
from collections.abc import Mapping
from typing import NamedTuple, Optional

from ansible_collections.gpufleet.numa.plugins.module_utils.common import pci as _pci
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import device
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import facts_checks as checks
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts_checks import ROOT, cpulist_cpus, fail
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
# The facts' schema has one home: the assembler that writes it.
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.assemble import SCHEMA_VERSION


__all__ = ["Gpu", "HostFacts", "Node", "SCHEMA_VERSION", "Socket", "Topology", "cpulist_cpus", "host_facts",
           "host_name", "link_score", "read_host_facts"]


class Gpu(NamedTuple):
    """A GPU as plans name it (identities only; where it sits is in Topology)."""

    id: str
    pci_bus_id: Optional[str]
    index: Optional[int]
    uuid: Optional[str]
    name: Optional[str]


class Node(NamedTuple):
    id: int
    cpus: str  # cpulist; "" for a memory-only node or when the facts hold none
    socket: Optional[int]
    distances: tuple  # ((node, distance), ...) sorted by node
    usable: str  # the CPUs of cpus that services may use (usable_cpus; cpus when the facts do not say)
    memory_only: bool  # cpus is "" in the facts: a node without CPUs (HBM, CXL, a GPU's memory)


class Socket(NamedTuple):
    id: Optional[int]
    numa_nodes: tuple


class Topology(NamedTuple):
    """Everything the planner reads about a host besides GPU identities.

    Per GPU position (PCI order): NUMA node (None when unknown) and
    local_cpus; the link class of every GPU pair by position (facts links
    in either direction; None when the facts hold none); the NUMA nodes by
    id (with their usable CPUs, and whether they are memory-only); the
    sockets as listed; the SMT sibling lists.
    """

    gpu_nodes: tuple
    gpu_local_cpus: tuple
    links: tuple
    nodes: tuple
    sockets: tuple
    smt_siblings: tuple


class HostFacts(NamedTuple):
    host: str
    gpus: tuple  # Gpu, PCI order
    topology: Topology
    warnings: tuple  # what the reader itself noticed (numa_node -1)
    # Read for the device class only (placement/device.py), outside the plan cache key:
    vendors: tuple = ()  # per GPU (PCI order): its vendor, None when unknown
    node_memory: tuple = ()  # ((node, memory_mb or None), ...) by node


class GpuRow(NamedTuple):
    """One GPU as the reader reads it: its identity and where it sits."""

    gpu: Gpu
    numa_node: Optional[int]
    local_cpus: Optional[str]


class CheckedParts(NamedTuple):
    """The part of a host's Topology that does not depend on its GPUs' fields (beyond their ids)."""

    links: tuple
    nodes: tuple
    sockets: tuple
    smt_siblings: tuple


_NONE = type(None)
_OPT_STR = frozenset((str, _NONE))
_INT = frozenset((int,))
_OPT_INT = frozenset((int, _NONE))
_CPU_LISTS = frozenset((list, tuple))


@functools.lru_cache(maxsize=256)
def link_score(link):
    """pci.link_score, once per link class (the reader checks every link of every host)."""
    return _pci.link_score(link)


class GpuColumns(NamedTuple):
    """The GPUs of a host in PCI order, as columns."""

    gpus: tuple  # Gpu
    numa_nodes: tuple  # its NUMA node or None
    local_cpus: tuple  # its local_cpus or None


def _read_gpus(facts, host, warnings):
    """GpuColumns in PCI order (GPUs without a bus id after those with one, by index)."""
    gpus = facts.get("gpus")
    if not isinstance(gpus, (list, tuple)):
        fail(host, "gpus", "must be a list", gpus)
    columns = _plain_gpu_columns(gpus)
    if columns is None:
        rows = [GpuRow(Gpu(gid, bus, index, uuid, name), node, local)
                for gid, bus, index, uuid, name, node, local in checks.checked_gpu_rows(gpus, host, warnings)]
    else:
        ids, buses, indices, uuids, names, nodes, local = columns
        identities = tuple(map(tuple.__new__, itertools.repeat(Gpu), zip(ids, buses, indices, uuids, names)))
        if None not in buses and list(buses) == sorted(buses):
            return GpuColumns(identities, nodes, local)
        rows = list(map(tuple.__new__, itertools.repeat(GpuRow), zip(identities, nodes, local)))
    rows.sort(key=_pci_order)
    return GpuColumns(*map(tuple, zip(*rows))) if rows else GpuColumns((), (), ())


def _plain_gpu_columns(gpus):
    """The GPU fields as columns when every GPU holds every field in plain, valid values; else None."""
    try:
        rows = list(map(_gpu_fields, gpus))
    except (TypeError, KeyError, IndexError):
        return None  # not a dict, or a field missing
    if not rows:
        return ((),) * len(checks.GPU_FIELDS)
    ids, buses, indices, uuids, names, nodes, local = columns = tuple(zip(*rows))
    # ids non-empty strings and unique; bus ids, UUIDs, names and local_cpus strings or null;
    # indices and nodes integers >= 0 or null (filter(None, ...) leaves out null and 0)
    if not (set(map(type, itertools.chain(ids, buses, uuids, names, local))) <= _OPT_STR and all(ids)
            and len(set(ids)) == len(ids) and set(map(type, itertools.chain(indices, nodes))) <= _OPT_INT
            and min(filter(None, itertools.chain(indices, nodes)), default=0) >= 0):
        return None
    try:
        for value in set(local):
            if value is not None:
                cpulist_cpus(value)
    except ValueError:
        return None
    return columns


_gpu_fields = operator.itemgetter(*checks.GPU_FIELDS)


def _pci_order(row):
    gpu = row.gpu
    return (gpu.pci_bus_id is None, gpu.pci_bus_id or "", gpu.index is None, gpu.index or 0, gpu.id)


def _read_links(facts, host, ids):
    """The link class of every GPU pair by position: links[a][b], else links[b][a], else None."""
    links = facts.get("links")
    if links is None:
        links = {}
    elif not checks.is_mapping(links):
        fail(host, "links", "must be a mapping", links)
    n = len(ids)
    rows = []
    for i, a in enumerate(ids):
        row = links.get(a)
        if row is None:
            rows.append([None] * n)
            continue
        if not checks.is_mapping(row):
            fail(host, "links[%s]" % show(a), "must be a mapping", row)
        row = list(map(row.get, ids))
        row[i] = None  # no self pairs
        rows.append(row)
    flat = list(itertools.chain.from_iterable(rows))
    if not set(map(type, flat)) <= _OPT_STR:
        for i, row in enumerate(rows):
            for j, link in enumerate(row):
                if link is not None and not isinstance(link, str):
                    fail(host, "links[%s][%s]" % (show(ids[i]), show(ids[j])), "must be a link class or null", link)
                row[j] = None if link is None else str(link)
    for link in set(flat):
        if link is None:
            continue
        try:
            link_score(link)
        except ValueError:
            a, b = next((ids[i], ids[j]) for i in range(n) for j in range(n) if rows[i][j] == link)
            raise PlacementError("host %s: %s.links[%s][%s]: unknown link class %s between GPUs %s and %s"
                                 % (host, ROOT, show(a), show(b), show(link), a, b))
    if flat.count(None) > n:
        # a pair listed in one direction only reads the same both ways
        for i in range(n):
            for j in range(i + 1, n):
                if rows[i][j] is None:
                    rows[i][j] = rows[j][i]
                elif rows[j][i] is None:
                    rows[j][i] = rows[i][j]
    return tuple(map(tuple, rows))


def _read_nodes(facts, host):
    """NUMA nodes by id."""
    nodes = {}
    for i, entry in enumerate(checks.a_list(host, "numa_nodes", facts.get("numa_nodes"))):
        if not checks.is_mapping(entry):
            fail(host, "numa_nodes[%d]" % i, "must be a mapping", entry)
        node_id, cpus, socket, distances, usable = map(entry.get, _NODE_FIELDS)
        if not (node_id.__class__ is int and node_id >= 0 and (socket is None or (socket.__class__ is int and socket >= 0))):
            node_id = checks.integer(host, "numa_nodes[%d].id" % i, node_id)
            socket = checks.opt_int(host, "numa_nodes[%d].socket" % i, socket)
        if node_id in nodes:
            raise PlacementError("host %s: %s.numa_nodes[%d].id: NUMA node %d appears twice" % (host, ROOT, i, node_id))
        if cpus is not None:
            cpus = checks.cpulist_field(host, "numa_nodes[%d].cpus" % i, cpus) if cpus.__class__ is not str else cpus
            try:
                cpulist_cpus(cpus)
            except ValueError:
                checks.cpulist_field(host, "numa_nodes[%d].cpus" % i, cpus)
        if distances:
            distances = checks.distances(host, "numa_nodes[%d].distances" % i, distances)
        elif distances is not None and not checks.is_mapping(distances):
            fail(host, "numa_nodes[%d].distances" % i, "must be a mapping", distances)
        if usable is None:
            usable = cpus or ""
        else:
            path = "numa_nodes[%d].usable_cpus" % i
            usable = checks.cpulist_field(host, path, usable)
            if not set(cpulist_cpus(usable)) <= set(cpulist_cpus(cpus or "")):
                fail(host, path, "must be a subset of the node's cpus %s" % show(cpus or ""), usable)
        nodes[node_id] = Node(node_id, cpus or "", socket, distances or (), usable, cpus == "")
    return tuple(nodes[n] for n in sorted(nodes))


_NODE_FIELDS = ("id", "cpus", "socket", "distances", "usable_cpus")


def _read_sockets(facts, host):
    out = []
    for i, entry in enumerate(checks.a_list(host, "sockets", facts.get("sockets"))):
        if not checks.is_mapping(entry):
            fail(host, "sockets[%d]" % i, "must be a mapping", entry)
        sid, members = entry.get("id"), entry.get("numa_nodes")
        if ((sid is None or (sid.__class__ is int and sid >= 0)) and members.__class__ is list
                and set(map(type, members)) <= _INT and (not members or min(members) >= 0)):
            out.append(Socket(sid, tuple(members)))
        else:
            out.append(Socket(*checks.checked_socket(host, "sockets[%d]" % i, sid, members)))
    return tuple(out)


def _read_smt(facts, host):
    """SMT sibling lists: lists of CPU ids."""
    smt = checks.a_list(host, "smt_siblings", facts.get("smt_siblings"))
    if set(map(type, smt)) <= _CPU_LISTS and set(map(type, itertools.chain.from_iterable(smt))) <= _INT:
        return tuple(map(tuple, smt))
    return checks.checked_smt(host, smt)


# Checked parts by the exact serialisation of what they were read from.
_CHECKED_LIMIT = 1024
_CHECKED = {}


def _parts_key(facts, ids):
    """marshal's bytes of the GPU ids and the facts' links, numa_nodes, sockets and smt_siblings, or None.

    marshal writes only the built-in types, each with its own type code (a
    str or int subclass, a bool for an int, a float for an int are refused
    or written differently), so equal bytes mean equal values of equal
    types: the checks' answer cannot differ. Anything else (templated
    subclasses, other mappings) is checked each time.
    """
    try:
        return marshal.dumps((ids, facts.get("links"), facts.get("numa_nodes"), facts.get("sockets"),
                              facts.get("smt_siblings")), 2)
    except ValueError:
        return None


def _read_parts(facts, host, ids):
    """CheckedParts of a host; each distinct content is checked once (its errors each time, naming the host)."""
    key = _parts_key(facts, ids)
    parts = _CHECKED.get(key) if key is not None else None
    if parts is None:
        parts = CheckedParts(_read_links(facts, host, ids), _read_nodes(facts, host), _read_sockets(facts, host),
                             _read_smt(facts, host))
        if key is not None:
            if len(_CHECKED) >= _CHECKED_LIMIT:
                _CHECKED.clear()
            _CHECKED[key] = parts
    return parts


def clear_cache():
    """Forget the checked parts (benchmarks use it to time a cold run)."""
    _CHECKED.clear()


def host_name(facts, host=None):
    """The name errors and plans use: the given host, else the facts' hostname."""
    if host:
        return host if host.__class__ is str else str(host)
    name = facts.get("hostname") if isinstance(facts, Mapping) else None
    if isinstance(name, str) and name:
        return str(name)
    return "(unnamed host)"


def read_host_facts(facts, host=None):
    """Check one host's facts and return its HostFacts view; raise PlacementError naming host and field."""
    host = host_name(facts, host)
    if not isinstance(facts, Mapping):
        raise PlacementError("host %s: topology facts must be a mapping, got %s" % (host, type(facts).__name__))
    version = facts.get("schema_version")
    if not checks.is_int(version) or version != SCHEMA_VERSION:
        raise PlacementError(
            "host %s: topology facts schema_version is %s, this collection reads %d"
            % (host, show(version), SCHEMA_VERSION)
        )
    name = facts.get("hostname")
    if name is not None and not isinstance(name, str):
        fail(host, "hostname", "must be a string or null", name)
    warnings = []
    gpus = _read_gpus(facts, host, warnings)
    parts = _read_parts(facts, host, tuple(g.id for g in gpus.gpus))
    topology = Topology(gpus.numa_nodes, gpus.local_cpus, parts.links, parts.nodes, parts.sockets, parts.smt_siblings)
    return HostFacts(host, gpus.gpus, topology, tuple(warnings), device.read_vendors(facts, host, gpus.gpus),
                     device.read_node_memory(facts, host))


def host_facts(host, value):
    """Topology facts from a hostvars-like entry or the facts themselves."""
    facts = contract.facts_view(host, value, missing=None)
    if facts is not None:
        return facts
    raise PlacementError(
        "host %s: no topology facts (expected ansible_facts.numa_topology, numa_topology or the facts themselves); "
        "run gpufleet.numa.numa_facts on it or leave it out with the hosts option" % host
    )
