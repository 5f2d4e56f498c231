# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""sysfs.collect over small sysfs captures and over a real directory tree."""

from __future__ import annotations


import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_common
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_limits
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_pci
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader

from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import SysfsBuilder, write_tree

NVIDIA, AMD, INTEL, ASPEED, MATROX, MELLANOX = "0x10de", "0x1002", "0x8086", "0x1a03", "0x102b", "0x15b3"


def two_socket_host():
    """Two sockets, one NUMA node each, SMT pairs (0,4) (1,5) ... ."""
    b = SysfsBuilder()
    b.node(0, "0-1,4-5", memory_kb=2048 * 1024, distances=[10, 21])
    b.node(1, "2-3,6-7", memory_kb=1024 * 1024, distances=[21, 10])
    for cpu in range(8):
        core = cpu % 4
        b.cpu(cpu, 0 if core < 2 else 1, "%d,%d" % (core, core + 4))
    b.online("0-7")
    return b


def collect(builder):
    return sysfs.collect(CaptureReader(builder.capture()))


def test_collect_numa_nodes_memory_distances_sockets():
    facts = collect(two_socket_host())
    assert facts["numa_nodes"] == [
        {"id": 0, "cpus": "0-1,4-5", "memory_mb": 2048, "distances": {0: 10, 1: 21}, "socket": 0, "usable_cpus": None},
        {"id": 1, "cpus": "2-3,6-7", "memory_mb": 1024, "distances": {0: 21, 1: 10}, "socket": 1, "usable_cpus": None},
    ]
    assert facts["sockets"] == [
        {"id": 0, "numa_nodes": [0], "cpus": "0-1,4-5"},
        {"id": 1, "numa_nodes": [1], "cpus": "2-3,6-7"},
    ]
    assert facts["smt_siblings"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert facts["warnings"] == []


def test_collect_offline_cpus_left_out_with_warning():
    b = two_socket_host().online("0-3,6-7")
    # The kernel drops offline CPUs from the node's cpulist, but a capture
    # taken mid-hotplug may still list them: they must not be bound to.
    facts = collect(b)
    assert facts["numa_nodes"][0]["cpus"] == "0-1"
    assert facts["offline_cpus"] == "4-5"
    assert facts["smt_siblings"] == [[0], [1], [2, 6], [3, 7]]
    assert any("CPUs 4-5 are offline" in w for w in facts["warnings"])


def test_collect_memory_only_node_has_empty_cpus_and_no_socket():
    b = two_socket_host()
    b.node(2, "", memory_kb=512 * 1024, distances=[30, 30, 10])
    b.files["/sys/devices/system/node/node0/distance"] = "10 21 30\n"
    b.files["/sys/devices/system/node/node1/distance"] = "21 10 30\n"
    facts = collect(b)
    node2 = facts["numa_nodes"][2]
    assert node2 == {"id": 2, "cpus": "", "memory_mb": 512, "distances": {0: 30, 1: 30, 2: 10}, "socket": None,
                     "usable_cpus": None}


def test_collect_bad_distance_row_warns_and_leaves_empty():
    b = two_socket_host()
    b.files["/sys/devices/system/node/node1/distance"] = "21\n"
    facts = collect(b)
    assert facts["numa_nodes"][1]["distances"] == {}
    assert any("node1/distance" in w for w in facts["warnings"])


def test_collect_bad_cpulist_warns_naming_file():
    b = two_socket_host()
    b.files["/sys/devices/system/node/node1/cpulist"] = "2-x\n"
    facts = collect(b)
    assert facts["numa_nodes"][1]["cpus"] is None
    assert any(w.startswith("/sys/devices/system/node/node1/cpulist") for w in facts["warnings"])


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


def test_collect_no_pci_data_is_not_found():
    facts = sysfs.collect(CaptureReader({"capture_version": 1}))
    assert facts["found"] is False
    assert facts["gpus"] == [] and facts["numa_nodes"] == [] and facts["links"] == {}


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


def test_node_for_cpus_needs_exactly_one_covering_node():
    nodes = [{"id": 0, "cpus": "0-3"}, {"id": 1, "cpus": "4-7"}, {"id": 2, "cpus": ""}]
    assert sysfs_common.node_for_cpus([1, 2], nodes) == 0
    assert sysfs_common.node_for_cpus([3, 4], nodes) is None
    assert sysfs_common.node_for_cpus([], nodes) is None


def test_collect_live_reader_on_real_tree_matches_replay(tmp_path):
    capture = pci_tree_host().capture()
    write_tree(capture, tmp_path)
    live = sysfs.collect(LiveReader(root=str(tmp_path)))
    replay = sysfs.collect(CaptureReader(capture))
    assert live == replay
    assert live["links"]["0000:03:00.0"]["0000:04:00.0"] == "PIX"


def test_collect_this_machine_live():
    facts = sysfs.collect(LiveReader())
    with open("/sys/devices/system/cpu/online") as handle:
        online = parse_cpulist(handle.read())
    assert facts["found"] is True
    covered = sorted(c for node in facts["numa_nodes"] for c in parse_cpulist(node["cpus"]))
    assert covered == online


def kfd_node(b, node, props, links=()):
    base = "/sys/class/kfd/kfd/topology/nodes/%d" % node
    b.files[base + "/properties"] = "".join("%s %d\n" % kv for kv in props.items())
    for i, (kind, to) in enumerate(links):
        b.files["%s/io_links/%d/properties" % (base, i)] = "type %d\nnode_from %d\nnode_to %d\nweight 15\n" % (
            kind, node, to)


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


# ---------------------------------------------------------------- usable CPUs (containers, cpusets, isolcpus)

CGROUP_ROOT = "/sys/fs/cgroup/cpuset.cpus.effective"
CGROUP_SLICE = "/sys/fs/cgroup/system.slice/cpuset.cpus.effective"
STATUS = "Name:\tpython3\nUid:\t0\t0\t0\t0\nCpus_allowed:\tff\nCpus_allowed_list:\t%s\nMems_allowed_list:\t0-1\n"


def _usable(b, **kwargs):
    facts = sysfs.collect(CaptureReader(b.capture()), **kwargs)
    return [n["usable_cpus"] for n in facts["numa_nodes"]], facts["warnings"]


def test_collect_usable_cpus_unknown_without_any_limit_file():
    assert _usable(two_socket_host()) == ([None, None], [])


def test_collect_usable_cpus_slice_cpuset_before_the_root_one():
    b = two_socket_host()
    b.files[CGROUP_ROOT] = "0-7\n"
    b.files[CGROUP_SLICE] = "0,2-3,6\n"
    usable, warnings = _usable(b)
    assert usable == ["0", "2-3,6"]
    assert warnings == ["CPUs 1,4-5,7 are not usable by services: outside %s (cgroup cpuset); they are left out "
                        "of usable_cpus" % CGROUP_SLICE]
    # another slice (the option cgroup_slice) that has no cpuset of its own: the root's applies
    assert _usable(b, cgroup_slice="vllm.slice")[0] == ["0-1,4-5", "2-3,6-7"]
    assert _usable(b, cgroup_slice="/system.slice/")[0] == ["0", "2-3,6"]


def test_collect_usable_cpus_process_allowed_list_and_isolated_cpus():
    b = two_socket_host()
    b.files["/proc/self/status"] = STATUS % "0-5"
    b.files["/sys/devices/system/cpu/isolated"] = "1,5\n"
    usable, warnings = _usable(b)
    assert usable == ["0,4", "2-3"]
    assert warnings == [
        "CPUs 6-7 are not usable by services: outside Cpus_allowed_list of /proc/self/status; they are left out of "
        "usable_cpus",
        "CPUs 1,5 are not usable by services: isolated (/sys/devices/system/cpu/isolated, isolcpus=); they are "
        "left out of usable_cpus",
    ]


def test_collect_usable_cpus_empty_isolated_list_means_every_cpu():
    b = two_socket_host()
    b.files["/sys/devices/system/cpu/isolated"] = "\n"
    assert _usable(b) == (["0-1,4-5", "2-3,6-7"], [])


@pytest.mark.parametrize("path, text, problem", [
    (CGROUP_ROOT, "0-x\n", "/sys/fs/cgroup/cpuset.cpus.effective: bad element '0-x'"),
    ("/proc/self/status", "Name:\tx\n", "/proc/self/status: no Cpus_allowed_list line"),
    ("/proc/self/status", STATUS % "0-99999999", "/proc/self/status: CPU 99999999"),
    ("/sys/devices/system/cpu/isolated", "junk\n", "/sys/devices/system/cpu/isolated: bad element 'junk'"),
])
def test_collect_usable_cpus_unreadable_limit_warns_and_limits_nothing(path, text, problem):
    b = two_socket_host()
    b.files[path] = text
    usable, warnings = _usable(b)
    assert usable in ([None, None], ["0-1,4-5", "2-3,6-7"])
    assert any(w.startswith(problem) for w in warnings), warnings


def test_collect_usable_cpus_never_below_a_memory_only_node():
    b = two_socket_host()
    b.node(2, "", memory_kb=1024)
    b.files[CGROUP_ROOT] = "0-3\n"
    assert _usable(b)[0] == ["0-1", "2-3", ""]


@pytest.mark.parametrize("value", ["../../etc", "a b", "x\n", "/sys/../x", 5])
def test_check_cgroup_slice_refuses_what_is_no_cgroup_path(value):
    with pytest.raises(ValueError, match="cgroup_slice"):
        sysfs_limits.check_cgroup_slice(value)
