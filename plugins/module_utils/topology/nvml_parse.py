# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""NVML as a topology source, the interpreting half: `parse(raw)` turns a
record of nvml.collect() (its format is in nvml.py) into the partial dict
every topology source returns (docs/facts.md, partial.py).

It never raises: `error` is None unless the parser itself failed. It reads
at most MAX_DEVICES devices, quotes recorded values in warnings cut
(topology_reader.excerpt) and keeps at most partial.MAX_WARNINGS warnings.
Standard library only (runs on targets).
"""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import cpus_from_words, format_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import PCIE_LINK_CLASSES, normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvml import (
    MAX_DEVICES,
    REMOTE_GPU,
    REMOTE_SWITCH,
    WORD_BITS,
    int_or_none,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.partial import (
    bounded_warnings,
    empty_partial,
    new_gpu,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt

# nvmlDeviceGetTopologyCommonAncestor levels -> nvidia-smi link class.
# 0 is "internal" (two GPUs on one board, e.g. K80): nothing is closer
# on PCIe, so it ranks with PIX.
TOPOLOGY_LEVELS = dict(zip((0, 10, 20, 30, 40, 50), PCIE_LINK_CLASSES[:1] + PCIE_LINK_CLASSES))

# PCIe generation -> the transfer rate as sysfs writes it.
PCIE_SPEEDS = {
    1: "2.5 GT/s PCIe",
    2: "5.0 GT/s PCIe",
    3: "8.0 GT/s PCIe",
    4: "16.0 GT/s PCIe",
    5: "32.0 GT/s PCIe",
    6: "64.0 GT/s PCIe",
}

# One recorded device read: its partial GPU entry, the label warnings name
# it by, the CPUs of its affinity (None or a list).
DeviceRead = namedtuple("DeviceRead", "gpu label cpus")
# A GPU's active NVLinks: how many go to an NVSwitch, and per peer bus id
# how many go straight to that GPU.
NvLinkCounts = namedtuple("NvLinkCounts", "switch direct")
# What the link step needs of the devices read: device index -> GPU key,
# GPU key -> NvLinkCounts, NUMA node -> set of CPUs.
Devices = namedtuple("Devices", "key_of_index nvlinks node_cpus")


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _bus(value):
    try:
        return normalize_bus_id(value) if value is not None else None
    except ValueError:
        return None


def _plain_int(value, limit=1 << 20):
    """value when it is an int (not a bool) in [0, limit), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit else None


def _affinity(value, what, label, warnings):
    """{words, bits} -> sorted ids, or None."""
    value = _mapping(value)
    words = value.get("words")
    bits = int_or_none(value.get("bits", WORD_BITS)) or WORD_BITS
    if words is None:
        return None
    if not isinstance(words, list) or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 0 for w in words):
        warnings.append("NVML: %s: unreadable %s %s" % (label, what, excerpt(words)))
        return None
    try:
        return cpus_from_words(words, bits)
    except ValueError as exc:
        warnings.append("NVML: %s: unreadable %s (%s)" % (label, what, exc))
        return None


def _pcie(value):
    value = _mapping(value)
    if not value:
        return None
    current = int_or_none(value.get("current_generation"))
    maximum = int_or_none(value.get("max_generation"))
    return {
        "current_speed": PCIE_SPEEDS.get(current),
        "max_speed": PCIE_SPEEDS.get(maximum),
        "current_width": int_or_none(value.get("current_width")),
        "max_width": int_or_none(value.get("max_width")),
    }


def parse(raw):
    """Turn a collect() record into the partial topology dict. Never raises."""
    try:
        partial = _parse(raw)
    except Exception as exc:  # pylint: disable=broad-except
        error = "%s: %s" % (type(exc).__name__, excerpt(str(exc), quote=False))
        return empty_partial(["NVML: record could not be read (%s)" % error], error=error)
    partial["warnings"] = bounded_warnings(partial["warnings"], "NVML")
    return partial


def _record_warnings(raw, warnings):
    """Warnings for the record-wide calls that failed: NVML itself, the device count, a device handle."""
    top_errors = _mapping(raw.get("errors"))
    for key in ("collect", "init", "device_count"):
        if key in top_errors:
            warnings.append("NVML: %s failed: %s" % (key, excerpt(top_errors[key], quote=False)))
    for key, message in sorted(top_errors.items(), key=lambda item: str(item[0])):
        if str(key).startswith("handle["):
            warnings.append("NVML: GPU %s could not be opened: %s" % (excerpt(str(key)[7:-1], 20, quote=False), excerpt(message, quote=False)))


def _device_list(raw, warnings):
    devices = raw.get("devices")
    if devices is None:
        devices = []
    if not isinstance(devices, list):
        warnings.append("NVML: devices is not a list")
        devices = []
    if len(devices) > MAX_DEVICES:
        warnings.append("NVML: %d devices recorded; only the first %d are read" % (len(devices), MAX_DEVICES))
        devices = devices[:MAX_DEVICES]
    return devices


