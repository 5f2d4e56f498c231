# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What a host serves on: its device class (docs/deploy.md, gpufleet_device_class).

`auto` reads the class from the vendor of the host's GPUs (all NVIDIA:
nvidia, all AMD: amd); `nvidia` and `amd` require GPUs of that vendor;
`cpu` plans CPU instances from the NUMA nodes (placement/cpu_host.py). A
host without GPUs is planned on CPU only when its class says cpu: a GPU
host whose GPUs vanished from the facts must never silently become one.

Also the two facts only a device class reads: each GPU's vendor and each
NUMA node's memory_mb (placement/facts.py keeps them beside the Topology).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts_checks import fail, is_int, is_mapping
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError

VARIABLE = "gpufleet_device_class"
GPU_CLASSES = ("nvidia", "amd")


def read_vendors(facts, host, gpus):
    """Per GPU (in the order of `gpus`, Gpu tuples): its vendor string, None when the facts hold none."""
    by_id = {}
    for i, entry in enumerate(facts.get("gpus") or ()):
        vendor = entry.get("vendor") if is_mapping(entry) else None
        if vendor is not None and not isinstance(vendor, str):
            fail(host, "gpus[%d].vendor" % i, "must be a string (nvidia, amd, intel, other) or null", vendor)
        by_id[entry.get("id") if is_mapping(entry) else None] = None if vendor is None else str(vendor)
    return tuple(by_id.get(gpu.id) for gpu in gpus)


def read_node_memory(facts, host):
    """((node, memory_mb or None), ...) by node, from numa_nodes[].memory_mb."""
    out = []
    for i, entry in enumerate(facts.get("numa_nodes") or ()):
        if not is_mapping(entry):
            continue  # facts.py's own reader names it
        memory = entry.get("memory_mb")
        if memory is not None and not (is_int(memory) and memory >= 0):
            fail(host, "numa_nodes[%d].memory_mb" % i, "must be an integer >= 0 or null", memory)
        out.append((entry.get("id"), None if memory is None else int(memory)))
    return tuple(sorted(out, key=lambda pair: (not is_int(pair[0]), pair[0] if is_int(pair[0]) else 0)))


def _error(host, text):
    error = PlacementError("host %s: %s" % (host, text))
    error.host = host
    return error


def device_class(view, requested, excluded):
    """(class, warnings) of a host (HostFacts) under its gpufleet_device_class;
    EXCLUDED (per GPU, view.gpus order) marks the GPUs exclude_gpus names,
    whose vendors do not count (an excluded display GPU of another vendor
    leaves the class to the others).

    Raises PlacementError naming the host and gpufleet_device_class when the
    class and the GPUs disagree, or when it cannot be told.
    """
    host = view.host
    vendors = sorted(set(v or "unknown" for v, out in zip(view.vendors, excluded) if not out))
    if requested == "cpu":
        if view.gpus:
            return "cpu", ["%s is cpu: its %d GPU(s) are not used" % (VARIABLE, len(view.gpus))]
        return "cpu", []
    if not view.gpus:
        raise _error(host, "the topology facts list no GPUs; a host without GPUs serves on CPU only when "
                           "%s: cpu says so (set it for this host, or gather its facts again if it has GPUs)"
                     % VARIABLE)
    if requested == "auto":
        if len(vendors) == 1 and vendors[0] in GPU_CLASSES:
            return vendors[0], []
        raise _error(host, "%s auto cannot tell the device class from its GPUs' vendors (%s): set it to the "
                           "class to serve on (%s, or cpu), and leave the other GPUs out with exclude_gpus"
                     % (VARIABLE, ", ".join(vendors), ", ".join(GPU_CLASSES)))
    if vendors != [requested]:
        raise _error(host, "%s is %s, but its GPUs' vendor is %s: set it to the class of its GPUs (or auto), "
                           "or leave the other GPUs out with exclude_gpus"
                     % (VARIABLE, requested, ", ".join(vendors) or "none (exclude_gpus leaves out every GPU)"))
    return requested, []
