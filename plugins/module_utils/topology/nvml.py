# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""NVML as a topology source: `collect()` reads, `parse()` interprets.

`collect(pynvml)` takes the imported `pynvml` module (PyPI package
`nvidia-ml-py`) and returns a plain, YAML/JSON-serialisable record of what
NVML said: the raw material a capture stores under its `nvml:` key. It
never raises: every call that fails (an NVMLError such as "Not Supported",
a function missing from old bindings, anything else) is recorded under the
record's or the device's `errors` and its value is None.

`parse(raw)` turns such a record into the partial dict every topology
source returns (docs/facts.md). It never raises either: `error` is None
unless the parser itself failed. It reads at most MAX_DEVICES devices and
quotes recorded values in warnings cut (topology_reader.excerpt).

Record format (`collector_version: 1`)::

    driver_version, nvml_version: str or None
    cpu_count: logical CPUs the affinity words were sized for
    device_count: int or None
    errors: {call: message}
    devices:
      - index, bus_id ("00000000:1A:00.0" as NVML writes it), uuid, name
        memory_total: bytes
        mig_mode: {current: 0|1, pending: 0|1}
        pcie: {current_generation, max_generation, current_width, max_width}
        cpu_affinity: {scope: node|legacy, bits: 64, words: [int, ...]}
        memory_affinity: {scope: node, bits: 64, words: [int, ...]}
        gpu_numa_node: int, only when NVML answers (Grace: the GPU's own
          memory node, nvmlDeviceGetNumaNodeId; "Not Supported" on x86 is
          the normal answer and is not recorded)
        nvlinks: [{link, active, remote_bus_id, remote_device_type}]
        errors: {field: message}
    topology: [{a: index, b: index, level: 0|10|20|30|40|50}]
"""

from __future__ import absolute_import, division, print_function

import os

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import (
    cpus_from_words,
    format_cpulist,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import MAX_GPUS, PCIE_LINK_CLASSES, normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt

__metaclass__ = type

COLLECTOR_VERSION = 1
WORD_BITS = 64
NODE_WORDS = 1  # 64 NUMA nodes are plenty for the hosts this serves
MAX_DEVICES = MAX_GPUS  # anything above is a broken binding, not a machine

# nvmlDeviceGetNvLinkRemoteDeviceType
REMOTE_GPU = 0
REMOTE_IBMNPU = 1
REMOTE_SWITCH = 2

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


def import_pynvml():
    """The pynvml module (from nvidia-ml-py) when it imports, else None: it
    is optional, and a broken binding must not fail the module."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except Exception:  # pylint: disable=broad-except
        return None
    return pynvml


def _error_text(exc):
    text = str(exc).strip()
    return text or type(exc).__name__


