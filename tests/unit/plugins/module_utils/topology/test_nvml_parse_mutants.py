# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of nvml_parse that the mutation run (scripts/mutation.py) showed
missing: the tables of topology levels and PCIe generations, the bounds of
plain integers, and exact GPUs and warnings of small records."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml_parse
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvml import MAX_DEVICES

# Written out here, not taken from the module: the table under test.
LEVEL_CLASS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
GENERATION_SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
                    4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}


def _bus(index):
    return "0000:%02x:00.0" % (index + 1)


def _device(index, **fields):
    device = {
        "index": index, "bus_id": "0000" + _bus(index), "uuid": "GPU-%d" % index, "name": "Tesla T4",
        "memory_total": 16 * 1024 * 1024 * 1024, "mig_mode": None,
        "pcie": {"current_generation": 3, "max_generation": 3, "current_width": 16, "max_width": 16},
        "cpu_affinity": {"scope": "node", "bits": 64, "words": [0xF << (4 * index)]},
        "memory_affinity": {"scope": "node", "bits": 64, "words": [1 << index]},
        "nvlinks": [], "errors": {},
    }
    device.update(fields)
    return device


def _record(devices, topology=()):
    return {"collector_version": 1, "errors": {}, "devices": devices, "topology": list(topology)}


def test_every_topology_level_is_its_nvidia_smi_class():
    levels = sorted(LEVEL_CLASS)
    devices = [_device(i) for i in range(len(levels) + 1)]
    topology = [{"a": 0, "b": i + 1, "level": level} for i, level in enumerate(levels)]
    partial = nvml_parse.parse(_record(devices, topology))
    # The other pairs have no level recorded: each is named once.
    assert partial["warnings"] == [
        "NVML: no link class for %s - %s (topology level None)" % (_bus(a), _bus(b))
        for a in range(1, len(devices)) for b in range(a + 1, len(devices))
    ]
    assert partial["links"][_bus(0)] == dict((_bus(i + 1), LEVEL_CLASS[level]) for i, level in enumerate(levels))


def test_every_pcie_generation_is_its_sysfs_speed():
    generations = sorted(GENERATION_SPEED)
    devices = [_device(i, pcie={"current_generation": g, "max_generation": 7 - g, "current_width": 8, "max_width": 16})
               for i, g in enumerate(generations)]
    partial = nvml_parse.parse(_record(devices))
    assert [g["pcie"] for g in partial["gpus"]] == [
        {"current_speed": GENERATION_SPEED[g], "max_speed": GENERATION_SPEED[7 - g], "current_width": 8, "max_width": 16}
        for g in generations
    ]
    assert nvml_parse.parse(_record([_device(0, pcie={"current_generation": 7, "max_generation": 0})]))["gpus"][0]["pcie"] == {
        "current_speed": None, "max_speed": None, "current_width": None, "max_width": None}


@pytest.mark.parametrize("value, read", [(0, 0), ((1 << 19), 1 << 19), ((1 << 20) - 1, (1 << 20) - 1),
                                         (1 << 20, None), (-1, None), (True, None), ("3", None)])
def test_gpu_numa_node_is_a_plain_int_below_two_to_the_twenty(value, read):
    partial = nvml_parse.parse(_record([_device(0, gpu_numa_node=value)]))
    assert partial["gpus"][0]["memory_numa_node"] == read


def test_one_whole_device_exactly():
    partial = nvml_parse.parse(_record([_device(0, mig_mode={"current": 1, "pending": 1})]))
    assert partial == {
        "gpus": [{"index": 0, "pci_bus_id": "0000:01:00.0", "uuid": "GPU-0", "name": "Tesla T4", "memory_mb": 16384,
                  "numa_node": 0, "local_cpus": "0-3", "mig_mode": "enabled",
                  "pcie": {"current_speed": "8.0 GT/s PCIe", "max_speed": "8.0 GT/s PCIe", "current_width": 16, "max_width": 16},
                  "vendor": "nvidia", "memory_numa_node": None}],
        "links": {}, "numa_nodes": [{"id": 0, "cpus": "0-3"}], "warnings": [], "error": None,
    }


def test_affinity_words_of_the_recorded_width():
    # 32-bit words: bit 0 of the second word is CPU 32.
    device = _device(0, cpu_affinity={"scope": "node", "bits": 32, "words": [0xF, 0x1]})
    partial = nvml_parse.parse(_record([device]))
    assert (partial["gpus"][0]["local_cpus"], partial["warnings"]) == ("0-3,32", [])


