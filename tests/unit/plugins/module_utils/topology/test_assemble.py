# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Topology assembly: recorded machines, source precedence, warnings."""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.summary import summary
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi import QUERY_COMMAND
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi_topo import TOPO_COMMAND

from ansible_collections.gpufleet.numa.tests.fixtures.two_gpu_host import QUERY_TEXT, TOPO_TEXT, two_gpu_host
from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import SysfsBuilder

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
MACHINE_DIRS = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(MACHINES, "*", "capture.yml")))
FACT_KEYS = {"schema_version", "hostname", "sources", "sockets", "numa_nodes", "smt_siblings",
             "gpus", "nics", "links", "warnings"}
GPU_KEYS = {"id", "index", "pci_bus_id", "uuid", "name", "vendor", "numa_node", "local_cpus",
            "memory_mb", "mig_mode", "pcie", "memory_numa_node", "pci_class"}
NODE_KEYS = {"id", "cpus", "memory_mb", "distances", "socket", "kind", "usable_cpus"}
NVIDIA = "0x10de"


def machine_id(path):
    return os.path.basename(path)


@pytest.fixture(scope="module", params=MACHINE_DIRS, ids=machine_id)
def machine(request):
    with open(os.path.join(request.param, "expected.yml")) as handle:
        expected = yaml.safe_load(handle)
    return request.param, facts_from_capture(os.path.join(request.param, "capture.yml")), expected


def test_facts_from_capture_recorded_machines_have_every_schema_key(machine):
    facts = machine[1]
    assert set(facts) == FACT_KEYS
    assert facts["schema_version"] == 1
    assert "capture" in facts["sources"]
    for gpu in facts["gpus"]:
        assert set(gpu) == GPU_KEYS
        assert set(gpu["pcie"]) == {"current_speed", "max_speed", "current_width", "max_width"}
    for node in facts["numa_nodes"]:
        assert set(node) == NODE_KEYS


def test_facts_from_capture_recorded_machines_match_expected_gpus(machine):
    facts, expected = machine[1], machine[2]
    got = dict((g["id"], g) for g in facts["gpus"])
    assert sorted(got) == sorted(expected["gpus"])
    for gpu_id, fields in expected["gpus"].items():
        for field, value in fields.items():
            assert got[gpu_id][field] == value, "%s %s" % (gpu_id, field)


def test_facts_from_capture_recorded_machines_match_expected_links(machine):
    facts, expected = machine[1], machine[2]
    want = expected.get("links") or {}
    for a, row in want.items():
        for b, cls in row.items():
            assert facts["links"].get(a, {}).get(b) == cls, "%s -> %s" % (a, b)
    assert sorted(facts["links"]) == sorted(want)
    for a, row in facts["links"].items():
        assert sorted(row) == sorted(want[a]), a


def test_facts_from_capture_recorded_machines_match_expected_numa_nodes_and_nics(machine):
    # expected.yml may state fields of NUMA nodes (by id) and NICs (by id); those it states must match
    facts, expected = machine[1], machine[2]
    nodes = dict((n["id"], n) for n in facts["numa_nodes"])
    if expected.get("numa_nodes"):
        assert sorted(nodes) == sorted(expected["numa_nodes"])
    for node_id, fields in (expected.get("numa_nodes") or {}).items():
        for field, value in fields.items():
            assert nodes[node_id][field] == value, "node %s %s" % (node_id, field)
    nics = dict((n["id"], n) for n in facts["nics"])
    if "nics" in expected:
        assert sorted(nics) == sorted(expected["nics"])
    for nic_id, fields in (expected.get("nics") or {}).items():
        for field, value in fields.items():
            assert nics[nic_id][field] == value, "NIC %s %s" % (nic_id, field)


