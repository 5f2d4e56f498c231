# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""NVML collector and parser.

There is no GPU on the machines that run these tests, so collect() runs
against a stand-in for the pynvml module built from a recorded machine's
NVML record: it answers every call the way that machine's NVML did (values
and failures), with the function names, argument order and result types
of nvidia-ml-py 13.x. A collect() over it must give back the record.
"""

from __future__ import absolute_import, division, print_function

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.recorded import load, machines_with
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml_parse

__metaclass__ = type

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")


class NVMLError(Exception):
    """Like pynvml.NVMLError: str() is NVML's error string."""


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class RecordedNVML:
    """Answers pynvml calls from a collect() record (see module docstring)."""

    NVML_AFFINITY_SCOPE_NODE = 0
    NVML_AFFINITY_SCOPE_SOCKET = 1
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 36
    NVMLError = NVMLError

    def __init__(self, raw):
        self.raw = raw
        self.calls = []
        self.initialised = False

    def _top_error(self, key):
        if key in self.raw["errors"]:
            raise NVMLError(self.raw["errors"][key])

    def _dev(self, handle, key=None):
        device = self.raw["devices"][handle]
        if key is not None and key in device["errors"]:
            raise NVMLError(device["errors"][key])
        return device

    def nvmlInit(self):
        self._top_error("init")
        self.initialised = True

    def nvmlShutdown(self):
        self.initialised = False

    def nvmlSystemGetDriverVersion(self):
        self._top_error("driver_version")
        return self.raw["driver_version"]

    def nvmlSystemGetNVMLVersion(self):
        self._top_error("nvml_version")
        return self.raw["nvml_version"]

    def nvmlDeviceGetCount(self):
        self._top_error("device_count")
        return len(self.raw["devices"])

    def nvmlDeviceGetHandleByIndex(self, index):
        self._top_error("handle[%d]" % index)
        return index

    def nvmlDeviceGetPciInfo(self, handle):
        # Old bindings hand back bytes.
        return _Struct(busId=self._dev(handle, "bus_id")["bus_id"].encode())

    def nvmlDeviceGetUUID(self, handle):
        return self._dev(handle, "uuid")["uuid"]

    def nvmlDeviceGetName(self, handle):
        return self._dev(handle, "name")["name"]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return _Struct(total=self._dev(handle, "memory_total")["memory_total"], free=0, used=0)

    def nvmlDeviceGetMigMode(self, handle):
        mig = self._dev(handle, "mig_mode")["mig_mode"]
        return [mig["current"], mig["pending"]]

    def _pcie(self, handle, key):
        return self._dev(handle, "pcie." + key)["pcie"][key]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._pcie(handle, "current_generation")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._pcie(handle, "max_generation")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._pcie(handle, "current_width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._pcie(handle, "max_width")

    def _words(self, recorded, size):
        words = list(recorded["words"]) + [0] * size
        return words[:size]

    def nvmlDeviceGetCpuAffinityWithinScope(self, handle, size, scope):
        self.calls.append(("cpu_affinity", size, scope))
        device = self._dev(handle, "cpu_affinity")
        assert scope == self.NVML_AFFINITY_SCOPE_NODE
        return self._words(device["cpu_affinity"], size)

    def nvmlDeviceGetCpuAffinity(self, handle, size):
        device = self._dev(handle, "cpu_affinity_legacy")
        return self._words(device["cpu_affinity"], size)

    def nvmlDeviceGetNumaNodeId(self, handle):
        device = self._dev(handle)
        if "gpu_numa_node" not in device:
            raise NVMLError("Not Supported")  # what x86 hosts answer
        return device["gpu_numa_node"]

    def nvmlDeviceGetMemoryAffinity(self, handle, size, scope):
        device = self._dev(handle, "memory_affinity")
        return self._words(device["memory_affinity"], size)

    def _link(self, handle, link, key):
        device = self._dev(handle, "%s[%d]" % (key, link))
        links = device["nvlinks"]
        if link >= len(links):
            raise NVMLError("Invalid Argument")
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        return 1 if self._link(handle, link, "nvlink_state")["active"] else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return _Struct(busId=self._link(handle, link, "nvlink_remote_pci")["remote_bus_id"])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        return self._link(handle, link, "nvlink_remote_type")["remote_device_type"]

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        self._top_error("topology[%d,%d]" % (a, b))
        for entry in self.raw["topology"]:
            if (entry["a"], entry["b"]) in ((a, b), (b, a)):
                return entry["level"]
        raise NVMLError("Unknown Error")


def _without(fake, *names):
    """The stand-in with some functions missing, as in old bindings."""
    class Older(RecordedNVML):
        pass

    for name in names:
        setattr(Older, name, None)
    older = Older(fake.raw)
    for name in names:
        # getattr(module, name, None) is None: "not available".
        setattr(older, name, None)
    return older


@pytest.mark.parametrize("name", machines_with("nvml"))
def test_collect_over_recorded_nvml_gives_back_the_record(name):
    raw = load(name, "capture.yml")["nvml"]
    fake = RecordedNVML(raw)
    collected = nvml.collect(fake, cpu_count=raw["cpu_count"])
    assert collected == raw
    assert fake.initialised is False  # nvmlShutdown was called


def test_collect_sizes_cpu_affinity_for_the_cpu_count():
    raw = load("power8_minsky_p100", "capture.yml")["nvml"]
    fake = RecordedNVML(raw)
    nvml.collect(fake, cpu_count=129)
    assert ("cpu_affinity", 3, 0) in fake.calls


def test_collect_missing_scoped_affinity_falls_back_to_legacy_call():
    raw = load("dgx2_v100_16gpu_nvswitch", "capture.yml")["nvml"]
    fake = _without(RecordedNVML(raw), "nvmlDeviceGetCpuAffinityWithinScope")
    collected = nvml.collect(fake, cpu_count=raw["cpu_count"])
    device = collected["devices"][0]
    assert device["cpu_affinity"] == {"scope": "legacy", "bits": 64, "words": [3]}
    assert "not available" in device["errors"]["cpu_affinity"]
    assert nvml_parse.parse(collected)["gpus"][0]["local_cpus"] == "0-1"


def test_collect_missing_topology_and_remote_type_functions():
    raw = load("power8_minsky_p100", "capture.yml")["nvml"]
    fake = _without(
        RecordedNVML(raw), "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetNvLinkRemoteDeviceType"
    )
    collected = nvml.collect(fake, cpu_count=raw["cpu_count"])
    assert collected["topology"] == []
    assert "not available" in collected["errors"]["topology"]
    assert collected["devices"][0]["nvlinks"][0]["remote_device_type"] is None
    partial = nvml_parse.parse(collected)
    # Without the type the remote bus id still names the peer GPU ...
    assert partial["links"]["0002:01:00.0"]["0003:01:00.0"] == "NV2"
    # ... and without common-ancestor levels the PCIe pairs stay unknown.
    assert "000a:01:00.0" not in partial["links"]["0002:01:00.0"]
    assert any("no link class" in w for w in partial["warnings"])


def test_collect_init_failure_is_recorded_not_raised():
    raw = copy.deepcopy(load("power8_minsky_p100", "capture.yml")["nvml"])
    raw["errors"] = {"init": "Driver Not Loaded"}
    collected = nvml.collect(RecordedNVML(raw), cpu_count=8)
    assert collected["errors"] == {"init": "Driver Not Loaded"}
    assert collected["devices"] == [] and collected["device_count"] is None
    partial = nvml_parse.parse(collected)
    assert partial["gpus"] == []
    assert partial["warnings"] == ["NVML: init failed: Driver Not Loaded"]


def test_collect_handle_failure_skips_that_gpu():
    raw = copy.deepcopy(load("power8_minsky_p100", "capture.yml")["nvml"])
    raw["errors"]["handle[2]"] = "GPU is lost"
    collected = nvml.collect(RecordedNVML(raw), cpu_count=raw["cpu_count"])
    assert [d["index"] for d in collected["devices"]] == [0, 1, 3]
    partial = nvml_parse.parse(collected)
    assert "NVML: GPU 2 could not be opened: GPU is lost" in partial["warnings"]
    assert len(partial["gpus"]) == 3


def test_collect_unexpected_exception_type_is_recorded():
    raw = load("power8_minsky_p100", "capture.yml")["nvml"]
    fake = RecordedNVML(raw)

    def broken(handle):
        raise RuntimeError("ctypes went wrong")

    fake.nvmlDeviceGetName = broken
    collected = nvml.collect(fake, cpu_count=raw["cpu_count"])
    assert all(d["name"] is None for d in collected["devices"])
    assert collected["devices"][0]["errors"]["name"] == "ctypes went wrong"


def test_collect_on_an_object_without_nvml_at_all():
    collected = nvml.collect(object(), cpu_count=4)
    assert collected["devices"] == []
    assert "not available" in collected["errors"]["init"]
    assert nvml_parse.parse(collected)["warnings"][0].startswith("NVML: init failed")


def test_collect_defaults_cpu_count_to_this_machine():
    collected = nvml.collect(object())
    assert collected["cpu_count"] == (os.cpu_count() or 1)


def test_collect_and_parse_gpu_numa_node_id_only_when_nvml_answers():
    # Grace Hopper: nvmlDeviceGetNumaNodeId names the GPU's own memory node; x86 answers
    # "Not Supported", which is the normal case and leaves no trace in the record
    raw = load("dgx2_v100_16gpu_nvswitch", "capture.yml")["nvml"]
    raw["devices"][0]["gpu_numa_node"] = 1
    collected = nvml.collect(RecordedNVML(raw), cpu_count=raw["cpu_count"])
    assert collected == raw
    assert "gpu_numa_node" not in collected["devices"][1] and "gpu_numa_node" not in collected["devices"][1]["errors"]
    gpus = nvml_parse.parse(raw)["gpus"]
    assert [g["memory_numa_node"] for g in gpus[:2]] == [1, None]
    assert gpus[0]["numa_node"] != 1


# Limits pinned one step either side (a limit moved by one fails here).
