# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The `bandwidth` record (docs/bandwidth.md), checked as a whole.

It arrives from two untrusted places: a host's numa_bandwidth result and
the kept plan's hosts.HOST.bandwidth. One check for both: every field's
type, range and pattern, every list bounded, unknown fields refused, and,
where the host's hardware record is known, only its NUMA nodes. Errors
are ValueError("FIELD: RULE (got VALUE)"). Pure functions, standard
library only.
"""

from __future__ import annotations

import math

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common.record_values import (
    GPU_ID,
    GPU_ID_RULE,
    MAX_GPUS_PER_HOST,
    MAX_NUMA_NODE,
    a_list,
    integer,
    known_fields,
    short_text,
)

FIELDS = ("version", "measured_at", "python", "size_mib", "seconds", "memory", "gpus")
MEMORY_FIELDS = ("method", "pairs", "notes")
GPU_FIELDS = ("method", "copies", "notes")
PAIR_FIELDS = ("cpu_node", "memory_node", "gbps", "threads")
COPY_FIELDS = ("node", "gpu", "index", "gpu_node", "name", "h2d_gbps", "d2h_gbps")
MEMORY_METHODS = ("torch-triad", "stdlib-copy")
GPU_METHODS = ("torch-cuda-pinned",)
MAX_PAIRS = 4096           # 64 NUMA nodes, every pair
MAX_COPIES = 65536
MAX_NOTES = 256
MAX_GBPS = 100000.0        # far above any memory or link there is
MAX_THREADS = 65536
_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"


def gbps(where, value):
    """A figure in GB/s: a finite JSON number above 0, at most MAX_GBPS."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        checks.fail(where, "must be a number of GB/s", value)
    if not 0 < value <= MAX_GBPS:
        checks.fail(where, "must be above 0 and at most %d GB/s" % MAX_GBPS, value)
    return float(value)


def _node(where, value, nodes):
    node = integer(where, value, 0, MAX_NUMA_NODE)
    if nodes is not None and node not in nodes:
        checks.fail(where, "must be a NUMA node this host has (%s)" % ", ".join(str(n) for n in sorted(nodes)), node)
    return node


def _notes(where, value):
    for i, note in enumerate(a_list(where, value, MAX_NOTES)):
        short_text("%s[%d]" % (where, i), note)


def _method(where, value, methods):
    return None if value is None else checks.choice(where, value, methods)


def _memory(where, value, nodes):
    value = known_fields(where, value, MEMORY_FIELDS, MEMORY_FIELDS)
    _method(where + ".method", value["method"], MEMORY_METHODS)
    seen = set()
    for i, pair in enumerate(a_list(where + ".pairs", value["pairs"], MAX_PAIRS)):
        at = "%s.pairs[%d]" % (where, i)
        pair = known_fields(at, pair, PAIR_FIELDS, ("cpu_node", "memory_node", "gbps"))
        key = (_node(at + ".cpu_node", pair["cpu_node"], nodes), _node(at + ".memory_node", pair["memory_node"], nodes))
        if key in seen:
            checks.fail(at, "must not repeat a pair of CPU node and memory node", list(key))
        seen.add(key)
        gbps(at + ".gbps", pair["gbps"])
        if pair.get("threads") is not None:
            integer(at + ".threads", pair["threads"], 1, MAX_THREADS)
    if value["pairs"] and value["method"] is None:
        checks.fail(where + ".method", "must name the method of the figures in pairs", None)
    _notes(where + ".notes", value["notes"])
    return value


def _gpus(where, value, nodes):
    value = known_fields(where, value, GPU_FIELDS, GPU_FIELDS)
    _method(where + ".method", value["method"], GPU_METHODS)
    seen = set()
    for i, copy in enumerate(a_list(where + ".copies", value["copies"], MAX_COPIES)):
        at = "%s.copies[%d]" % (where, i)
        copy = known_fields(at, copy, COPY_FIELDS, ("node", "gpu", "h2d_gbps", "d2h_gbps"))
        node = _node(at + ".node", copy["node"], nodes)
        gpu = checks.text(at + ".gpu", copy["gpu"], GPU_ID, GPU_ID_RULE)
        if (node, gpu) in seen:
            checks.fail(at, "must not repeat a pair of NUMA node and GPU", [node, gpu])
        seen.add((node, gpu))
        if copy.get("index") is not None:
            integer(at + ".index", copy["index"], 0, MAX_GPUS_PER_HOST - 1)
        if copy.get("gpu_node") is not None:
            integer(at + ".gpu_node", copy["gpu_node"], 0, MAX_NUMA_NODE)
        short_text(at + ".name", copy.get("name"), allow_none=True)
        for field in ("h2d_gbps", "d2h_gbps"):
            gbps("%s.%s" % (at, field), copy[field])
    if value["copies"] and value["method"] is None:
        checks.fail(where + ".method", "must name the method of the figures in copies", None)
    _notes(where + ".notes", value["notes"])
    return value


def check_bandwidth(where, value, nodes=None):
    """The whole record; `nodes`: the host's NUMA nodes where known (its
    hardware record), which every node of the figures must be. Returns it."""
    value = known_fields(where, value, FIELDS, FIELDS)
    integer(where + ".version", value["version"], 1, 1)
    checks.text(where + ".measured_at", value["measured_at"], _TIME, "must be a UTC time YYYY-MM-DDTHH:MM:SSZ")
    short_text(where + ".python", value["python"])
    integer(where + ".size_mib", value["size_mib"], 1, 16384)
    seconds = value["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 60:
        checks.fail(where + ".seconds", "must be a number of seconds above 0, at most 60", seconds)
    _memory(where + ".memory", value["memory"], nodes)
    _gpus(where + ".gpus", value["gpus"], nodes)
    return value
