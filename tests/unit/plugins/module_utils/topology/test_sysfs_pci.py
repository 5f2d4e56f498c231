# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of sysfs_pci: GPUs and NICs under /sys/bus/pci/devices, link classes from the PCI tree, AMD KFD."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_pci
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import (
    AMD, ASPEED, INTEL, MATROX, MELLANOX, NVIDIA, collect, files_reader as _reader, two_socket_host, write_tree,
)

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
MACHINE_DIRS = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(MACHINES, "*", "capture.yml")))


def machine_id(path):
    return os.path.basename(path)


def machines_with_pcie_links():
    found = []
    for path in MACHINE_DIRS:
        with open(os.path.join(path, "expected.yml")) as handle:
            if (yaml.safe_load(handle) or {}).get("pcie_links"):
                found.append(path)
    return found


def pci_tree_host():
    b = two_socket_host()
    up = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"]  # root port, switch A upstream port
    b.device("0000:03:00.0", up + ["0000:02:00.0"], "0x030200", NVIDIA)                          # switch A port 0
    b.device("0000:04:00.0", up + ["0000:02:01.0"], "0x030200", NVIDIA)                          # switch A port 1
    b.device("0000:07:00.0", up + ["0000:02:02.0", "0000:05:00.0", "0000:06:00.0"], "0x030200", NVIDIA)  # switch B
    b.device("0000:08:00.0", ["pci0000:00", "0000:00:02.0"], "0x030200", NVIDIA)                 # own root port
    b.device("0000:41:00.0", ["pci0000:40", "0000:40:01.0"], "0x030200", NVIDIA)                 # other host bridge
    b.device("0000:81:00.0", ["pci0000:80", "0000:80:01.0"], "0x030200", NVIDIA, numa_node="1",
             local_cpus="2-3,6-7")
    return b


def kfd_node(b, node, props, links=()):
    base = "/sys/class/kfd/kfd/topology/nodes/%d" % node
    b.files[base + "/properties"] = "".join("%s %d\n" % kv for kv in props.items())
    for i, (kind, to) in enumerate(links):
        b.files["%s/io_links/%d/properties" % (base, i)] = "type %d\nnode_from %d\nnode_to %d\nweight 15\n" % (
            kind, node, to)


def test_collect_gpu_classes_and_vendors():
    b = two_socket_host()
    root = ["pci0000:00", "0000:00:01.0"]
    b.device("0000:01:00.0", root, "0x030200", NVIDIA, local_cpus="0-1,4-5")          # 3D controller
    b.device("0000:02:00.0", ["pci0000:00"], "0x030000", ASPEED, numa_node="-1")     # BMC VGA
    b.device("0000:03:00.0", ["pci0000:00"], "0x030000", MATROX, numa_node="-1")     # BMC VGA
    b.device("0000:04:00.0", root, "0x068000", NVIDIA)                               # NVSwitch bridge
    b.device("0000:05:00.0", root, "0x040300", NVIDIA)                               # GPU audio
    b.device("0000:06:00.0", root, "0x120000", AMD, device="0x74a1")                 # MI300X
    b.device("0000:07:00.0", root, "0x038000", AMD, device="0x740c")                 # MI250
    b.device("0000:08:00.0", ["pci0000:00"], "0x030000", INTEL, device="0x56c0")     # Intel GPU
    facts = collect(b)
    assert [(g["pci_bus_id"], g["vendor"]) for g in facts["gpus"]] == [
        ("0000:01:00.0", "nvidia"),
        ("0000:06:00.0", "amd"),
        ("0000:07:00.0", "amd"),
        ("0000:08:00.0", "intel"),
    ]
    gpu = facts["gpus"][0]
    assert gpu["numa_node"] == 0
    assert gpu["local_cpus"] == "0-1,4-5"
    assert gpu["pcie"] == {"current_speed": "16.0 GT/s PCIe", "max_speed": "16.0 GT/s PCIe",
                           "current_width": 16, "max_width": 16}


def test_collect_gpu_numa_minus_one_is_unknown_and_reported():
    b = two_socket_host()
    b.device("0000:01:00.0", ["pci0000:00"], "0x030200", NVIDIA, numa_node="-1", local_cpus="2-3,6-7")
    gpu = collect(b)["gpus"][0]
    # sysfs keeps what the kernel said; assembly weighs other sources first.
    assert gpu["numa_node"] is None
    assert gpu["numa_node_reported"] == "-1"
    assert gpu["local_cpus"] == "2-3,6-7"


def test_collect_nic_numa_minus_one_resolved_from_local_cpus():
    b = two_socket_host()
    b.device("0000:0c:00.0", ["pci0000:00"], "0x020700", MELLANOX, numa_node="-1", local_cpus="2-3",
             infiniband=["mlx5_0"], net=["ib0"])
    b.device("0000:0d:00.0", ["pci0000:00"], "0x020000", "0x14e4", numa_node="-1", local_cpus="0-7",
             net=["eno1"])
    nics = collect(b)["nics"]
    assert nics[0]["vendor"] == "mellanox"
    assert nics[0]["interfaces"] == ["ib0", "mlx5_0"]
    assert nics[0]["numa_node"] == 1
    # local_cpulist covering both nodes says nothing about the node.
    assert nics[1]["vendor"] == "broadcom"
    assert nics[1]["numa_node"] is None


def test_collect_pcie_unknown_speed_and_zero_width_are_none():
    b = two_socket_host()
    b.device("0000:01:00.0", ["pci0000:00"], "0x030200", NVIDIA, width=(0, 16), speed=("Unknown", "32.0 GT/s PCIe"))
    assert collect(b)["gpus"][0]["pcie"] == {
        "current_speed": None, "max_speed": "32.0 GT/s PCIe", "current_width": None, "max_width": 16}


