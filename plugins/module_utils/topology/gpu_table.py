# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The GPU records assemble() merges, findable by bus id and NVIDIA index,
and the links between them keyed by the facts' GPU ids. Standard library
only (runs on targets).
"""

from __future__ import annotations

from collections import namedtuple

IDENTITY_FIELDS = ("uuid", "name", "memory_mb", "mig_mode", "pci_class")
PCIE_KEYS = ("current_speed", "max_speed", "current_width", "max_width")

# What one source says of a GPU (its NUMA node, its local CPUs), kept in
# precedence order in the record's "numa" and "cpus" lists.
SourceValue = namedtuple("SourceValue", "source value")
# A record as merge_links finds it: which record (its id()) and its GPU id in the facts.
_RecordRef = namedtuple("_RecordRef", "identity gpu_id")


def partial_key(gpu):
    if gpu.get("pci_bus_id"):
        return gpu["pci_bus_id"]
    if gpu.get("index") is not None:
        return "GPU%d" % gpu["index"]
    return None


def pcie_known(pcie):
    return bool(pcie) and any(pcie.get(k) is not None for k in PCIE_KEYS)


def sort_key(record):
    return (record["pci_bus_id"] is None, record["pci_bus_id"] or "", record["index"] if record["index"] is not None else -1)


class GpuTable(object):
    """GPU records being merged, findable by bus id and by NVIDIA index."""

    def __init__(self):
        self.records = []
        self.by_key = {}  # any key a source used ("0000:1a:00.0", "GPU3") -> record

    def find(self, gpu):
        bus = gpu.get("pci_bus_id")
        if bus:
            for record in self.records:
                if record["pci_bus_id"] == bus:
                    return record
        if gpu.get("index") is not None:
            for record in self.records:
                if record["index"] == gpu["index"] and record["vendor"] == "nvidia":
                    # An index only matches a record whose bus id it cannot contradict.
                    if not bus or record["pci_bus_id"] is None:
                        return record
        return None

    def add(self, gpu, source):
        record = {
            "index": gpu.get("index"),
            "index_derived": False,
            "pci_bus_id": gpu.get("pci_bus_id"),
            "uuid": None,
            "name": None,
            "vendor": gpu.get("vendor") or "nvidia",
            "memory_mb": None,
            "mig_mode": None,
            "pci_class": None,
            "pcie": None,
            "numa": [],  # SourceValue(source, node) in precedence order
            "cpus": [],  # SourceValue(source, cpulist) in precedence order
            "seen_by": [],
            "numa_reported": gpu.get("numa_node_reported"),
            "memory_numa": None,  # the GPU's own memory node (Grace: a NUMA node without CPUs)
        }
        self.records.append(record)
        return record

    def merge(self, gpu, source):
        record = self.find(gpu)
        if record is None:
            record = self.add(gpu, source)
        if gpu.get("index") is not None and (record["index"] is None or record["index_derived"]):
            record["index"] = gpu["index"]
            record["index_derived"] = False
        if record["pci_bus_id"] is None and gpu.get("pci_bus_id"):
            record["pci_bus_id"] = gpu["pci_bus_id"]
        for field in IDENTITY_FIELDS:
            if record[field] is None and gpu.get(field) is not None:
                record[field] = gpu[field]
        if not pcie_known(record["pcie"]) and pcie_known(gpu.get("pcie")):
            record["pcie"] = dict((k, gpu["pcie"].get(k)) for k in PCIE_KEYS)
        if gpu.get("numa_node") is not None:
            record["numa"].append(SourceValue(source, gpu["numa_node"]))
        if gpu.get("local_cpus"):
            record["cpus"].append(SourceValue(source, gpu["local_cpus"]))
        if record["memory_numa"] is None and gpu.get("memory_numa_node") is not None:
            record["memory_numa"] = gpu["memory_numa_node"]
        record["seen_by"].append(source)
        key = partial_key(gpu)
        if key:
            self.by_key[key] = record
        return record


def record_id(record):
    if record["pci_bus_id"]:
        return record["pci_bus_id"]
    return "GPU%d" % record["index"]


def merge_links(links, partial_links, table, source, warnings):
    # Work per link is two dict lookups: a 1,000-GPU matrix has a million.
    ids = dict((key, _RecordRef(id(record), record_id(record))) for key, record in table.by_key.items())
    for key_a, row in (partial_links or {}).items():
        rec_a = ids.get(key_a)
        if rec_a is None:
            warnings.append("%s: link row for unknown GPU %s ignored" % (source, key_a))
            continue
        out = None
        for key_b, cls in (row or {}).items():
            rec_b = ids.get(key_b)
            if rec_b is None or rec_b.identity == rec_a.identity or not cls:
                continue
            if out is None:
                out = links.setdefault(rec_a.gpu_id, {})
            out[rec_b.gpu_id] = cls