def _text(value):
    """NVML strings are bytes in old bindings and str in new ones."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    value = str(value).strip().strip("\x00")
    return value or None


def _call(errors, key, module, name, *args):
    """Call module.name(*args); on any failure record it under errors[key].

    Returns (value, ok).
    """
    func = getattr(module, name, None)
    if func is None:
        errors[key] = "%s is not available in these NVML bindings" % name
        return None, False
    try:
        return func(*args), True
    except Exception as exc:  # pylint: disable=broad-except
        # NVMLError and its subclasses, ctypes errors, whatever old
        # bindings raise: all of them only mean "unknown".
        errors[key] = _error_text(exc)
        return None, False


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _words(array):
    try:
        return [int(w) for w in array]
    except (TypeError, ValueError):
        return None


def _collect_device(pynvml, index, handle, cpu_words):
    errors = {}
    device = {
        "index": index,
        "bus_id": None,
        "uuid": None,
        "name": None,
        "memory_total": None,
        "mig_mode": None,
        "pcie": None,
        "cpu_affinity": None,
        "memory_affinity": None,
        "nvlinks": [],
        "errors": errors,
    }
    pci, ok = _call(errors, "bus_id", pynvml, "nvmlDeviceGetPciInfo", handle)
    if ok:
        device["bus_id"] = _text(getattr(pci, "busId", None))
    value, ok = _call(errors, "uuid", pynvml, "nvmlDeviceGetUUID", handle)
    device["uuid"] = _text(value) if ok else None
    value, ok = _call(errors, "name", pynvml, "nvmlDeviceGetName", handle)
    device["name"] = _text(value) if ok else None
    memory, ok = _call(errors, "memory_total", pynvml, "nvmlDeviceGetMemoryInfo", handle)
    if ok:
        device["memory_total"] = _int_or_none(getattr(memory, "total", None))
    mig, ok = _call(errors, "mig_mode", pynvml, "nvmlDeviceGetMigMode", handle)
    if ok:
        try:
            device["mig_mode"] = {"current": int(mig[0]), "pending": int(mig[1])}
        except (TypeError, ValueError, LookupError):  # any shape but a pair
            errors["mig_mode"] = "unexpected value %r" % (mig,)

    pcie = {}
    for key, name in (
        ("current_generation", "nvmlDeviceGetCurrPcieLinkGeneration"),
        ("max_generation", "nvmlDeviceGetMaxPcieLinkGeneration"),
        ("current_width", "nvmlDeviceGetCurrPcieLinkWidth"),
        ("max_width", "nvmlDeviceGetMaxPcieLinkWidth"),
    ):
        value, ok = _call(errors, "pcie." + key, pynvml, name, handle)
        pcie[key] = _int_or_none(value) if ok else None
    device["pcie"] = pcie

    scope_node = getattr(pynvml, "NVML_AFFINITY_SCOPE_NODE", 0)
    words, ok = _call(
        errors, "cpu_affinity", pynvml, "nvmlDeviceGetCpuAffinityWithinScope", handle, cpu_words, scope_node
    )
    if ok:
        device["cpu_affinity"] = {"scope": "node", "bits": WORD_BITS, "words": _words(words)}
    else:
        # Older drivers/bindings: the unscoped call (the device's ideal CPUs).
        words, ok = _call(errors, "cpu_affinity_legacy", pynvml, "nvmlDeviceGetCpuAffinity", handle, cpu_words)
        if ok:
            device["cpu_affinity"] = {"scope": "legacy", "bits": WORD_BITS, "words": _words(words)}
    words, ok = _call(
        errors, "memory_affinity", pynvml, "nvmlDeviceGetMemoryAffinity", handle, NODE_WORDS, scope_node
    )
    if ok:
        device["memory_affinity"] = {"scope": "node", "bits": WORD_BITS, "words": _words(words)}
    value, ok = _call({}, "gpu_numa_node", pynvml, "nvmlDeviceGetNumaNodeId", handle)
    value = _int_or_none(value) if ok and not isinstance(value, bool) else None
    if value is not None and 0 <= value < 1 << 20:
        device["gpu_numa_node"] = value

    max_links = _int_or_none(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)) or 18
    enabled = getattr(pynvml, "NVML_FEATURE_ENABLED", 1)
    for link in range(max_links):
        state, ok = _call(errors, "nvlink_state[%d]" % link, pynvml, "nvmlDeviceGetNvLinkState", handle, link)
        if not ok:
            # Not Supported (no NVLink) or Invalid Argument (past the
            # device's last link): nothing more to read.
            break
        entry = {"link": link, "active": state == enabled, "remote_bus_id": None, "remote_device_type": None}
        if entry["active"]:
            remote, ok = _call(
                errors, "nvlink_remote_pci[%d]" % link, pynvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link
            )
            if ok:
                entry["remote_bus_id"] = _text(getattr(remote, "busId", None))
            kind, ok = _call(
                errors,
                "nvlink_remote_type[%d]" % link,
                pynvml,
                "nvmlDeviceGetNvLinkRemoteDeviceType",
                handle,
                link,
            )
            if ok:
                entry["remote_device_type"] = _int_or_none(kind)
        device["nvlinks"].append(entry)
    return device


def collect(pynvml, cpu_count=None):
    """Read everything the topology needs from NVML. Never raises."""
    raw = {
        "collector_version": COLLECTOR_VERSION,
        "driver_version": None,
        "nvml_version": None,
        "cpu_count": None,
        "device_count": None,
        "errors": {},
        "devices": [],
        "topology": [],
    }
    errors = raw["errors"]
    try:
        _collect(pynvml, raw, errors, cpu_count)
    except Exception as exc:  # pylint: disable=broad-except
        errors["collect"] = _error_text(exc)
    return raw


def _collect(pynvml, raw, errors, cpu_count):
    cpu_count = _int_or_none(cpu_count)
    raw["cpu_count"] = cpu_count if cpu_count and cpu_count > 0 else (os.cpu_count() or 1)
    cpu_words = (raw["cpu_count"] + WORD_BITS - 1) // WORD_BITS
    dummy, ok = _call(errors, "init", pynvml, "nvmlInit")
    if not ok:
        return
    try:
        value, ok = _call(errors, "driver_version", pynvml, "nvmlSystemGetDriverVersion")
        raw["driver_version"] = _text(value) if ok else None
        value, ok = _call(errors, "nvml_version", pynvml, "nvmlSystemGetNVMLVersion")
        raw["nvml_version"] = _text(value) if ok else None
        count, ok = _call(errors, "device_count", pynvml, "nvmlDeviceGetCount")
        if not ok:
            return
        count = _int_or_none(count)
        if count is None or not 0 <= count <= MAX_DEVICES:
            errors["device_count"] = "implausible device count %r" % (count,)
            return
        raw["device_count"] = count
        handles = []
        for index in range(raw["device_count"] or 0):
            handle, ok = _call(errors, "handle[%d]" % index, pynvml, "nvmlDeviceGetHandleByIndex", index)
            if not ok:
                continue
            handles.append((index, handle))
            raw["devices"].append(_collect_device(pynvml, index, handle, cpu_words))
        if getattr(pynvml, "nvmlDeviceGetTopologyCommonAncestor", None) is None:
            errors["topology"] = "nvmlDeviceGetTopologyCommonAncestor is not available in these NVML bindings"
            return
        for i, (a, handle_a) in enumerate(handles):
            for b, handle_b in handles[i + 1:]:
                level, ok = _call(
                    errors,
                    "topology[%d,%d]" % (a, b),
                    pynvml,
                    "nvmlDeviceGetTopologyCommonAncestor",
                    handle_a,
                    handle_b,
                )
                if ok:
                    raw["topology"].append({"a": a, "b": b, "level": _int_or_none(level)})
    finally:
        _call(errors, "shutdown", pynvml, "nvmlShutdown")


# --------------------------------------------------------------------------
# parse


MAX_WARNINGS = 200


def _empty(warnings=None, error=None):
    return {"gpus": [], "links": {}, "numa_nodes": [], "warnings": list(warnings or []), "error": error}


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _bus(value):
    try:
        return normalize_bus_id(value) if value is not None else None
    except ValueError:
        return None


def _affinity(value, what, label, warnings):
    """{words, bits} -> sorted ids, or None."""
    value = _mapping(value)
    words = value.get("words")
    bits = _int_or_none(value.get("bits", WORD_BITS)) or WORD_BITS
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
    current = _int_or_none(value.get("current_generation"))
    maximum = _int_or_none(value.get("max_generation"))
    return {
        "current_speed": PCIE_SPEEDS.get(current),
        "max_speed": PCIE_SPEEDS.get(maximum),
        "current_width": _int_or_none(value.get("current_width")),
        "max_width": _int_or_none(value.get("max_width")),
    }


def parse(raw):
    """Turn a collect() record into the partial topology dict. Never raises."""
    try:
        partial = _parse(raw)
    except Exception as exc:  # pylint: disable=broad-except
        error = "%s: %s" % (type(exc).__name__, excerpt(str(exc), quote=False))
        return _empty(["NVML: record could not be read (%s)" % error], error=error)
    if len(partial["warnings"]) > MAX_WARNINGS:
        partial["warnings"] = partial["warnings"][:MAX_WARNINGS] + [
            "NVML: %d more warnings not shown" % (len(partial["warnings"]) - MAX_WARNINGS)]
    return partial


def _parse(raw):
    if not isinstance(raw, dict):
        return _empty(["NVML: record is not a mapping (got %s)" % type(raw).__name__])
    partial = _empty()
    warnings = partial["warnings"]
    top_errors = _mapping(raw.get("errors"))
    for key in ("collect", "init", "device_count"):
        if key in top_errors:
            warnings.append("NVML: %s failed: %s" % (key, excerpt(top_errors[key], quote=False)))
    for key, message in sorted(top_errors.items(), key=lambda kv: str(kv[0])):
        if str(key).startswith("handle["):
            warnings.append("NVML: GPU %s could not be opened: %s" % (excerpt(str(key)[7:-1], 20, quote=False), excerpt(message, quote=False)))
    devices = raw.get("devices")
    if devices is None:
        devices = []
    if not isinstance(devices, list):
        warnings.append("NVML: devices is not a list")
        devices = []
    if len(devices) > MAX_DEVICES:
        warnings.append("NVML: %d devices recorded; only the first %d are read" % (len(devices), MAX_DEVICES))
        devices = devices[:MAX_DEVICES]

    keys = {}  # device index -> partial key
    key_of_bus = {}
    switch_links = {}
    direct = {}
    node_cpus = {}
    for position, device in enumerate(devices):
        if not isinstance(device, dict):
            warnings.append("NVML: device entry %d is not a mapping" % position)
            continue
        errors = _mapping(device.get("errors"))
        index = device.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 1 << 20 else None
        label = "GPU %s" % (index if index is not None else "#%d" % position)
        gpu = {
            "index": index,
            "pci_bus_id": _bus(device.get("bus_id")),
            "uuid": device.get("uuid") if isinstance(device.get("uuid"), str) else None,
            "name": device.get("name") if isinstance(device.get("name"), str) else None,
            "memory_mb": None,
            "numa_node": None,
            "local_cpus": None,
            "mig_mode": None,
            "pcie": _pcie(device.get("pcie")),
            "vendor": "nvidia",
            "memory_numa_node": None,
        }
        if gpu["pci_bus_id"] is None:
            warnings.append(
                "NVML: %s: PCI bus id unknown (%s)" % (label, excerpt(errors.get("bus_id", device.get("bus_id"))))
            )
        memory = _int_or_none(device.get("memory_total"))
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
        own = device.get("gpu_numa_node")
        if isinstance(own, int) and not isinstance(own, bool) and 0 <= own < 1 << 20:
            gpu["memory_numa_node"] = own
        nodes = _affinity(device.get("memory_affinity"), "memory affinity", label, warnings)
        if nodes and len(nodes) == 1:
            gpu["numa_node"] = nodes[0]
            if cpus:
                node_cpus.setdefault(nodes[0], set()).update(cpus)
        key = gpu["pci_bus_id"] or ("GPU%d" % index if index is not None else None)
        if key is None or key in switch_links:
            warnings.append("NVML: %s: no usable id (bus id and index unknown or repeated); skipped" % label)
            continue
        partial["gpus"].append(gpu)
        if index is not None:
            keys[index] = key
        if gpu["pci_bus_id"]:
            key_of_bus[gpu["pci_bus_id"]] = key
        switch_links[key] = 0
        direct[key] = {}
        nvlinks = device.get("nvlinks")
        for entry in nvlinks if isinstance(nvlinks, list) else []:
            entry = _mapping(entry)
            if entry.get("active") is not True:
                continue
            kind = entry.get("remote_device_type")
            if kind == REMOTE_SWITCH:
                switch_links[key] += 1
            elif kind in (REMOTE_GPU, None):
                remote = _bus(entry.get("remote_bus_id"))
                if remote is not None:
                    direct[key][remote] = direct[key].get(remote, 0) + 1
            # REMOTE_IBMNPU: a GPU-CPU link (POWER), not between GPUs.

    levels = {}
    topology = raw.get("topology")
    for entry in topology if isinstance(topology, list) else []:
        entry = _mapping(entry)
        a, b, level = entry.get("a"), entry.get("b"), entry.get("level")
        if isinstance(a, int) and isinstance(b, int) and a in keys and b in keys:
            levels[frozenset((keys[a], keys[b]))] = level

    links = {}
    ordered = list(partial["gpus"])
    for i, gpu_a in enumerate(ordered):
        key_a = gpu_a["pci_bus_id"] or "GPU%s" % gpu_a["index"]
        for gpu_b in ordered[i + 1:]:
            key_b = gpu_b["pci_bus_id"] or "GPU%s" % gpu_b["index"]
            count = max(
                direct[key_a].get(gpu_b["pci_bus_id"], 0) if gpu_b["pci_bus_id"] else 0,
                direct[key_b].get(gpu_a["pci_bus_id"], 0) if gpu_a["pci_bus_id"] else 0,
            )
            if switch_links[key_a] and switch_links[key_b]:
                # NVSwitch fabric: every pair gets the narrower GPU's
                # switch-link count (nvidia-smi's NV18 on HGX H100).
                count += min(switch_links[key_a], switch_links[key_b])
            if count:
                value = "NV%d" % count
            else:
                level = levels.get(frozenset((key_a, key_b)))
                value = TOPOLOGY_LEVELS.get(level) if isinstance(level, int) else None
                if value is None:
                    warnings.append(
                        "NVML: no link class for %s - %s (topology level %s)" % (key_a, key_b, excerpt(level))
                    )
                    continue
            links.setdefault(key_a, {})[key_b] = value
            links.setdefault(key_b, {})[key_a] = value
    partial["links"] = links
    partial["numa_nodes"] = [
        {"id": node, "cpus": format_cpulist(cpus)} for node, cpus in sorted(node_cpus.items())
    ]
    return partial
