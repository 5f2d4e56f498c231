# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The preflight's readers over recorded captures: every input by its path
or canonical command line, None (unknown) where the capture does not hold
it, never a default."""

from __future__ import annotations

import os

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import readings
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader


def machine(name):
    return load_capture(os.path.join(fixture_paths.FIXTURES, "machines", name, "capture.yml"))


def test_read_host_empty_capture_is_unknown_everywhere():
    got = readings.read_host(CaptureReader({"capture_version": 1}), [])
    assert got == {"numactl": None, "numa_balancing": None, "cpuset": None, "persistence": None,
                   "nvswitches": None, "fabric_manager": None, "systemd": None, "probes": [], "warnings": []}


def test_read_nvswitches_from_a_recorded_nvml_record():
    # DGX-2: every NVLink of every V100 goes to an NVSwitch (remote device type 2)
    switches = readings.read_nvswitches(CaptureReader(machine("dgx2_v100_16gpu_nvswitch")))
    assert len(switches) == 12 and switches[0] == "0000:61:00.0"


def test_read_nvswitches_none_on_pci_devices_without_switches():
    assert readings.read_nvswitches(CaptureReader(machine("rtx4090_8gpu_pcie_switch_quads"))) is None
    assert readings.read_nvswitches(CaptureReader(machine("this_machine_ci"))) == []


def test_read_cpuset_mems_v2_slice_then_root():
    capture = {"capture_version": 1, "files": {"/sys/fs/cgroup/cpuset.mems.effective": "0-1\n"}}
    warnings = []
    assert readings.read_cpuset_mems(CaptureReader(capture), "system.slice", warnings) == {
        "path": "/sys/fs/cgroup/cpuset.mems.effective", "mems": "0-1"}
    capture["files"]["/sys/fs/cgroup/system.slice/cpuset.mems.effective"] = "1\n"
    assert readings.read_cpuset_mems(CaptureReader(capture), "system.slice", warnings)["mems"] == "1"
    capture["files"]["/sys/fs/cgroup/system.slice/cpuset.mems.effective"] = "one\n"
    assert readings.read_cpuset_mems(CaptureReader(capture), "system.slice", warnings) is None
    assert warnings and "cpuset.mems.effective" in warnings[0]


def test_read_cpuset_mems_v1_where_mountinfo_says():
    capture = {"capture_version": 1, "files": {
        "/proc/self/mountinfo": "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n",
        "/sys/fs/cgroup/cpuset/cpuset.effective_mems": "0\n"}}
    assert readings.read_cpuset_mems(CaptureReader(capture), "system.slice", []) == {
        "path": "/sys/fs/cgroup/cpuset/cpuset.effective_mems", "mems": "0"}


def test_parse_persistence():
    text = "00000000:1A:00.0, Enabled\n00000000:1B:00.0, Disabled\nnot a line\n00000000:1C:00.0, [N/A]\n"
    assert readings.parse_persistence(text) == {"0000:1a:00.0": True, "0000:1b:00.0": False}
    assert readings.parse_persistence("") is None and readings.parse_persistence(None) is None


def test_parse_show():
    assert readings.parse_show("LoadState=not-found\nActiveState=inactive\n") == {
        "LoadState": "not-found", "ActiveState": "inactive"}
    assert readings.parse_show(None) is None


def test_read_persistence_nvml_first():
    class FakeHandle(object):
        busId = b"00000000:1A:00.0"

    class NVML(object):
        """The four NVML calls read_persistence makes, as nvidia-ml-py names them."""
        def nvmlInit(self):
            return None

        def nvmlShutdown(self):
            return None

        def nvmlDeviceGetCount(self):
            return 1

        def nvmlDeviceGetHandleByIndex(self, index):
            return FakeHandle()

        def nvmlDeviceGetPciInfo(self, handle):
            return handle

        def nvmlDeviceGetPersistenceMode(self, handle):
            return 0

    reader = CaptureReader({"capture_version": 1, "commands": {readings.PERSISTENCE_COMMAND: "00000000:1A:00.0, Enabled\n"}})
    assert readings.read_persistence(reader, NVML()) == {"source": "nvml", "gpus": {"0000:1a:00.0": False}}
    assert readings.read_persistence(reader, None) == {"source": "nvidia-smi", "gpus": {"0000:1a:00.0": True}}