@pytest.mark.parametrize("words, shown", [([-1], "[-1]"), (["x"], "['x']"), ([True], "[True]"), (5, "5"), ((1,), "(1,)")])
def test_affinity_words_that_are_no_unsigned_ints_are_refused_by_name(words, shown):
    device = _device(0, cpu_affinity={"scope": "node", "bits": 64, "words": words})
    partial = nvml_parse.parse(_record([device]))
    assert partial["gpus"][0]["local_cpus"] is None
    assert partial["warnings"] == ["NVML: GPU 0: unreadable CPU affinity %s" % shown, "NVML: GPU 0: CPU affinity unknown"]


def test_affinity_word_too_wide_for_its_bits_is_refused_with_the_reason():
    device = _device(0, memory_affinity={"scope": "node", "bits": 8, "words": [256]})
    partial = nvml_parse.parse(_record([device]))
    assert partial["gpus"][0]["numa_node"] is None
    assert partial["warnings"] == ["NVML: GPU 0: unreadable memory affinity (word 0 is not a 8-bit value)"]


def test_handle_errors_in_the_order_of_their_keys_with_the_id_cut_at_twenty():
    raw = _record([])
    twenty, twenty_one = "1" * 20, "2" * 21
    raw["errors"] = {"handle[1]": "a failure", "handle[0]": "b failure",
                     "handle[%s]" % twenty: "c", "handle[%s]" % twenty_one: "d", "init": "'quoted'"}
    assert nvml_parse.parse(raw)["warnings"] == [
        "NVML: init failed: 'quoted'",
        "NVML: GPU 0 could not be opened: b failure",
        "NVML: GPU %s could not be opened: c" % twenty,
        "NVML: GPU 1 could not be opened: a failure",
        "NVML: GPU %s... could not be opened: d" % twenty_one[:20],
    ]


def test_a_parser_bug_is_named_unquoted_not_raised(monkeypatch):
    def broken(raw):
        raise RuntimeError("it's broken")

    monkeypatch.setattr(nvml_parse, "_parse", broken)
    error = "RuntimeError: it's broken"  # unquoted: the quote=True form would be "it's broken" in quotes
    assert nvml_parse.parse(_record([])) == {
        "gpus": [], "links": {}, "numa_nodes": [],
        "warnings": ["NVML: record could not be read (%s)" % error], "error": error,
    }


def test_at_most_max_devices_are_read():
    # Entries that are no mappings: cheap, and each one is counted.
    assert nvml_parse.parse(_record([0] * MAX_DEVICES))["warnings"][0] == "NVML: device entry 0 is not a mapping"
    assert nvml_parse.parse(_record([0] * (MAX_DEVICES + 1)))["warnings"][:2] == [
        "NVML: %d devices recorded; only the first %d are read" % (MAX_DEVICES + 1, MAX_DEVICES),
        "NVML: device entry 0 is not a mapping",
    ]
    # The last one read is entry MAX_DEVICES - 1, no more, no less.
    devices = [0] * (MAX_DEVICES - 1) + [_device(0), _device(1)]
    assert [g["index"] for g in nvml_parse.parse(_record(devices))["gpus"]] == [0]


def test_gpus_without_bus_ids_are_keyed_by_index_and_linked_by_level():
    devices = [_device(0, bus_id=None), _device(1, bus_id=None)]
    partial = nvml_parse.parse(_record(devices, [{"a": 0, "b": 1, "level": 10}]))
    assert partial["links"] == {"GPU0": {"GPU1": "PIX"}, "GPU1": {"GPU0": "PIX"}}
    assert partial["warnings"] == ["NVML: GPU 0: PCI bus id unknown (None)", "NVML: GPU 1: PCI bus id unknown (None)"]


def test_topology_entries_naming_no_recorded_device_are_ignored():
    topology = [{"a": 0, "b": 99, "level": 50}, {"a": "0", "b": 1, "level": 50}, {"a": 0, "b": 1, "level": 20}]
    partial = nvml_parse.parse(_record([_device(0), _device(1)], topology))
    assert (partial["links"], partial["warnings"], partial["error"]) == (
        {_bus(0): {_bus(1): "PXB"}, _bus(1): {_bus(0): "PXB"}}, [], None)
