# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""hwloc is the oracle: for every recorded sysfs tree (machines and
layouts), lstopo reads the tree as its fsroot and its reading is compared
with numa_facts' field by field: packages, NUMA nodes, CPUs per node,
memory, distances, SMT and PCI locality. lstopo missing is a failure
(scripts/setup installs Debian's hwloc), not a skip.

Deliberate differences (DIFFERENCES below, each with its reason) are the
only ones allowed."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture

from ansible_collections.gpufleet.numa.tests.fixtures import hwloc_oracle

FIXTURES = fixture_paths.FIXTURES
TREES = sorted(glob.glob(os.path.join(FIXTURES, "machines", "*", "capture.yml"))
               + glob.glob(os.path.join(FIXTURES, "sysfs_layouts", "*", "capture.yml")))

# fixture -> {field: why numa_facts reads it differently from hwloc}
DIFFERENCES = {
    # hwloc keeps the first of two nodes with the same CPUs and drops the
    # other; numa_facts keeps both as sysfs lists them, and warns (placement
    # must not trust either to be socket-local).
    "srat_all_cpus_every_node": {"nodes": "hwloc drops node 1, whose CPUs duplicate node 0's; numa_facts keeps "
                                 "both and warns"},
    # The node that is offline: hwloc adds the CPUs that sit in no node to
    # node 0's cpuset (it needs every PU in some node); numa_facts leaves
    # them out of every node (nothing is placed on them) and warns.
    "offline_node_cpus_online": {"nodes": "hwloc gives the stray CPUs 4-7 to node 0; numa_facts to no node",
                                 "packages": "socket 1 has no node in numa_facts"},
    # rocm-smi's report gives NUMA nodes but no per-CPU topology: hwloc
    # refuses a tree without /sys/devices/system/cpu/cpu*/topology, numa_facts
    # reads the nodes from their cpulists.
    "amd_4gpu_pcie_4numa": {"all": "hwloc needs cpu*/topology; numa_facts reads node cpulists alone"},
}


def _lstopo():
    path = shutil.which("lstopo") or shutil.which("lstopo-no-graphics")
    if path is None:
        pytest.fail("lstopo is not installed: install Debian's hwloc package (scripts/setup does)")
    return path


def _has_sysfs(capture):
    return any(path.startswith("/sys/devices/system/node/") for path in capture.get("files") or {})


@pytest.fixture(scope="module")
def lstopo():
    return _lstopo()


def _ours(facts):
    nodes = dict((n["id"], {"cpus": set(parse_cpulist(n["cpus"] or "")), "memory_mb": n["memory_mb"]})
                 for n in facts["numa_nodes"])
    packages = dict((s["id"], set(parse_cpulist(s["cpus"] or ""))) for s in facts["sockets"])
    distances = dict((n["id"], dict((int(k), v) for k, v in n["distances"].items()))
                     for n in facts["numa_nodes"] if n["distances"])
    return nodes, packages, distances


def _compare(name, facts, theirs):
    allowed = DIFFERENCES.get(name, {})
    nodes, packages, distances = _ours(facts)
    problems = []
    if "nodes" not in allowed:
        # hwloc leaves local_memory out both when it is 0 and when no meminfo
        # says: compare those as 0 (numa_facts tells 0 from unknown).
        want = dict((i, (format_cpulist(n["cpus"]), n["memory_mb"] or 0)) for i, n in theirs["nodes"].items())
        got = dict((i, (format_cpulist(n["cpus"]), n["memory_mb"] or 0)) for i, n in nodes.items())
        if got != want:
            problems.append("NUMA nodes (cpus, memory_mb): hwloc %s, numa_facts %s" % (want, got))
    if "packages" not in allowed:
        want = dict((i, format_cpulist(c)) for i, c in theirs["packages"].items())
        got = dict((i, format_cpulist(c)) for i, c in packages.items())
        if got != want:
            problems.append("packages: hwloc %s, numa_facts %s" % (want, got))
    if "distances" not in allowed and theirs["distances"] and distances != theirs["distances"]:
        problems.append("distances: hwloc %s, numa_facts %s" % (theirs["distances"], distances))
    smt = sorted(tuple(s) for s in facts["smt_siblings"])
    if "smt" not in allowed and theirs["smt"] and smt != theirs["smt"]:
        problems.append("SMT: hwloc %s, numa_facts %s" % (theirs["smt"][:8], smt[:8]))
    if "pci" not in allowed:
        for device in list(facts["gpus"]) + list(facts["nics"]):
            bus_id = device.get("pci_bus_id")
            if bus_id not in theirs["pci"] or device["numa_node"] is None:
                continue
            where = nodes.get(device["numa_node"], {}).get("cpus")
            if where and theirs["pci"][bus_id] != where:
                problems.append("PCI %s locality: hwloc %s, numa_facts node %s (%s)" % (
                    bus_id, format_cpulist(theirs["pci"][bus_id]), device["numa_node"], format_cpulist(where)))
    return problems


@pytest.mark.parametrize("path", TREES, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_numa_facts_reads_recorded_tree_as_hwloc_does(path, lstopo, tmp_path):
    capture = load_capture(path)
    if not _has_sysfs(capture):
        return  # an nvidia-smi paste: no tree for hwloc to read
    name = os.path.basename(os.path.dirname(path))
    hwloc_oracle.write_tree(capture, tmp_path / "root")
    if "all" in DIFFERENCES.get(name, {}):
        with pytest.raises(AssertionError, match="failed to find sysfs cpu topology"):
            hwloc_oracle.lstopo_xml(tmp_path / "root", lstopo)
        return
    theirs = hwloc_oracle.read_hwloc(hwloc_oracle.lstopo_xml(tmp_path / "root", lstopo))
    problems = _compare(name, facts_from_capture(path), theirs)
    assert not problems, "\n".join(problems)


def test_oracle_sees_the_nul_bug_of_the_old_reading(lstopo, tmp_path):
    """The oracle has teeth: a tree where numa_facts once read no CPU at
    all (NUL-ended lists) is read by hwloc with every CPU."""
    path = os.path.join(FIXTURES, "sysfs_layouts", "kunpeng920_nul_lists", "capture.yml")
    hwloc_oracle.write_tree(load_capture(path), tmp_path / "root")
    theirs = hwloc_oracle.read_hwloc(hwloc_oracle.lstopo_xml(tmp_path / "root", lstopo))
    assert format_cpulist(set().union(*(n["cpus"] for n in theirs["nodes"].values()))) == "0-15"
