# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The checks behind placement/facts.py: what is wrong with a field, said once.

facts.py reads plain values of exactly the documented types on fast paths
(a fleet is mostly such hosts) and sends anything else here: these readers
name the host, the field path and the rule ("host gpu-a:
numa_topology.gpus[3].numa_node must be an integer >= 0, -1 (unknown) or
null, got 'x'"), or turn the str/int subclasses templating hands in into
plain values.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ansible_collections.gpufleet.numa.plugins.module_utils.common import cpulist as _cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import Note
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError

# The kernel's NUMA_NO_NODE: sysfs numa_node reads -1 when the firmware does
# not say. Unknown, never node -1 (and never node 0).
NO_NODE = -1

ROOT = "numa_topology"

GPU_FIELDS = ("id", "pci_bus_id", "index", "uuid", "name", "numa_node", "local_cpus")


def fail(host, path, rule, value):
    raise PlacementError("host %s: %s.%s %s, got %s" % (host, ROOT, path, rule, show(value)))


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def is_mapping(value):
    return value.__class__ is dict or isinstance(value, Mapping)


def text(host, path, value, allow_none=True):
    if value is None and allow_none:
        return None
    if isinstance(value, str) and (value or allow_none):
        return str(value)
    fail(host, path, "must be a string or null" if allow_none else "must be a non-empty string", value)


def opt_int(host, path, value, minimum=0):
    if value is None:
        return None
    if is_int(value) and value >= minimum:
        return int(value)
    fail(host, path, "must be an integer >= %d or null" % minimum, value)


def integer(host, path, value, minimum=0):
    if is_int(value) and value >= minimum:
        return int(value)
    fail(host, path, "must be an integer >= %d" % minimum, value)


def a_list(host, path, value):
    """A list field; null or missing is the empty list."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return value
    fail(host, path, "must be a list", value)


def mapping(host, path, value):
    if is_mapping(value):
        return value
    fail(host, path, "must be a mapping", value)


@functools.lru_cache(maxsize=1024)
def cpulist_cpus(value):
    """CPU ids of a cpulist, as a tuple (few distinct cpulists in a fleet: parsed once each)."""
    return tuple(_cpulist.parse_cpulist(value))


def cpulist_field(host, path, value):
    """A cpulist string or null."""
    if value is None:
        return None
    if not isinstance(value, str):
        fail(host, path, "must be a cpulist string or null", value)
    value = str(value)
    try:
        cpulist_cpus(value)
    except ValueError as exc:
        fail(host, path, "must be a cpulist (%s)" % exc, value)
    return value


def gpu_node(host, path, value, warnings, gid):
    if value is None:
        return None
    if is_int(value):
        if value == NO_NODE:
            warnings.append(Note("GPU %s reports numa_node -1; NUMA node unknown" % gid, gpus=(gid,)))
            return None
        if value >= 0:
            return int(value)
    fail(host, path, "must be an integer >= 0, -1 (unknown) or null", value)


def checked_gpu_rows(gpus, host, warnings):
    """(id, pci_bus_id, index, uuid, name, numa node, local_cpus) per GPU in facts order, checked one by one."""
    out = []
    for i, gpu in enumerate(gpus):
        path = "gpus[%d]" % i
        if not is_mapping(gpu):
            fail(host, path, "must be a mapping", gpu)
        gid, bus, index, uuid, name, node, local = map(gpu.get, GPU_FIELDS)  # missing is null
        gid = text(host, path + ".id", gid, allow_none=False)
        out.append((gid, text(host, path + ".pci_bus_id", bus), opt_int(host, path + ".index", index),
                    text(host, path + ".uuid", uuid), text(host, path + ".name", name),
                    gpu_node(host, path + ".numa_node", node, warnings, gid),
                    cpulist_field(host, path + ".local_cpus", local)))
    seen = set()
    for i, (gid, *_rest) in enumerate(out):
        if gid in seen:
            raise PlacementError("host %s: %s.gpus[%d].id: GPU id %s appears twice" % (host, ROOT, i, gid))
        seen.add(gid)
    return out


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


_STR = frozenset((str,))
_INT = frozenset((int,))


def distances(host, path, raw):
    """A SLIT row: node id (int, or its decimal string after JSON) -> distance."""
    # exact types first: lru_cache compares keys with ==, and 10 == 10.0 == True
    if raw.__class__ is dict and set(map(type, raw)) <= _STR and set(map(type, raw.values())) <= _INT:
        try:
            return _slit_row(tuple(raw.items()))
        except ValueError:
            pass  # the checks below say what is wrong
    mapping(host, path, raw)
    pairs = {}
    for key, value in raw.items():
        if is_int(key) and key >= 0:
            to = int(key)
        elif isinstance(key, str) and key.isdecimal() and key.isascii():
            to = int(key)
        else:
            fail(host, path, "keys must be NUMA node ids", key)
        if to in pairs:
            fail(host, path, "must name each node once", raw)
        pairs[to] = integer(host, "%s[%s]" % (path, show(key)), value)
    return tuple(sorted(pairs.items()))


def checked_socket(host, path, sid, members):
    """(socket id, its NUMA nodes) of a socket entry that is not plain and valid: what is wrong, or plain values."""
    sid = opt_int(host, path + ".id", sid)
    members = tuple(
        integer(host, "%s.numa_nodes[%d]" % (path, k), n)
        for k, n in enumerate(a_list(host, path + ".numa_nodes", members))
    )
    return sid, members


def checked_smt(host, smt):
    """SMT sibling lists that are not plain lists of ints: what is wrong, or plain tuples."""
    out = []
    for i, core in enumerate(smt):
        path = "smt_siblings[%d]" % i
        if not isinstance(core, (list, tuple)):
            fail(host, path, "must be a list of CPU ids", core)
        for k, cpu in enumerate(core):
            if not is_int(cpu):
                fail(host, "%s[%d]" % (path, k), "must be an integer (a CPU id)", cpu)
        out.append(tuple(map(int, core)))
    return tuple(out)
