# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of nvml_parse: NVML records, recorded on real machines or damaged on purpose, read into partials."""

from __future__ import absolute_import, division, print_function

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.recorded import load, machines_with
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml_parse

__metaclass__ = type

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
GPU_KEYS = {
    "index", "pci_bus_id", "uuid", "name", "memory_mb", "numa_node",
    "local_cpus", "mig_mode", "pcie", "vendor", "memory_numa_node",
}


@pytest.mark.parametrize("name", machines_with("nvml"))
def test_parse_recorded_nvml_matches_expected(name):
    partial = nvml_parse.parse(load(name, "capture.yml")["nvml"])
    expected = load(name, "expected.yml")
    gpus = {
        g["pci_bus_id"]: {k: g[k] for k in ("index", "pci_bus_id", "numa_node", "local_cpus")}
        for g in partial["gpus"]
    }
    assert gpus == expected["gpus"]
    assert partial["links"] == expected["links"]
    assert partial["warnings"] == []
    for gpu in partial["gpus"]:
        assert set(gpu) == GPU_KEYS


def test_parse_dgx2_nvswitch_gives_nv6_not_pcie_levels():
    raw = load("dgx2_v100_16gpu_nvswitch", "capture.yml")["nvml"]
    partial = nvml_parse.parse(raw)
    values = {v for row in partial["links"].values() for v in row.values()}
    assert values == {"NV6"}
    assert len(partial["links"]) == 16
    assert partial["gpus"][0]["pcie"] == {
        "current_speed": "8.0 GT/s PCIe", "max_speed": "8.0 GT/s PCIe",
        "current_width": 16, "max_width": 16,
    }
    assert partial["gpus"][0]["uuid"] == "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6"
    assert partial["gpus"][0]["mig_mode"] is None


def test_parse_nvswitch_uses_the_narrower_gpu_link_count():
    raw = copy.deepcopy(load("dgx2_v100_16gpu_nvswitch", "capture.yml")["nvml"])
    raw["devices"][1]["nvlinks"][5]["active"] = False  # one link down on GPU 1
    links = nvml_parse.parse(raw)["links"]
    assert links["0000:34:00.0"]["0000:36:00.0"] == "NV5"
    assert links["0000:34:00.0"]["0000:39:00.0"] == "NV6"


def test_parse_without_nvswitch_falls_back_to_topology_levels():
    raw = copy.deepcopy(load("dgx2_v100_16gpu_nvswitch", "capture.yml")["nvml"])
    for device in raw["devices"]:
        device["nvlinks"] = []
    links = nvml_parse.parse(raw)["links"]
    assert links["0000:34:00.0"]["0000:36:00.0"] == "PIX"   # same PLX switch
    assert links["0000:34:00.0"]["0000:39:00.0"] == "PXB"   # two switches, one root port
    assert links["0000:34:00.0"]["0000:57:00.0"] == "NODE"  # other host bridge, same socket
    assert links["0000:34:00.0"]["0000:b7:00.0"] == "SYS"


def test_parse_power8_gpu_cpu_nvlinks_do_not_link_gpus():
    partial = nvml_parse.parse(load("power8_minsky_p100", "capture.yml")["nvml"])
    assert partial["links"]["0002:01:00.0"] == {
        "0003:01:00.0": "NV2", "000a:01:00.0": "SYS", "000b:01:00.0": "SYS",
    }
    assert partial["gpus"][0]["memory_mb"] == 16280
    assert partial["numa_nodes"] == [
        {"id": 0, "cpus": "0-1,8-9,16-17,24-25"},
        {"id": 1, "cpus": "80-81,88-89,96-97,104-105"},
    ]


def test_parse_several_memory_nodes_leave_numa_node_unknown():
    raw = copy.deepcopy(load("power8_minsky_p100", "capture.yml")["nvml"])
    raw["devices"][0]["memory_affinity"]["words"] = [3]
    gpu = nvml_parse.parse(raw)["gpus"][0]
    assert gpu["numa_node"] is None
    assert gpu["local_cpus"] == "0-1,8-9,16-17,24-25"


@pytest.mark.parametrize(
    "raw",
    [None, [], "text", {"devices": "x"}, {"devices": [1, None]}, {"devices": [{"index": True}]}],
    ids=["none", "list", "str", "devices-str", "devices-junk", "bool-index"],
)
def test_parse_bad_records_give_partial_with_warnings(raw):
    partial = nvml_parse.parse(raw)
    assert set(partial) == {"gpus", "links", "numa_nodes", "warnings", "error"}
    assert partial["gpus"] == []
    assert partial["warnings"]


def test_parse_unreadable_bus_id_keys_gpu_by_index():
    raw = copy.deepcopy(load("power8_minsky_p100", "capture.yml")["nvml"])
    raw["devices"][1]["bus_id"] = "garbage"
    partial = nvml_parse.parse(raw)
    assert partial["gpus"][1]["pci_bus_id"] is None
    assert "GPU1" in partial["links"]
    assert any("GPU 1: PCI bus id unknown" in w for w in partial["warnings"])


def test_parse_mig_mode_and_memory():
    raw = copy.deepcopy(load("power8_minsky_p100", "capture.yml")["nvml"])
    raw["devices"][0]["mig_mode"] = {"current": 1, "pending": 1}
    raw["devices"][1]["mig_mode"] = {"current": 0, "pending": 1}
    gpus = nvml_parse.parse(raw)["gpus"]
    assert [g["mig_mode"] for g in gpus] == ["enabled", "disabled", None, None]


def test_parse_keeps_200_warnings():
    assert len(nvml_parse.parse(_errors_only(200))["warnings"]) == 200


def test_parse_cuts_the_201st_warning():
    warnings = nvml_parse.parse(_errors_only(201))["warnings"]
    assert len(warnings) == 201 and warnings[-1] == "NVML: 1 more warnings not shown"


def test_parse_reads_an_affinity_of_1024_words():
    gpu = nvml_parse.parse(_one_gpu([0] * 1023 + [1 << 63]))["gpus"][0]
    assert gpu["local_cpus"] == "65535"


def test_parse_refuses_an_affinity_of_1025_words():
    partial = nvml_parse.parse(_one_gpu([1] + [0] * 1024))
    assert partial["gpus"][0]["local_cpus"] is None
    assert "NVML: GPU 0: unreadable CPU affinity (1025 words of 64 bits are more than the limit of 65536 CPUs)" in partial["warnings"]


def _errors_only(count):
    return {"collector_version": 1, "errors": dict(("handle[%d]" % i, "Unknown Error") for i in range(count)),
            "devices": []}


def _one_gpu(words):
    return {"collector_version": 1, "devices": [{"index": 0, "bus_id": "00000000:1A:00.0",
                                                 "cpu_affinity": {"scope": "node", "bits": 64, "words": words}}]}
