# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The shape of what a host returns to the audit, checked on the controller.

What a host's numa_audit module returns is data from that host: the action
keeps only the fields the audit defines (topology, process_source,
processes, warnings, capture) after checking each against the table below,
and the report filters check each host result the same way, so one host's
crafted result fails that host with a message naming the field
("host gpu-a: numa_audit result.processes[3].pid: must be an integer >= 0
(got 'x')") and never a TypeError, nor the report of every other host.

A spec is one of: a type name ("str", "int", "bool", "cpulist", "any"),
that name with "?" (null allowed), ("list", item, max items),
("map", value, max entries[, "node"]) with string keys (node ids: digits), or
("dict", {key: spec}, required keys). Dicts keep only their spec's keys.
Pure functions, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit.findings import SEVERITIES
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import validate_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show

MAX_ITEMS = 4096        # GPUs, NUMA nodes, processes, findings of one host
MAX_TEXT = 4096         # one name, message or cpulist
MAX_ARGV_WORD = 131072  # the kernel's MAX_ARG_STRLEN
MAX_INT = 2 ** 63 - 1

_GPU = ("dict", {
    "id": "str", "index": "int?", "pci_bus_id": "str?", "uuid": "str?", "name": "str?", "vendor": "str?",
    "numa_node": "int?", "local_cpus": "cpulist?", "memory_mb": "int?", "memory_numa_node": "int?",
    # read by no audit code, only passed on (the planner checks what it reads)
    "mig_mode": "any", "pcie": "any",
}, ("id",))
_NODE = ("dict", {"id": "int", "cpus": "cpulist?", "usable_cpus": "cpulist?", "memory_mb": "int?", "socket": "int?",
                  "kind": "str?", "distances": ("map", "int?", MAX_ITEMS)}, ("id",))
_SOCKET = ("dict", {"id": "int", "cpus": "cpulist?", "numa_nodes": ("list", "int", MAX_ITEMS)}, ("id",))
_NIC = ("dict", {"id": "str", "numa_node": "int?", "interfaces": ("list", "str", MAX_ITEMS), "local_cpus": "cpulist?",
                 "pci_bus_id": "str?", "vendor": "str?", "pcie": "any", "gpu_links": "any"}, ("id",))
_TOPOLOGY_FIELDS = {
    "schema_version": "int?", "hostname": "str?", "sources": ("list", "str", 16),
    "sockets": ("list", _SOCKET, MAX_ITEMS), "numa_nodes": ("list", _NODE, MAX_ITEMS),
    "gpus": ("list", _GPU, MAX_ITEMS), "nics": ("list", _NIC, MAX_ITEMS),
    "links": ("map", ("map", "str", MAX_ITEMS), MAX_ITEMS), "warnings": ("list", "str", MAX_ITEMS),
    "smt_siblings": "any",
}
TOPOLOGY = ("dict", _TOPOLOGY_FIELDS, ("gpus",))
PROCESS = ("dict", {
    "pid": "int", "name": "str?", "argv": ("list", "argv", MAX_ITEMS), "ppid": "int?", "session": "int?",
    "readable": "bool", "gpus": ("list", "str", MAX_ITEMS), "cpus_allowed": "cpulist?", "mems_allowed": "cpulist?",
    "memory_kb": ("map?", "int", MAX_ITEMS, "node"), "memory_policies": ("map?", "int", MAX_ITEMS), "memory_policy": "str?",
    "environment": ("map?", "str", 16),
}, ("pid", "gpus"))
MODULE_RESULT = ("dict", {
    "topology": TOPOLOGY, "process_source": "source?", "processes": ("list", PROCESS, MAX_ITEMS),
    "warnings": ("list", "str", MAX_ITEMS), "capture": "capture",
}, ("topology",))
_FINDING = ("dict", {
    "host": "str", "severity": "severity", "code": "str", "subject": "str", "message": "str", "fix": "str",
    "pids": ("list", "int", MAX_ITEMS), "gpus": ("list", "str", MAX_ITEMS), "instance": "str?",
}, ("host", "severity", "code", "subject", "message", "fix"))
_GROUP = ("dict", {
    "key": "int", "name": "str", "leader": "int", "pids": ("list", "int", MAX_ITEMS),
    "gpus": ("list", "str", MAX_ITEMS), "gpu_ids": ("list", "str", MAX_ITEMS),
    "unknown_gpus": ("list", "str", MAX_ITEMS), "numa_nodes": ("list", "int", MAX_ITEMS),
    "sockets": ("list", "str", MAX_ITEMS), "instance": "str?", "misplaced": "bool",
    "cpu_nodes": ("list", "int", MAX_ITEMS), "memory_node": "int?",
}, ("key", "name", "leader", "pids"))
_INSTANCE = ("dict", {
    "name": "str", "gpus": ("list", "str", MAX_ITEMS), "numa_nodes": ("list", "int", MAX_ITEMS), "cpus": "str?",
    "state": "str?", "pids": ("list", "int", MAX_ITEMS),
}, ("name",))
HOST_RESULT = ("dict", {
    "host": "str", "topology": ("dict?", _TOPOLOGY_FIELDS, ()), "findings": ("list", _FINDING, MAX_ITEMS),
    "groups": ("list", _GROUP, MAX_ITEMS), "instances": ("list", _INSTANCE, MAX_ITEMS),
    "counts": ("map", "int", 8), "worst": "severity?", "process_source": "source?",
    "warnings": ("list", "str", MAX_ITEMS), "processes": ("list", PROCESS, MAX_ITEMS),
    "today_plan": "any", "summary": ("list", "any", MAX_ITEMS), "capture": "any",
    "plan_file": "str?", "capture_file": "str?", "changed": "bool", "failed": "bool", "msg": "str?",
}, ("host", "findings"))


class ShapeError(ValueError):
    """A value of the wrong shape; the message names its path."""


def _fail(path, rule, value):
    raise ShapeError("%s: %s (got %s)" % (path, rule, show(value)))


def _scalar(path, kind, value):
    if kind == "any":
        return value
    if kind in ("str", "argv", "cpulist"):
        limit = MAX_ARGV_WORD if kind == "argv" else MAX_TEXT
        if not isinstance(value, str):
            _fail(path, "must be a string", value)
        if len(value) > limit:
            _fail(path, "must be at most %d characters" % limit, value)
        if kind == "cpulist" and value:
            try:
                parse_cpulist(value)
            except ValueError:
                _fail(path, "must be a CPU or node list like 0-3,8", value)
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
            _fail(path, "must be an integer >= 0", value)
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            _fail(path, "must be true or false", value)
        return value
    if kind == "severity":
        if value not in SEVERITIES:
            _fail(path, "must be one of %s" % ", ".join(SEVERITIES), value)
        return value
    if kind == "source":
        if value not in ("nvml", "nvidia-smi"):
            _fail(path, "must be nvml, nvidia-smi or null", value)
        return value
    if kind == "capture":
        try:
            return validate_capture(value, path)
        except ValueError as exc:
            raise ShapeError(str(exc))
    raise AssertionError("unknown spec %r" % kind)


def check(path, value, spec):
    """value checked against spec (module docstring); ShapeError names the path."""
    if isinstance(spec, str):
        if spec.endswith("?") or spec == "any":
            return None if value is None else _scalar(path, spec.rstrip("?"), value)
        if value is None:
            _fail(path, "must not be null", value)
        return _scalar(path, spec, value)
    kind = spec[0]
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    if kind == "list":
        if not isinstance(value, list):
            _fail(path, "must be a list", value)
        if len(value) > spec[2]:
            _fail(path, "must hold at most %d items" % spec[2], "%d items" % len(value))
        return [check("%s[%d]" % (path, i), item, spec[1]) for i, item in enumerate(value)]
    if kind == "map":
        if not isinstance(value, dict):
            _fail(path, "must be a mapping", value)
        if len(value) > spec[2]:
            _fail(path, "must hold at most %d entries" % spec[2], "%d entries" % len(value))
        out = {}
        for key, item in value.items():
            if not isinstance(key, (str, int)) or isinstance(key, bool) or len(str(key)) > MAX_TEXT:
                _fail(path, "keys must be strings", key)
            if len(spec) > 3 and not str(key).isdigit():
                _fail(path, "keys must be NUMA node ids (digits)", key)
            out[str(key)] = check("%s[%s]" % (path, show(str(key))), item, spec[1])
        return out
    return _check_dict(path, value, spec)


def _check_dict(path, value, spec):
    if not isinstance(value, dict):
        _fail(path, "must be a mapping", value)
    fields, required = spec[1], spec[2]
    for key in required:
        if key not in value:
            _fail(path, "must have the field %s" % key, sorted(str(k) for k in value)[:8])
    return dict((key, check("%s.%s" % (path, key), value[key], fields[key])) for key in fields if key in value)


def module_result(module, host):
    """(facts, processes, capture or None) from a numa_audit module result,
    only the fields the audit defines; ValueError names the host and the field."""
    try:
        kept = check("result", module, MODULE_RESULT)
    except ShapeError as exc:
        raise ValueError("host %s: numa_audit %s" % (host, exc))
    processes = {"source": kept.get("process_source"), "processes": kept.get("processes") or [],
                 "warnings": kept.get("warnings") or []}
    return kept["topology"], processes, kept.get("capture")


def host_result(result, index):
    """A host result as the report filters read it, or ValueError naming
    the result (by host where it has one) and the field."""
    name = result.get("host") if isinstance(result, dict) and isinstance(result.get("host"), str) else None
    try:
        kept = check("results[%d]" % index, result, HOST_RESULT)
    except ShapeError as exc:
        raise ValueError("%s%s" % ("host %s: " % show(name) if name else "", exc))
    if not kept["host"]:
        raise ValueError("results[%d].host: must not be empty (got '')" % index)
    return kept
