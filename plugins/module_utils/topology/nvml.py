# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""NVML as a topology source, the reading half: `collect()` reads, and
nvml_parse.parse() interprets what it read.

`collect(pynvml)` takes the imported `pynvml` module (PyPI package
`nvidia-ml-py`) and returns a plain, YAML/JSON-serialisable record of what
NVML said: the raw material a capture stores under its `nvml:` key. It
never raises: every call that fails (an NVMLError such as "Not Supported",
a function missing from old bindings, anything else) is recorded under the
record's or the device's `errors` and its value is None.

nvml_parse.parse(raw) turns such a record into the partial dict every
topology source returns (docs/facts.md).

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

from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import MAX_GPUS

__metaclass__ = type

COLLECTOR_VERSION = 1
WORD_BITS = 64
NODE_WORDS = 1  # 64 NUMA nodes are plenty for the hosts this serves
MAX_DEVICES = MAX_GPUS  # anything above is a broken binding, not a machine

# nvmlDeviceGetNvLinkRemoteDeviceType
REMOTE_GPU = 0
REMOTE_IBMNPU = 1
REMOTE_SWITCH = 2


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


def int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _words(array):
    try:
        return [int(w) for w in array]
    except (TypeError, ValueError):
        return None


def _identity(pynvml, handle, device, errors):
    """Bus id, UUID, name, memory and MIG mode of one device into device."""
    pci, ok = _call(errors, "bus_id", pynvml, "nvmlDeviceGetPciInfo", handle)
    if ok:
        device["bus_id"] = _text(getattr(pci, "busId", None))
    value, ok = _call(errors, "uuid", pynvml, "nvmlDeviceGetUUID", handle)
    device["uuid"] = _text(value) if ok else None
    value, ok = _call(errors, "name", pynvml, "nvmlDeviceGetName", handle)
    device["name"] = _text(value) if ok else None
    memory, ok = _call(errors, "memory_total", pynvml, "nvmlDeviceGetMemoryInfo", handle)
    if ok:
        device["memory_total"] = int_or_none(getattr(memory, "total", None))
    mig, ok = _call(errors, "mig_mode", pynvml, "nvmlDeviceGetMigMode", handle)
    if ok:
        try:
            device["mig_mode"] = {"current": int(mig[0]), "pending": int(mig[1])}
        except (TypeError, ValueError, LookupError):  # any shape but a pair
            errors["mig_mode"] = "unexpected value %r" % (mig,)


def _pcie_generations(pynvml, handle, errors):
    pcie = {}
    for key, name in (
        ("current_generation", "nvmlDeviceGetCurrPcieLinkGeneration"),
        ("max_generation", "nvmlDeviceGetMaxPcieLinkGeneration"),
        ("current_width", "nvmlDeviceGetCurrPcieLinkWidth"),
        ("max_width", "nvmlDeviceGetMaxPcieLinkWidth"),
    ):
        value, ok = _call(errors, "pcie." + key, pynvml, name, handle)
        pcie[key] = int_or_none(value) if ok else None
    return pcie


def _affinities(pynvml, handle, cpu_words, device, errors):
    """CPU and memory affinity words, and the GPU's own NUMA node where NVML has one, into device."""
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
    value = int_or_none(value) if ok and not isinstance(value, bool) else None
    if value is not None and 0 <= value < 1 << 20:
        device["gpu_numa_node"] = value


def _nvlinks(pynvml, handle, errors):
    """[{link, active, remote_bus_id, remote_device_type}] up to the device's last link."""
    entries = []
    max_links = int_or_none(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)) or 18
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
                errors, "nvlink_remote_type[%d]" % link, pynvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link
            )
            if ok:
                entry["remote_device_type"] = int_or_none(kind)
        entries.append(entry)
    return entries


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
    _identity(pynvml, handle, device, errors)
    device["pcie"] = _pcie_generations(pynvml, handle, errors)
    _affinities(pynvml, handle, cpu_words, device, errors)
    device["nvlinks"] = _nvlinks(pynvml, handle, errors)
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
    cpu_count = int_or_none(cpu_count)
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
        count = int_or_none(count)
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
                    raw["topology"].append({"a": a, "b": b, "level": int_or_none(level)})
    finally:
        _call(errors, "shutdown", pynvml, "nvmlShutdown")
