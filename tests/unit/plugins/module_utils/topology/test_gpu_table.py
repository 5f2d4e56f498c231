# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of gpu_table: GPU records found by bus id or index, what each source says kept in order, links by GPU id."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.gpu_table import (
    GpuTable,
    SourceValue,
    merge_links,
    partial_key,
    record_id,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.partial import new_gpu


def _gpu(index=None, bus=None, **fields):
    gpu = new_gpu(index)
    gpu["pci_bus_id"] = bus
    gpu.update(fields)
    return gpu


def test_merge_finds_a_record_by_bus_id_then_by_index():
    table = GpuTable()
    first = table.merge(_gpu(bus="0000:01:00.0", numa_node=0, local_cpus="0-3"), "sysfs")
    assert table.merge(_gpu(index=0, bus="0000:01:00.0", uuid="GPU-a"), "nvml") is first
    assert table.merge(_gpu(index=0, numa_node=1), "nvidia-smi topo") is first
    assert first["index"] == 0 and first["uuid"] == "GPU-a"
    assert first["seen_by"] == ["sysfs", "nvml", "nvidia-smi topo"]


def test_merge_keeps_what_each_source_says_in_precedence_order_by_name():
    table = GpuTable()
    record = table.merge(_gpu(bus="0000:01:00.0", numa_node=0, local_cpus="0-3"), "sysfs")
    table.merge(_gpu(bus="0000:01:00.0", numa_node=1), "nvml")
    assert record["numa"] == [SourceValue("sysfs", 0), SourceValue("nvml", 1)]
    assert record["numa"][1].source == "nvml" and record["cpus"][0].value == "0-3"


def test_an_index_does_not_match_a_record_whose_bus_id_it_contradicts():
    table = GpuTable()
    table.merge(_gpu(index=0, bus="0000:01:00.0"), "nvml")
    other = table.merge(_gpu(index=0, bus="0000:02:00.0"), "nvidia-smi")
    assert len(table.records) == 2 and other["pci_bus_id"] == "0000:02:00.0"


def test_merge_links_keys_rows_by_the_facts_gpu_ids_and_drops_unknown_rows():
    table = GpuTable()
    table.merge(_gpu(index=0, bus="0000:01:00.0"), "nvml")
    table.merge(_gpu(index=1), "nvidia-smi topo")
    links, warnings = {}, []
    merge_links(links, {"0000:01:00.0": {"GPU1": "NV4", "0000:01:00.0": "X"}, "GPU7": {"GPU1": "SYS"}},
                table, "nvml", warnings)
    assert links == {"0000:01:00.0": {"GPU1": "NV4"}}
    assert warnings == ["nvml: link row for unknown GPU GPU7 ignored"]


def test_partial_key_and_record_id():
    assert partial_key({"pci_bus_id": "0000:01:00.0", "index": 3}) == "0000:01:00.0"
    assert partial_key({"pci_bus_id": None, "index": 3}) == "GPU3"
    assert partial_key({}) is None
    assert record_id({"pci_bus_id": None, "index": 2}) == "GPU2"