def test_facts_from_capture_unknown_numa_is_null_with_warning(machine):
    # Asserts for every machine: the GPUs left without a NUMA node are
    # exactly those expected.yml (written by hand) says, each has its own
    # "NUMA node unknown" warning, no GPU with a node gets one, and every
    # node given is one of the host's.
    facts, expected = machine[1], machine[2]
    null = sorted(g["id"] for g in facts["gpus"] if g["numa_node"] is None)
    assert null == sorted(gid for gid, fields in (expected.get("gpus") or {}).items() if fields["numa_node"] is None)
    warned = sorted(
        g["id"] for g in facts["gpus"]
        if any(re.match(r"^GPU %s(:| reports numa_node \S+;) NUMA node unknown" % re.escape(g["id"]), w)
               for w in facts["warnings"])
    )
    assert warned == null
    node_ids = [n["id"] for n in facts["numa_nodes"]]
    assert all(g["numa_node"] in node_ids for g in facts["gpus"] if g["numa_node"] is not None)


def test_facts_from_capture_gpus_sorted_by_bus_id_then_index(machine):
    facts = machine[1]
    keys = [(g["pci_bus_id"] is None, g["pci_bus_id"] or "", g["index"]) for g in facts["gpus"]]
    assert keys == sorted(keys)


def test_facts_from_capture_topo_matrix_only():
    facts = facts_from_capture({"capture_version": 1, "commands": {TOPO_COMMAND: TOPO_TEXT}})
    assert facts["sources"] == ["nvidia-smi", "capture"]
    assert [(g["id"], g["index"], g["pci_bus_id"], g["numa_node"], g["local_cpus"]) for g in facts["gpus"]] == [
        ("GPU0", 0, None, 0, "0-1,4-5"), ("GPU1", 1, None, 1, "2-3,6-7")]
    assert facts["numa_nodes"] == [
        {"id": 0, "cpus": "0-1,4-5", "memory_mb": None, "distances": {}, "socket": None,
         "kind": "cpu", "usable_cpus": None},
        {"id": 1, "cpus": "2-3,6-7", "memory_mb": None, "distances": {}, "socket": None,
         "kind": "cpu", "usable_cpus": None},
    ]
    assert facts["sockets"] == [] and facts["smt_siblings"] == []
    assert facts["links"] == {"GPU0": {"GPU1": "NV4"}, "GPU1": {"GPU0": "NV4"}}


def test_assemble_sysfs_and_nvidia_smi_merge_by_bus_id_and_index():
    capture = two_gpu_host().capture(commands={TOPO_COMMAND: TOPO_TEXT, QUERY_COMMAND: QUERY_TEXT})
    facts = facts_from_capture(capture)
    assert facts["sources"] == ["sysfs", "nvidia-smi", "capture"]
    first = facts["gpus"][0]
    assert first["id"] == "0000:01:00.0"
    assert first["index"] == 0
    assert first["uuid"] == "GPU-0b1c2d3e-aaaa-bbbb-cccc-000000000001"
    assert first["name"] == "NVIDIA RTX A6000"
    assert first["memory_mb"] == 49140
    assert first["numa_node"] == 0
    # nvidia-smi's NV4 beats the PCI tree's SYS.
    assert facts["links"] == {"0000:01:00.0": {"0000:81:00.0": "NV4"}, "0000:81:00.0": {"0000:01:00.0": "NV4"}}
    assert facts["sockets"] == [{"id": 0, "numa_nodes": [0], "cpus": "0-1,4-5"},
                                {"id": 1, "numa_nodes": [1], "cpus": "2-3,6-7"}]
    assert facts["warnings"] == []


def test_assemble_sysfs_only_links_from_pci_tree_and_derived_index():
    facts = facts_from_capture(two_gpu_host().capture())
    assert facts["sources"] == ["sysfs", "capture"]
    assert [g["index"] for g in facts["gpus"]] == [0, 1]
    assert [g["name"] for g in facts["gpus"]] == [None, None]
    assert facts["links"]["0000:01:00.0"]["0000:81:00.0"] == "SYS"


def test_assemble_numa_disagreement_warns_and_keeps_sysfs():
    topo = TOPO_TEXT.replace("0-1,4-5\t0\t", "0-1,4-5\t1\t")
    facts = facts_from_capture(two_gpu_host().capture(commands={TOPO_COMMAND: topo}))
    assert facts["gpus"][0]["numa_node"] == 0
    assert any("0000:01:00.0" in w and "disagree" in w for w in facts["warnings"])


