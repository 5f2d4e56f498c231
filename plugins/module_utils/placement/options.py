# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 0: the options of socket_local_groups and fleet_plan, checked.

validate_options returns a full option dict (defaults filled in) or raises
PlacementError naming the option, the rule and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Optional

from ansible_collections.gpufleet.numa.plugins.module_utils.common import pci as _pci
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show


class PlacementError(ValueError):
    """Bad input or an impossible plan; the message names host and problem.

    host: the host that cannot be planned, when the error is one host's
    (set by the planner), so a caller can report it and plan the others.
    """

    host = None


HOST_OPTIONS = {
    "tp_size": None,
    "pp_size": 1,
    "allow_span": False,
    "reserved_cpus_per_socket": 0,
    "exclude_gpus": (),
    "max_instances_per_host": None,
    "worker_binding": "auto",
    "device_class": "auto",
}
# How an instance's processes are bound (docs/plan.md, binding.mode):
# process: one binding for the whole process tree; per_worker: vLLM binds
# each GPU worker to its GPU's node (--numa-bind); auto: per_worker for
# pipeline-parallel instances, process for the others.
WORKER_BINDINGS = ("auto", "process", "per_worker")
# What a host serves on (docs/deploy.md, gpufleet_device_class): auto reads
# it from its GPUs' vendor; cpu plans CPU instances from its NUMA nodes.
DEVICE_CLASSES = ("auto", "nvidia", "amd", "cpu")
FLEET_OPTIONS = dict(
    HOST_OPTIONS,
    base_port=8000,
    port_stride=1,
    dist_port_base=29000,
    dist_port_stride=100,
    hosts=None,
    name_prefix="vllm-",
    # Hosts per instance: pipeline stages across hosts, tensor parallel inside
    # each (vLLM's --nnodes); master_port is the head's torch.distributed port.
    nodes_per_instance=1,
    master_port=29501,
)


class PlanOptions(NamedTuple):
    """The options a host's plan depends on (besides which GPUs are excluded)."""

    tp_size: int
    pp_size: int
    allow_span: bool
    reserved_cpus_per_socket: int
    max_instances_per_host: Optional[int]
    worker_binding: str

    @classmethod
    def of(cls, opts):
        return cls(opts["tp_size"], opts["pp_size"], opts["allow_span"], opts["reserved_cpus_per_socket"],
                   opts["max_instances_per_host"], opts["worker_binding"])


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(options, name, minimum, allow_none=False):
    value = options[name]
    if value is None and allow_none:
        return
    if not _is_int(value) or value < minimum:
        raise PlacementError("%s must be an integer >= %d, got %s" % (name, minimum, show(value)))
    options[name] = int(value)


def validate_options(options, allowed=None):
    """Return a full option dict (defaults filled in) or raise PlacementError.

    Unknown names are rejected; tp_size is required.
    """
    allowed = HOST_OPTIONS if allowed is None else allowed
    unknown = sorted(set(map(str, options)) - set(allowed))
    if unknown:
        raise PlacementError("unknown option(s): %s (known: %s)" % (", ".join(unknown), ", ".join(sorted(allowed))))
    merged = dict(allowed)
    merged.update(options)
    if merged["tp_size"] is None:
        raise PlacementError("tp_size is required")
    _check_int(merged, "tp_size", 1)
    _check_int(merged, "pp_size", 1)
    _check_int(merged, "reserved_cpus_per_socket", 0)
    _check_int(merged, "max_instances_per_host", 1, allow_none=True)
    if not isinstance(merged["allow_span"], bool):
        raise PlacementError("allow_span must be a boolean, got %s" % show(merged["allow_span"]))
    merged["allow_span"] = bool(merged["allow_span"])
    if merged["worker_binding"] not in WORKER_BINDINGS:
        raise PlacementError("worker_binding must be one of %s, got %s"
                             % (", ".join(WORKER_BINDINGS), show(merged["worker_binding"])))
    if merged["device_class"] not in DEVICE_CLASSES:
        raise PlacementError("device_class must be one of %s, got %s"
                             % (", ".join(DEVICE_CLASSES), show(merged["device_class"])))
    excl = merged["exclude_gpus"]
    if excl is None:
        excl = ()
    if isinstance(excl, Mapping):
        if "hosts" not in allowed:
            raise PlacementError("exclude_gpus must be a list of bus ids or UUIDs for one host, got a mapping")
        checked = {}
        for host, items in excl.items():
            if not isinstance(host, str) or not host:
                raise PlacementError("exclude_gpus: keys must be host names, got %s" % show(host))
            checked[str(host)] = _check_exclude_list(items, "exclude_gpus[%s]" % show(host))
        merged["exclude_gpus"] = checked
    else:
        merged["exclude_gpus"] = _check_exclude_list(excl, "exclude_gpus")
    if "base_port" in allowed:
        for name in ("base_port", "dist_port_base", "port_stride", "dist_port_stride", "nodes_per_instance"):
            _check_int(merged, name, 1)
        _check_multinode(merged)
        if not isinstance(merged["name_prefix"], str) or not merged["name_prefix"]:
            raise PlacementError("name_prefix must be a non-empty string, got %s" % show(merged["name_prefix"]))
        merged["name_prefix"] = str(merged["name_prefix"])
        hosts = merged["hosts"]
        if hosts is not None:
            if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) and h for h in hosts):
                raise PlacementError("hosts must be a list of host names, got %s" % show(hosts))
            merged["hosts"] = [str(h) for h in hosts]
    return merged


def _check_multinode(merged):
    port = merged["master_port"]
    if not _is_int(port) or not 1 <= port <= 65535:
        raise PlacementError("master_port must be an integer from 1 to 65535, got %s" % show(port))
    merged["master_port"] = int(port)
    nodes = merged["nodes_per_instance"]
    if nodes == 1:
        return
    if merged["pp_size"] % nodes:
        raise PlacementError(
            "pp_size %d is not a multiple of nodes_per_instance %d: each host of an instance runs "
            "pp_size / nodes_per_instance pipeline stages" % (merged["pp_size"], nodes))
    if merged["max_instances_per_host"] not in (None, 1):
        raise PlacementError(
            "max_instances_per_host %d cannot be used with nodes_per_instance %d: a host holds at most one "
            "multi-node instance, one per host by construction (leave it unset or 1)"
            % (merged["max_instances_per_host"], nodes))


def _check_exclude_list(items, what):
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise PlacementError("%s must be a list of PCI bus ids or UUIDs, got %s" % (what, show(items)))
    out = set()
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise PlacementError("%s holds %s, not a PCI bus id or UUID" % (what, show(item)))
        item = str(item).strip()
        out.add(item)
        try:
            out.add(_pci.normalize_bus_id(item))
        except ValueError:
            pass
    return frozenset(out)