@pytest.mark.parametrize("a, b, expected", [
    ("0000:03:00.0", "0000:04:00.0", "PIX"),   # same switch
    ("0000:03:00.0", "0000:07:00.0", "PXB"),   # nested switches
    ("0000:03:00.0", "0000:08:00.0", "PHB"),   # through the host bridge
    ("0000:03:00.0", "0000:41:00.0", "NODE"),  # other host bridge, same node
    ("0000:03:00.0", "0000:81:00.0", "SYS"),   # other socket
    ("0000:41:00.0", "0000:81:00.0", "SYS"),
])
def test_collect_pci_tree_link_classes(a, b, expected):
    links = collect(pci_tree_host())["links"]
    assert links[a][b] == expected
    assert links[b][a] == expected


def test_pci_link_class_unknown_path_falls_back_to_numa():
    path = {"host_bridge": "sys/devices/pci0000:00", "bridges": []}
    assert sysfs_pci.pci_link_class(None, path, 0, 0) == "NODE"
    assert sysfs_pci.pci_link_class(None, path, 0, 1) == "SYS"
    assert sysfs_pci.pci_link_class(None, path, None, None) == "SYS"


def test_collect_kfd_xgmi_links_override_pci_tree():
    b = two_socket_host()
    b.device("0000:c1:00.0", ["pci0000:c0", "0000:c0:01.1"], "0x038000", AMD)
    b.device("0000:c5:00.0", ["pci0000:c4", "0000:c4:01.1"], "0x038000", AMD)
    b.device("0000:c9:00.0", ["pci0000:c8", "0000:c8:01.1"], "0x038000", AMD)
    kfd_node(b, 0, {"cpu_cores_count": 8, "simd_count": 0, "location_id": 0})
    kfd_node(b, 1, {"simd_count": 4, "location_id": 0xC100, "domain": 0}, [(2, 0), (11, 2), (11, 2)])
    kfd_node(b, 2, {"simd_count": 4, "location_id": 0xC500, "domain": 0}, [(2, 0), (11, 1), (11, 1)])
    kfd_node(b, 3, {"simd_count": 4, "location_id": 0xC900, "domain": 0}, [(2, 0), (11, 7)])
    facts = collect(b)
    assert facts["links"]["0000:c1:00.0"] == {"0000:c5:00.0": "XGMI2", "0000:c9:00.0": "NODE"}
    assert facts["links"]["0000:c5:00.0"]["0000:c1:00.0"] == "XGMI2"
    assert any("KFD node 7, which is not a GPU" in w for w in facts["warnings"])


def test_collect_amd_index_follows_kfd_order_not_pci_order():
    # ROCm numbers GPUs in KFD node order; here node 1 is the highest bus id,
    # and KFD node 10 sorts after node 2 numerically, not as text.
    b = two_socket_host()
    b.device("0000:c1:00.0", ["pci0000:c0", "0000:c0:01.1"], "0x038000", AMD)
    b.device("0000:c5:00.0", ["pci0000:c4", "0000:c4:01.1"], "0x038000", AMD)
    b.device("0000:c9:00.0", ["pci0000:c8", "0000:c8:01.1"], "0x038000", AMD)
    kfd_node(b, 0, {"cpu_cores_count": 8, "simd_count": 0, "location_id": 0})
    kfd_node(b, 1, {"simd_count": 4, "location_id": 0xC900, "domain": 0})
    kfd_node(b, 2, {"simd_count": 4, "location_id": 0xC100, "domain": 0})
    kfd_node(b, 10, {"simd_count": 4, "location_id": 0xC500, "domain": 0})
    facts = collect(b)
    index = dict((g["pci_bus_id"], g["index"]) for g in facts["gpus"])
    assert index == {"0000:c9:00.0": 0, "0000:c1:00.0": 1, "0000:c5:00.0": 2}
    assert not [w for w in facts["warnings"] if "KFD" in w]


def test_collect_amd_index_unknown_without_kfd_topology():
    b = two_socket_host()
    b.device("0000:c1:00.0", ["pci0000:c0", "0000:c0:01.1"], "0x038000", AMD)
    facts = collect(b)
    assert facts["gpus"][0]["index"] is None
    assert any("0000:c1:00.0 is not in the KFD topology" in w for w in facts["warnings"])


def test_pci_device_without_interfaces_of_other_class_is_no_nic():
    files = {"/sys/bus/pci/devices/0000:00:1f.0/class": "0x060100\n",
             "/sys/bus/pci/devices/0000:00:1f.0/vendor": "0x8086\n"}
    assert sysfs_pci.pci_devices(_reader(files), [], [])[1] == []


@pytest.mark.parametrize("path", machines_with_pcie_links(), ids=machine_id)
def test_pci_tree_links_recorded_machines_match_expected_pcie_links(path):
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture

    with open(os.path.join(path, "expected.yml")) as handle:
        expected = yaml.safe_load(handle)
    part = sysfs.collect(CaptureReader(load_capture(os.path.join(path, "capture.yml"))))
    # The PCI tree alone, without the XGMI links KFD adds on top.
    assert sysfs_pci.pci_tree_links(part["gpus"], part["numa_nodes"]) == expected["pcie_links"]


def test_collect_live_reader_on_real_tree_matches_replay(tmp_path):
    capture = pci_tree_host().capture()
    write_tree(capture, tmp_path)
    live = sysfs.collect(LiveReader(root=str(tmp_path)))
    replay = sysfs.collect(CaptureReader(capture))
    assert live == replay
    assert live["links"]["0000:03:00.0"]["0000:04:00.0"] == "PIX"