def test_assemble_numa_minus_one_taken_from_nvidia_smi_then_local_cpus():
    facts = facts_from_capture(two_gpu_host(numa=("-1", "-1")).capture(commands={TOPO_COMMAND: TOPO_TEXT}))
    assert [g["numa_node"] for g in facts["gpus"]] == [0, 1]
    # nvidia-smi told: nothing to warn about the sysfs -1.
    assert not [w for w in facts["warnings"] if "unknown" in w]

    facts = facts_from_capture(two_gpu_host(numa=("-1", "0")).capture())
    assert facts["gpus"][0]["numa_node"] == 0
    assert any("0000:01:00.0 reports numa_node -1; NUMA node 0 taken from its local CPUs" in w
               for w in facts["warnings"])


def test_assemble_numa_unknown_everywhere_is_null_never_zero():
    b = two_gpu_host(numa=("-1", "1"))
    b.files["/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/local_cpulist"] = "0-7\n"
    facts = facts_from_capture(b.capture())
    gpu = facts["gpus"][0]
    assert gpu["numa_node"] is None
    assert "GPU 0000:01:00.0 reports numa_node -1; NUMA node unknown" in facts["warnings"]
    assert any("unknown NUMA node" in line for line in summary(facts))


def test_assemble_narrow_pcie_link_warns_lower_speed_does_not():
    b = two_gpu_host()
    b.device("0000:02:00.0", ["pci0000:00", "0000:00:02.0"], "0x030200", NVIDIA, width=(8, 16),
             speed=("2.5 GT/s PCIe", "16.0 GT/s PCIe"))
    facts = facts_from_capture(b.capture())
    narrow = [w for w in facts["warnings"] if "PCIe link" in w]
    assert narrow == ["GPU 0000:02:00.0 PCIe link runs at x8 of x16 (check slot, riser or BIOS bifurcation)"]


def test_assemble_bmc_vga_is_not_a_gpu():
    b = SysfsBuilder().node(0, "0-3").online("0-3")
    b.device("0000:03:00.0", ["pci0000:00", "0000:00:1c.0", "0000:02:00.0"], "0x030000", "0x1a03",
             numa_node="-1", device="0x2000")
    facts = facts_from_capture(b.capture())
    assert facts["gpus"] == [] and facts["links"] == {}
    assert facts["warnings"] == []


def test_assemble_no_gpu_host_has_numa_facts_and_empty_gpus():
    b = SysfsBuilder().node(0, "0-3", memory_kb=8 << 20, distances=[10]).online("0-3")
    for cpu in range(4):
        b.cpu(cpu, 0, str(cpu))
    b.device("0000:00:03.0", ["pci0000:00"], "0x020000", "0x1af4", numa_node="-1", local_cpus="0-3",
             net=["eth0"], width=(0, 0), speed=("Unknown", "Unknown"))
    facts = facts_from_capture(b.capture(hostname="plain"))
    assert facts["gpus"] == [] and facts["links"] == {}
    assert facts["numa_nodes"] == [{"id": 0, "cpus": "0-3", "memory_mb": 8192, "distances": {0: 10}, "socket": 0,
                                   "kind": "cpu", "usable_cpus": None}]
    assert facts["nics"][0]["interfaces"] == ["eth0"]
    assert facts["nics"][0]["numa_node"] == 0
    assert summary(facts)[:2] == [
        "plain: 1 NUMA node(s), 1 socket(s), 0 GPU(s); sources: sysfs, capture",
        "NUMA node 0 (socket 0): CPUs 0-3; memory 8192 MB",
    ]


def test_assemble_gpu_on_bus_missing_from_nvidia_smi_warns():
    query = QUERY_TEXT.splitlines()[0] + "\n"
    facts = facts_from_capture(two_gpu_host().capture(commands={QUERY_COMMAND: query}))
    assert any("0000:81:00.0 is on the PCI bus but nvidia-smi does not list it" in w for w in facts["warnings"])


GH200 = os.path.join(MACHINES, "gh200_grace_hopper", "capture.yml")


