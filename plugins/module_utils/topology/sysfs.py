# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What Linux sysfs says about NUMA nodes, CPUs, GPUs, NICs and the PCI tree.

collect(reader) reads through the reader seam (topology_reader) and never
raises: a file that is missing or unreadable leaves its value None, a file
whose content makes no sense adds a warning naming the file. Works for any
GPU vendor; NVML and nvidia-smi only refine what is found here.

This module reads NUMA nodes, CPUs and sockets; sysfs_pci.py the PCI tree
(GPUs, NICs, links, AMD's KFD topology); sysfs_limits.py what limits the
services' CPUs (cgroup cpusets, isolcpus=); sysfs_common.py what they share.
Standard library only (runs on targets).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_common import (
    CPU_DIR,
    NODE_DIR,
    cpulist_or_warn,
    int_or_none,
    note_once,
    stripped,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_limits import (
    DEFAULT_SLICE,
    apply_limits,
    cpu_limits,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_pci import PCI_DIR, collect_pci

MAX_NUMA_NODES = 1024  # Linux's own limit (CONFIG_NODES_SHIFT 10)
_NODE_NAME = re.compile(r"^node(\d{1,9})$", re.ASCII)
_CPU_NAME = re.compile(r"^cpu(\d{1,9})$", re.ASCII)
_MEMTOTAL = re.compile(r"MemTotal:\s*(\d+)\s*kB")

PER_CPU_ONLINE = ("%s/online is missing: which CPUs are online was read from each cpuN/online" % CPU_DIR)


def _node_memory_mb(reader, base, warnings):
    meminfo = reader.read(base + "/meminfo")
    if meminfo is None:
        return None
    match = _MEMTOTAL.search(meminfo)
    if match:
        return int(match.group(1)) // 1024
    warnings.append("%s/meminfo has no MemTotal line" % base)
    return None


def _node_distances(reader, base, ids, warnings):
    """{node id: distance} from the node's distance row ({} when unreadable)."""
    row = reader.read(base + "/distance")
    if row is None:
        return {}
    values = row.split()
    if len(values) == len(ids) and all(v.isdigit() for v in values):
        return dict(zip(ids, (int(v) for v in values)))
    warnings.append(
        "%s/distance %s does not hold one distance per node (%d nodes)" % (base, excerpt(row.strip()), len(ids))
    )
    return {}


def numa_nodes(reader, warnings, online_cpus=None):
    """NUMA nodes: [{id, cpus (cpulist), memory_mb, distances}] sorted by id."""
    names = reader.listdir(NODE_DIR) or []
    ids = sorted(int(m.group(1)) for m in (_NODE_NAME.match(n) for n in names) if m)
    if len(ids) > MAX_NUMA_NODES:
        warnings.append("%s: more than %d NUMA nodes; the rest is not read" % (NODE_DIR, MAX_NUMA_NODES))
        ids = ids[:MAX_NUMA_NODES]
    nodes = []
    for node_id in ids:
        base = "%s/node%d" % (NODE_DIR, node_id)
        cpus = cpulist_or_warn(reader, base + "/cpulist", warnings, base + "/cpumap")
        if cpus is not None and online_cpus is not None:
            cpus = [c for c in cpus if c in online_cpus]
        memory_mb = _node_memory_mb(reader, base, warnings)
        nodes.append({
            "id": node_id,
            "cpus": None if cpus is None else format_cpulist(cpus),
            "memory_mb": memory_mb,
            "distances": _node_distances(reader, base, ids, warnings),
        })
    return nodes


def _online_per_cpu(reader, listed, warnings):
    """Online CPUs from each cpuN/online when the global list is missing
    (None when no CPU has the file). cpu0 often has none: it cannot go
    offline, so a CPU without the file is online."""
    states = dict((cpu, stripped(reader.read("%s/cpu%d/online" % (CPU_DIR, cpu)))) for cpu in listed)
    if not any(state is not None for state in states.values()):
        return None
    note_once(warnings, PER_CPU_ONLINE)
    return [cpu for cpu in listed if states[cpu] != "0"]


def _packages(reader, cpus, warnings):
    """{cpu: package id}: physical_package_id; where a CPU has none (or -1,
    as older ARM kernels write), the groups of core_siblings are numbered
    in order of their first CPU, as hwloc does."""
    package, groups = {}, {}
    for cpu in cpus:
        base = "%s/cpu%d/topology" % (CPU_DIR, cpu)
        pkg = int_or_none(reader.read(base + "/physical_package_id"))
        if pkg is not None and pkg >= 0:
            package[cpu] = pkg
            continue
        group = cpulist_or_warn(reader, base + "/core_siblings_list", warnings, base + "/core_siblings")
        if group:
            groups[cpu] = tuple(group)
    if groups:
        numbered = dict((group, n) for n, group in enumerate(sorted(set(groups.values()))))
        warnings.append("CPUs %s have no physical_package_id: their sockets are numbered from core_siblings"
                        % format_cpulist(groups))
        for cpu, group in groups.items():
            package[cpu] = numbered[group]
    return package


def cpu_topology(reader, warnings):
    """Online/offline CPUs, package (socket) of each CPU, SMT sibling groups."""
    online = cpulist_or_warn(reader, CPU_DIR + "/online", warnings)
    names = reader.listdir(CPU_DIR) or []
    listed = sorted(int(m.group(1)) for m in (_CPU_NAME.match(n) for n in names) if m)
    if online is None and listed:
        online = _online_per_cpu(reader, listed, warnings) or listed
    online_set = None if online is None else set(online)
    offline = [c for c in listed if online_set is not None and c not in online_set]
    siblings = set()
    for cpu in (online or []):
        base = "%s/cpu%d/topology" % (CPU_DIR, cpu)
        threads = cpulist_or_warn(reader, base + "/thread_siblings_list", warnings, base + "/thread_siblings")
        if threads:
            # Offline siblings are left out: nothing can be bound to them.
            group = tuple(t for t in threads if online_set is None or t in online_set)
            if group:
                siblings.add(group)
    return {
        "online": online,
        "offline": offline,
        "package": _packages(reader, online or [], warnings),
        "smt_siblings": [list(g) for g in sorted(siblings)],
    }


def _check_node_cpus(reader, nodes, online, warnings):
    """Warn about what the firmware got wrong: CPUs listed in several NUMA
    nodes (an SRAT that puts every CPU in every node), and online CPUs in
    no node (an offline node whose CPUs stayed online): those sit in no
    node and no socket, and nothing is placed on them."""
    owners = {}
    for node in nodes:
        for cpu in parse_cpulist(node["cpus"]) if node["cpus"] else []:
            owners.setdefault(cpu, []).append(node["id"])
    shared = sorted(cpu for cpu, ids in owners.items() if len(ids) > 1)
    if shared:
        ids = sorted(set(i for cpu in shared for i in owners[cpu]))
        warnings.append("CPUs %s are listed in several NUMA nodes (%s): the firmware's NUMA table (SRAT) is wrong; "
                        "placement on these nodes is not socket-local" % (format_cpulist(shared), ", ".join(map(str, ids))))
    if len(nodes) < 1 or not online:
        return
    stray = sorted(set(online) - set(owners))
    if stray:
        node_online = cpulist_or_warn(reader, NODE_DIR + "/online", warnings)
        listed = set(n["id"] for n in nodes)
        gone = sorted(set(node_online or []) ^ listed) if node_online is not None else []
        warnings.append("CPUs %s are online but in no NUMA node%s; they belong to no node and no socket and are "
                        "left out" % (format_cpulist(stray), " (node(s) %s offline or missing)" % ", ".join(
                            map(str, gone)) if gone else ""))


def _sockets(nodes, package, warnings):
    """Each node's socket (node["socket"]) and the sockets: [{id, numa_nodes, cpus}]."""
    sockets = {}
    for node in nodes:
        node_cpus = parse_cpulist(node["cpus"]) if node["cpus"] else []
        packages = sorted(set(package[c] for c in node_cpus if c in package))
        if len(packages) > 1:
            warnings.append("NUMA node %d has CPUs of several sockets %s" % (node["id"], packages))
        node["socket"] = packages[0] if packages else None
        for pkg in packages:
            sockets.setdefault(pkg, {"id": pkg, "numa_nodes": [], "cpus": []})
            sockets[pkg]["numa_nodes"].append(node["id"])
    for cpu, pkg in package.items():
        if pkg in sockets:
            sockets[pkg]["cpus"].append(cpu)
    return [{"id": pkg, "numa_nodes": sorted(sockets[pkg]["numa_nodes"]), "cpus": format_cpulist(sockets[pkg]["cpus"])}
            for pkg in sorted(sockets)]


def collect(reader, cgroup_slice=DEFAULT_SLICE):
    """Everything sysfs says, as plain dicts (see module docstring).

    Returns {numa_nodes, sockets, smt_siblings, offline_cpus, gpus, nics,
    links, warnings, found} where found is True when any sysfs data was
    read at all (a capture of nvidia-smi output alone has none).
    cgroup_slice: the cgroup (below /sys/fs/cgroup) whose cpuset limits the
    services' CPUs (sysfs_limits.cpu_limits).
    """
    warnings = []
    cpus = cpu_topology(reader, warnings)
    online_set = None if cpus["online"] is None else set(cpus["online"])
    nodes = numa_nodes(reader, warnings, online_set)
    if not nodes and cpus["online"]:
        # A kernel built without NUMA has no node directories: one node.
        nodes = [{"id": 0, "cpus": format_cpulist(cpus["online"]), "memory_mb": None, "distances": {}}]
    if cpus["offline"]:
        warnings.append("CPUs %s are offline; they are left out of the NUMA nodes" % format_cpulist(cpus["offline"]))
    _check_node_cpus(reader, nodes, cpus["online"], warnings)
    apply_limits(nodes, cpu_limits(reader, warnings, cgroup_slice) if nodes else [], warnings)
    socket_list = _sockets(nodes, cpus["package"], warnings)
    pci = collect_pci(reader, nodes, warnings)
    found = bool(nodes or cpus["online"] or pci.gpus or pci.nics or reader.listdir(PCI_DIR))
    return {
        "numa_nodes": nodes,
        "sockets": socket_list,
        "smt_siblings": cpus["smt_siblings"],
        "offline_cpus": format_cpulist(cpus["offline"]),
        "gpus": pci.gpus,
        "nics": pci.nics,
        "links": pci.links,
        "warnings": warnings,
        "found": found,
    }
