# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 1: read and check one host's topology facts.

The one place where the facts (docs/facts.md, schema 1) given to the
planner are checked: every field the planner reads, its shape and its
type. Anything else fails with a PlacementError naming the host and the
field path ("host gpu-a: numa_topology.gpus[3].numa_node must be an
integer >= 0, -1 (unknown) or null, got 'x'"). A numa_node of -1 (the
kernel's NUMA_NO_NODE) reads as unknown, with a warning. A node's usable_cpus must be a
subset of its cpus. Fields the planner does not read (memory_mb, vendor, pcie, nics, a
node's kind, a GPU's memory_numa_node, ...) are neither checked nor kept.

The result is a frozen view in plain types: the GPUs' identities in PCI
order, and a Topology holding everything else the planner reads. The plan
of a host is a function of its Topology, the excluded GPUs and the
options, so that triple is the key of the plan cache (placement_host.py):
a fact the planner reads is in the key because the planner reads it from
the key.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Mapping
from typing import NamedTuple, Optional

from ansible_collections.gpufleet.numa.plugins.module_utils.common import cpulist as _cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common import pci as _pci
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show

SCHEMA_VERSION = 1

# The kernel's NUMA_NO_NODE: sysfs numa_node reads -1 when the firmware does
# not say. Unknown, never node -1 (and never node 0).
NO_NODE = -1

ROOT = "numa_topology"


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


# Each reader below takes plain values of exactly the documented types on a
# fast path (a fleet is mostly such hosts) and sends anything else through
# the checks that say what is wrong, or that turn the str/int subclasses
# templating hands in into plain values.

_NONE = type(None)
_OPT_STR = frozenset((str, _NONE))
_STR = frozenset((str,))
_INT = frozenset((int,))
_OPT_INT = frozenset((int, _NONE))
_CPU_LISTS = frozenset((list, tuple))


def _fail(host, path, rule, value):
    raise PlacementError("host %s: %s.%s %s, got %s" % (host, ROOT, path, rule, show(value)))


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_mapping(value):
    return value.__class__ is dict or isinstance(value, Mapping)


def _text(host, path, value, allow_none=True):
    if value is None and allow_none:
        return None
    if isinstance(value, str) and (value or allow_none):
        return str(value)
    _fail(host, path, "must be a string or null" if allow_none else "must be a non-empty string", value)


def _opt_int(host, path, value, minimum=0):
    if value is None:
        return None
    if _is_int(value) and value >= minimum:
        return int(value)
    _fail(host, path, "must be an integer >= %d or null" % minimum, value)


def _int(host, path, value, minimum=0):
    if _is_int(value) and value >= minimum:
        return int(value)
    _fail(host, path, "must be an integer >= %d" % minimum, value)


def _list(host, path, value):
    """A list field; null or missing is the empty list."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return value
    _fail(host, path, "must be a list", value)


def _mapping(host, path, value):
    if _is_mapping(value):
        return value
    _fail(host, path, "must be a mapping", value)


@functools.lru_cache(maxsize=1024)
def cpulist_cpus(text):
    """CPU ids of a cpulist, as a tuple (few distinct cpulists in a fleet: parsed once each)."""
    return tuple(_cpulist.parse_cpulist(text))


@functools.lru_cache(maxsize=256)
def link_score(link):
    """pci.link_score, once per link class (the reader checks every link of every host)."""
    return _pci.link_score(link)


def _cpulist_field(host, path, value):
    """A cpulist string or null."""
    if value is None:
        return None
    if not isinstance(value, str):
        _fail(host, path, "must be a cpulist string or null", value)
    value = str(value)
    try:
        cpulist_cpus(value)
    except ValueError as exc:
        _fail(host, path, "must be a cpulist (%s)" % exc, value)
    return value


def _gpu_node(host, path, value, warnings, gid):
    if value is None:
        return None
    if _is_int(value):
        if value == NO_NODE:
            warnings.append("GPU %s reports numa_node -1; NUMA node unknown" % gid)
            return None
        if value >= 0:
            return int(value)
    _fail(host, path, "must be an integer >= 0, -1 (unknown) or null", value)


def _read_gpus(facts, host, warnings):
    """(Gpu, numa node, local_cpus) per GPU, in PCI order (GPUs without a bus id after those with one, by index)."""
    gpus = facts.get("gpus")
    if not isinstance(gpus, (list, tuple)):
        _fail(host, "gpus", "must be a list", gpus)
    columns = _plain_gpu_columns(gpus)
    if columns is None:
        return _read_gpus_one_by_one(gpus, host, warnings)
    ids, buses, indices, uuids, names, nodes, local = columns
    identities = list(map(tuple.__new__, itertools.repeat(Gpu), zip(ids, buses, indices, uuids, names)))
    rows = list(zip(identities, nodes, local))
    if None in buses or list(buses) != sorted(buses):
        rows.sort(key=_pci_order)
    return rows


def _plain_gpu_columns(gpus):
    """The GPU fields as columns when every GPU holds every field in plain, valid values; else None."""
    try:
        rows = list(map(_gpu_fields, gpus))
    except (TypeError, KeyError, IndexError):
        return None  # not a dict, or a field missing
    if not rows:
        return ((),) * len(_GPU_FIELD_ORDER)
    ids, buses, indices, uuids, names, nodes, local = columns = tuple(zip(*rows))
    if not (set(map(type, ids)) <= _STR and all(ids) and len(set(ids)) == len(ids)
            and set(map(type, buses)) <= _OPT_STR and set(map(type, uuids)) <= _OPT_STR
            and set(map(type, names)) <= _OPT_STR and set(map(type, local)) <= _OPT_STR
            and set(map(type, indices)) <= _OPT_INT and set(map(type, nodes)) <= _OPT_INT
            and min(filter(_is_not_none, indices), default=0) >= 0
            and min(filter(_is_not_none, nodes), default=0) >= 0):
        return None
    try:
        for text in set(local):
            if text is not None:
                cpulist_cpus(text)
    except ValueError:
        return None
    return columns


def _is_not_none(value):
    return value is not None


def _pci_order(row):
    gpu = row[0]
    return (gpu.pci_bus_id is None, gpu.pci_bus_id or "", gpu.index is None, gpu.index or 0, gpu.id)


def _read_gpus_one_by_one(gpus, host, warnings):
    """_read_gpus for anything but plain valid GPUs: say what is wrong, or make the values plain."""
    out = []
    for i, gpu in enumerate(gpus):
        if not _is_mapping(gpu):
            _fail(host, "gpus[%d]" % i, "must be a mapping", gpu)
        gid, bus, index, uuid, name, node, local = map(gpu.get, _GPU_FIELD_ORDER)  # missing is null
        path = "gpus[%d]" % i
        gid = _text(host, path + ".id", gid, allow_none=False)
        bus = _text(host, path + ".pci_bus_id", bus)
        index = _opt_int(host, path + ".index", index)
        uuid = _text(host, path + ".uuid", uuid)
        name = _text(host, path + ".name", name)
        node = _gpu_node(host, path + ".numa_node", node, warnings, gid)
        local = _cpulist_field(host, path + ".local_cpus", local)
        out.append((Gpu(gid, bus, index, uuid, name), node, local))
    seen = set()
    for i, row in enumerate(out):
        if row[0].id in seen:
            raise PlacementError("host %s: %s.gpus[%d].id: GPU id %s appears twice" % (host, ROOT, i, row[0].id))
        seen.add(row[0].id)
    out.sort(key=_pci_order)
    return out


_GPU_FIELD_ORDER = ("id", "pci_bus_id", "index", "uuid", "name", "numa_node", "local_cpus")
_gpu_fields = operator.itemgetter(*_GPU_FIELD_ORDER)


def _read_links(facts, host, ids):
    """The link class of every GPU pair by position: links[a][b], else links[b][a], else None."""
    links = facts.get("links")
    if links is None:
        links = {}
    elif not _is_mapping(links):
        _fail(host, "links", "must be a mapping", links)
    n = len(ids)
    rows = []
    for i, a in enumerate(ids):
        row = links.get(a)
        if row is None:
            rows.append([None] * n)
            continue
        if not _is_mapping(row):
            _fail(host, "links[%s]" % show(a), "must be a mapping", row)
        row = list(map(row.get, ids))
        row[i] = None  # no self pairs
        rows.append(row)
    flat = list(itertools.chain.from_iterable(rows))
    if not set(map(type, flat)) <= _OPT_STR:
        for i, row in enumerate(rows):
            for j, link in enumerate(row):
                if link is not None and not isinstance(link, str):
                    _fail(host, "links[%s][%s]" % (show(ids[i]), show(ids[j])), "must be a link class or null", link)
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


@functools.lru_cache(maxsize=1024)
def _slit_row(items):
    """((node, distance), ...) by node from a SLIT row's (str key, int distance) items, or ValueError.

    Hosts of one kind share their rows: each distinct row is checked once."""
    pairs = {}
    for key, value in items:
        if not (key.isdecimal() and key.isascii()) or value < 0:
            raise ValueError(key)
        pairs[int(key)] = value
    if len(pairs) != len(items):
        raise ValueError(items)
    return tuple(sorted(pairs.items()))


def _read_distances(host, path, raw):
    """A SLIT row: node id (int, or its decimal string after JSON) -> distance."""
    # exact types first: lru_cache compares keys with ==, and 10 == 10.0 == True
    if raw.__class__ is dict and set(map(type, raw)) <= _STR and set(map(type, raw.values())) <= _INT:
        try:
            return _slit_row(tuple(raw.items()))
        except ValueError:
            pass  # the checks below say what is wrong
    _mapping(host, path, raw)
    pairs = {}
    for key, value in raw.items():
        if _is_int(key) and key >= 0:
            to = int(key)
        elif isinstance(key, str) and key.isdecimal() and key.isascii():
            to = int(key)
        else:
            _fail(host, path, "keys must be NUMA node ids", key)
        if to in pairs:
            _fail(host, path, "must name each node once", raw)
        pairs[to] = _int(host, "%s[%s]" % (path, show(key)), value)
    return tuple(sorted(pairs.items()))


def _read_nodes(facts, host):
    """NUMA nodes by id."""
    nodes = {}
    for i, entry in enumerate(_list(host, "numa_nodes", facts.get("numa_nodes"))):
        if not _is_mapping(entry):
            _fail(host, "numa_nodes[%d]" % i, "must be a mapping", entry)
        node_id, cpus, socket, distances, usable = map(entry.get, _NODE_FIELDS)
        if not (node_id.__class__ is int and node_id >= 0 and (socket is None or (socket.__class__ is int and socket >= 0))):
            node_id = _int(host, "numa_nodes[%d].id" % i, node_id)
            socket = _opt_int(host, "numa_nodes[%d].socket" % i, socket)
        if node_id in nodes:
            raise PlacementError("host %s: %s.numa_nodes[%d].id: NUMA node %d appears twice" % (host, ROOT, i, node_id))
        if cpus is not None:
            cpus = _cpulist_field(host, "numa_nodes[%d].cpus" % i, cpus) if cpus.__class__ is not str else cpus
            try:
                cpulist_cpus(cpus)
            except ValueError:
                _cpulist_field(host, "numa_nodes[%d].cpus" % i, cpus)
        if distances:
            distances = _read_distances(host, "numa_nodes[%d].distances" % i, distances)
        elif distances is not None and not _is_mapping(distances):
            _fail(host, "numa_nodes[%d].distances" % i, "must be a mapping", distances)
        if usable is None:
            usable = cpus or ""
        else:
            path = "numa_nodes[%d].usable_cpus" % i
            usable = _cpulist_field(host, path, usable)
            if not set(cpulist_cpus(usable)) <= set(cpulist_cpus(cpus or "")):
                _fail(host, path, "must be a subset of the node's cpus %s" % show(cpus or ""), usable)
        nodes[node_id] = Node(node_id, cpus or "", socket, distances or (), usable, cpus == "")
    return tuple(nodes[n] for n in sorted(nodes))


_NODE_FIELDS = ("id", "cpus", "socket", "distances", "usable_cpus")


def _read_sockets(facts, host):
    out = []
    for i, entry in enumerate(_list(host, "sockets", facts.get("sockets"))):
        if not _is_mapping(entry):
            _fail(host, "sockets[%d]" % i, "must be a mapping", entry)
        sid, members = entry.get("id"), entry.get("numa_nodes")
        if ((sid is None or (sid.__class__ is int and sid >= 0)) and members.__class__ is list
                and set(map(type, members)) <= _INT and (not members or min(members) >= 0)):
            out.append(Socket(sid, tuple(members)))
            continue
        path = "sockets[%d]" % i
        sid = _opt_int(host, path + ".id", sid)
        members = tuple(
            _int(host, "%s.numa_nodes[%d]" % (path, k), n)
            for k, n in enumerate(_list(host, path + ".numa_nodes", members))
        )
        out.append(Socket(sid, members))
    return tuple(out)


def _read_smt(facts, host):
    """SMT sibling lists: lists of CPU ids."""
    smt = _list(host, "smt_siblings", facts.get("smt_siblings"))
    if set(map(type, smt)) <= _CPU_LISTS and set(map(type, itertools.chain.from_iterable(smt))) <= _INT:
        return tuple(map(tuple, smt))
    out = []
    for i, core in enumerate(smt):
        path = "smt_siblings[%d]" % i
        if not isinstance(core, (list, tuple)):
            _fail(host, path, "must be a list of CPU ids", core)
        for k, cpu in enumerate(core):
            if not _is_int(cpu):
                _fail(host, "%s[%d]" % (path, k), "must be an integer (a CPU id)", cpu)
        out.append(tuple(map(int, core)))
    return tuple(out)


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
    if not _is_int(version) or version != SCHEMA_VERSION:
        raise PlacementError(
            "host %s: topology facts schema_version is %s, this collection reads %d"
            % (host, show(version), SCHEMA_VERSION)
        )
    name = facts.get("hostname")
    if name is not None and not isinstance(name, str):
        _fail(host, "hostname", "must be a string or null", name)
    warnings = []
    rows = _read_gpus(facts, host, warnings)
    gpus, gpu_nodes, gpu_local_cpus = zip(*rows) if rows else ((), (), ())
    topology = Topology(
        gpu_nodes=gpu_nodes,
        gpu_local_cpus=gpu_local_cpus,
        links=_read_links(facts, host, [g.id for g in gpus]),
        nodes=_read_nodes(facts, host),
        sockets=_read_sockets(facts, host),
        smt_siblings=_read_smt(facts, host),
    )
    return HostFacts(host, gpus, topology, tuple(warnings))


def host_facts(host, value):
    """Topology facts from a hostvars-like entry or the facts themselves."""
    if isinstance(value, Mapping):
        if "schema_version" in value and "gpus" in value:
            return value
        ansible_facts = value.get("ansible_facts")
        facts = ansible_facts.get("numa_topology") if isinstance(ansible_facts, Mapping) else None
        if facts is None:
            facts = value.get("numa_topology")
        if facts is not None:
            return facts
    raise PlacementError(
        "host %s: no topology facts (expected ansible_facts.numa_topology, numa_topology or the facts themselves); "
        "run gpufleet.numa.numa_facts on it or leave it out with the hosts option" % host
    )