def _gh200():
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture

    return load_capture(GH200)


def test_facts_gpu_put_on_its_memory_node_by_sysfs_keeps_cpu_locality():
    # a kernel that gives the GPU's PCI device its memory node: that node is the GPU's memory, not its home
    capture = _gh200()
    capture["files"]["/sys/bus/pci/devices/0009:01:00.0/numa_node"] = "1\n"
    facts = facts_from_capture(capture)
    (gpu,) = facts["gpus"]
    assert (gpu["numa_node"], gpu["memory_numa_node"]) == (0, 1)
    assert ("GPU 0009:01:00.0: sysfs puts it on NUMA node 1, which has no CPUs (memory only); taken as the GPU's "
            "memory node, not its CPU locality") in facts["warnings"]
    assert [n["kind"] for n in facts["numa_nodes"][:3]] == ["cpu", "gpu_memory", "memory"]


def test_facts_gpu_on_memory_node_without_other_source_takes_node_of_its_local_cpus():
    capture = _gh200()
    capture["files"]["/sys/bus/pci/devices/0009:01:00.0/numa_node"] = "1\n"
    del capture["commands"]
    (gpu,) = facts_from_capture(capture)["gpus"]
    assert (gpu["numa_node"], gpu["memory_numa_node"]) == (0, 1)


def test_facts_topo_matrix_only_gpu_numa_id_is_a_memory_node():
    capture = {"capture_version": 1, "commands": {TOPO_COMMAND: _gh200()["commands"][TOPO_COMMAND]}}
    facts = facts_from_capture(capture)
    nodes = [(n["id"], n["cpus"], n["kind"]) for n in facts["numa_nodes"]]
    assert nodes == [(0, "0-71", "cpu"), (1, "", "gpu_memory")]
    assert [(g["id"], g["numa_node"], g["memory_numa_node"]) for g in facts["gpus"]] == [("GPU0", 0, 1)]
    assert facts["nics"] == [{"id": "NIC0", "pci_bus_id": None, "vendor": "mellanox", "interfaces": ["mlx5_0"],
                              "numa_node": 0, "local_cpus": None, "pcie": dict.fromkeys(
                                  ("current_speed", "max_speed", "current_width", "max_width")),
                              "gpu_links": {"GPU0": "NODE"},
                              "net_interfaces": [], "rdma_devices": ["mlx5_0"], "pci_class": None}]


def test_facts_nic_column_numa_node_null_when_its_gpus_disagree():
    text = ("\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tSYS\tPIX\tSYS\t0-3\t0\n"
            "GPU1\tSYS\t X \tNODE\tSYS\t4-7\t1\n"
            "NIC0\tPIX\tNODE\t X \tSYS\n"
            "NIC1\tSYS\tSYS\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n")
    facts = facts_from_capture({"capture_version": 1, "commands": {TOPO_COMMAND: text}})
    assert [(n["id"], n["interfaces"], n["numa_node"], n["gpu_links"]) for n in facts["nics"]] == [
        ("NIC0", ["mlx5_0"], None, {"GPU0": "PIX", "GPU1": "NODE"}),
        ("NIC1", ["mlx5_1"], None, {"GPU0": "SYS", "GPU1": "SYS"}),
    ]


def test_facts_plain_text_capture_with_tabs_keeps_its_nic_columns(tmp_path):
    # `nvidia-smi topo -m > host.txt`, tab-separated, with a NIC column and legend
    path = tmp_path / "host.txt"
    path.write_text("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
                    "GPU0\t X \tNV4\tPIX\t0-7\t0\t\tN/A\nGPU1\tNV4\t X \tSYS\t8-15\t1\t\tN/A\n"
                    "NIC0\tPIX\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    facts = facts_from_capture(str(path))
    assert [(n["id"], n["interfaces"], n["numa_node"], n["gpu_links"]) for n in facts["nics"]] == [
        ("NIC0", ["mlx5_0"], 0, {"GPU0": "PIX", "GPU1": "SYS"})]
    assert [g["memory_numa_node"] for g in facts["gpus"]] == [None, None]
