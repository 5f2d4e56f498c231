# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""sysfs.collect over small sysfs captures and over a real directory tree."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader

from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import two_socket_host, collect


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


def test_collect_no_pci_data_is_not_found():
    facts = sysfs.collect(CaptureReader({"capture_version": 1}))
    assert facts["found"] is False
    assert facts["gpus"] == [] and facts["numa_nodes"] == [] and facts["links"] == {}


def test_collect_this_machine_live():
    facts = sysfs.collect(LiveReader())
    with open("/sys/devices/system/cpu/online") as handle:
        online = parse_cpulist(handle.read())
    assert facts["found"] is True
    covered = sorted(c for node in facts["numa_nodes"] for c in parse_cpulist(node["cpus"]))
    assert covered == online