def _device_gpu(device, position, warnings):
    """DeviceRead of one recorded device."""
    errors = _mapping(device.get("errors"))
    index = _plain_int(device.get("index"))
    label = "GPU %s" % (index if index is not None else "#%d" % position)
    gpu = new_gpu(index)
    gpu["pci_bus_id"] = _bus(device.get("bus_id"))
    gpu["uuid"] = device.get("uuid") if isinstance(device.get("uuid"), str) else None
    gpu["name"] = device.get("name") if isinstance(device.get("name"), str) else None
    gpu["pcie"] = _pcie(device.get("pcie"))
    if gpu["pci_bus_id"] is None:
        warnings.append(
            "NVML: %s: PCI bus id unknown (%s)" % (label, excerpt(errors.get("bus_id", device.get("bus_id"))))
        )
    memory = int_or_none(device.get("memory_total"))
    if memory is not None and not isinstance(device.get("memory_total"), bool):
        gpu["memory_mb"] = memory // (1024 * 1024)
    mig = _mapping(device.get("mig_mode"))
    if mig.get("current") in (0, 1) and not isinstance(mig.get("current"), bool):
        gpu["mig_mode"] = "enabled" if mig["current"] == 1 else "disabled"
    cpus = _affinity(device.get("cpu_affinity"), "CPU affinity", label, warnings)
    if cpus:
        gpu["local_cpus"] = format_cpulist(cpus)
    else:
        warnings.append("NVML: %s: CPU affinity unknown" % label)
    gpu["memory_numa_node"] = _plain_int(device.get("gpu_numa_node"))
    nodes = _affinity(device.get("memory_affinity"), "memory affinity", label, warnings)
    if nodes and len(nodes) == 1:
        gpu["numa_node"] = nodes[0]
    return DeviceRead(gpu, label, cpus)


def _nvlink_counts(device):
    """NvLinkCounts of a device's active NVLinks."""
    switch, direct = 0, {}
    nvlinks = device.get("nvlinks")
    for entry in nvlinks if isinstance(nvlinks, list) else []:
        entry = _mapping(entry)
        if entry.get("active") is not True:
            continue
        kind = entry.get("remote_device_type")
        if kind == REMOTE_SWITCH:
            switch += 1
        elif kind in (REMOTE_GPU, None):
            remote = _bus(entry.get("remote_bus_id"))
            if remote is not None:
                direct[remote] = direct.get(remote, 0) + 1
        # REMOTE_IBMNPU: a GPU-CPU link (POWER), not between GPUs.
    return NvLinkCounts(switch, direct)


def _read_devices(devices, partial, warnings):
    """Each usable device's GPU into partial["gpus"]; Devices for the links."""
    key_of_index, nvlinks, node_cpus = {}, {}, {}
    for position, device in enumerate(devices):
        if not isinstance(device, dict):
            warnings.append("NVML: device entry %d is not a mapping" % position)
            continue
        read = _device_gpu(device, position, warnings)
        gpu = read.gpu
        if gpu["numa_node"] is not None and read.cpus:
            node_cpus.setdefault(gpu["numa_node"], set()).update(read.cpus)
        key = gpu["pci_bus_id"] or ("GPU%d" % gpu["index"] if gpu["index"] is not None else None)
        if key is None or key in nvlinks:
            warnings.append("NVML: %s: no usable id (bus id and index unknown or repeated); skipped" % read.label)
            continue
        partial["gpus"].append(gpu)
        if gpu["index"] is not None:
            key_of_index[gpu["index"]] = key
        nvlinks[key] = _nvlink_counts(device)
    return Devices(key_of_index, nvlinks, node_cpus)


def _topology_levels(raw, key_of_index):
    """{frozenset of two GPU keys: NVML topology level} from the record's topology."""
    levels = {}
    topology = raw.get("topology")
    for entry in topology if isinstance(topology, list) else []:
        entry = _mapping(entry)
        a, b, level = entry.get("a"), entry.get("b"), entry.get("level")
        if isinstance(a, int) and isinstance(b, int) and a in key_of_index and b in key_of_index:
            levels[frozenset((key_of_index[a], key_of_index[b]))] = level
    return levels


def _pair_class(gpu_a, gpu_b, key_a, key_b, nvlinks, levels, warnings):
    """The link class between two GPUs: NV<n> over NVLink, else the PCIe
    class of their topology level; None (with a warning) when neither says."""
    links_a, links_b = nvlinks[key_a], nvlinks[key_b]
    count = max(
        links_a.direct.get(gpu_b["pci_bus_id"], 0) if gpu_b["pci_bus_id"] else 0,
        links_b.direct.get(gpu_a["pci_bus_id"], 0) if gpu_a["pci_bus_id"] else 0,
    )
    if links_a.switch and links_b.switch:
        # NVSwitch fabric: every pair gets the narrower GPU's
        # switch-link count (nvidia-smi's NV18 on HGX H100).
        count += min(links_a.switch, links_b.switch)
    if count:
        return "NV%d" % count
    level = levels.get(frozenset((key_a, key_b)))
    value = TOPOLOGY_LEVELS.get(level) if isinstance(level, int) else None
    if value is None:
        warnings.append("NVML: no link class for %s - %s (topology level %s)" % (key_a, key_b, excerpt(level)))
    return value


def _links(gpus, nvlinks, levels, warnings):
    links = {}
    for i, gpu_a in enumerate(gpus):
        key_a = gpu_a["pci_bus_id"] or "GPU%s" % gpu_a["index"]
        for gpu_b in gpus[i + 1:]:
            key_b = gpu_b["pci_bus_id"] or "GPU%s" % gpu_b["index"]
            value = _pair_class(gpu_a, gpu_b, key_a, key_b, nvlinks, levels, warnings)
            if value is None:
                continue
            links.setdefault(key_a, {})[key_b] = value
            links.setdefault(key_b, {})[key_a] = value
    return links


def _parse(raw):
    if not isinstance(raw, dict):
        return empty_partial(["NVML: record is not a mapping (got %s)" % type(raw).__name__])
    partial = empty_partial()
    warnings = partial["warnings"]
    _record_warnings(raw, warnings)
    devices = _read_devices(_device_list(raw, warnings), partial, warnings)
    levels = _topology_levels(raw, devices.key_of_index)
    partial["links"] = _links(list(partial["gpus"]), devices.nvlinks, levels, warnings)
    partial["numa_nodes"] = [
        {"id": node, "cpus": format_cpulist(cpus)} for node, cpus in sorted(devices.node_cpus.items())
    ]
    return partial
