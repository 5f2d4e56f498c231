# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""One topology facts dict (docs/facts.md, schema 1) from every source.

assemble() merges the per-source results (the partial dicts of sysfs,
NVML and nvidia-smi) into one facts dict; gather.py reads the sources,
capture.py replays a recorded capture, summary.py renders facts for a
human.

Precedence when sources disagree:
- identity (index, uuid, name, memory, MIG): NVML > nvidia-smi;
- NUMA node: sysfs numa_node > NVML > nvidia-smi NUMA affinity > the one
  NUMA node whose CPUs cover the GPU's local CPUs; a disagreement is a
  warning, never silent;
- local CPUs: sysfs > NVML > nvidia-smi;
- links: NVML > nvidia-smi > sysfs PCI tree (per GPU pair).
Standard library only (runs on targets).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_common
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.gpu_table import (
    PCIE_KEYS,
    GpuTable,
    merge_links,
    record_id,
    sort_key,
)

# The topology dict's schema (docs/facts.md); placement/facts.py reads it from here.
SCHEMA_VERSION = 1


def _dedupe(lines):
    seen = set()
    out = []
    for line in lines:
        if line not in seen:
            seen.add(line)
            out.append(line)
    return out


def _numa_nodes_from_partials(partials):
    cpus = {}
    for partial in partials:
        for node in partial.get("numa_nodes") or []:
            if node.get("id") is None:
                continue
            have = cpus.setdefault(node["id"], set())
            try:
                have.update(parse_cpulist(node.get("cpus") or ""))
            except ValueError:
                pass
    return [
        {"id": nid, "cpus": format_cpulist(cpus[nid]), "memory_mb": None, "distances": {}, "socket": None,
         "usable_cpus": None}
        for nid in sorted(cpus)
    ]


def _resolve_numa(record, gid, nodes, warnings, cpu_sets=None):
    numa = record["numa"]
    node = numa[0].value if numa else None
    others = [said for said in numa if said.value != node]
    if others:
        warnings.append(
            "GPU %s: sources disagree on its NUMA node (%s); using %s from %s"
            % (gid, ", ".join("%s says %s" % (said.source, said.value) for said in numa), node, numa[0].source)
        )
    cpus = record["cpus"][0].value if record["cpus"] else None
    reported = record["numa_reported"]
    if node is None and cpus:
        try:
            guess = sysfs_common.node_for_cpus(parse_cpulist(cpus), nodes, cpu_sets)
        except ValueError:
            guess = None
        if guess is not None:
            node = guess
            why = "reports numa_node %s" % reported if reported is not None else "has no NUMA node from any source"
            warnings.append("GPU %s %s; NUMA node %d taken from its local CPUs %s" % (gid, why, node, cpus))
    if node is None:
        if reported is not None:
            warnings.append("GPU %s reports numa_node %s; NUMA node unknown" % (gid, reported))
        else:
            warnings.append("GPU %s: NUMA node unknown (no source gives it)" % gid)
    elif nodes and node not in [n["id"] for n in nodes]:
        warnings.append("GPU %s: NUMA node %d is not among this host's NUMA nodes" % (gid, node))
    return node, cpus


_NIC_VENDOR_PREFIXES = (("mlx", "mellanox"), ("bnxt", "broadcom"), ("irdma", "intel"), ("hfi", "intel"),
                        ("qedr", "qlogic"), ("efa", "amazon"))
_LOCAL_LINKS = ("PIX", "PXB", "PHB", "NODE")  # one NUMA node: below the same host bridge, or beside it


def _sysfs_nic_links(links, table):
    """A sysfs NIC's gpu_links (by bus id) keyed by the facts' GPU ids."""
    out = {}
    for bus_id, cls in (links or {}).items():
        record = table.by_key.get(bus_id)
        if record is not None:
            out[record_id(record)] = cls
    return out


def _merge_matrix_nics(nics, matrix_nics, table, gpus):
    """The NIC columns of `nvidia-smi topo -m` in the facts' nics.

    A column whose device (the NIC legend's name, `NIC0: mlx5_0`) is an
    interface of a NIC sysfs found adds its GPU links to that NIC; any other
    becomes a NIC of its own, id `NIC<n>` (or the device name old drivers
    print), bus id unknown, NUMA node the one node of the GPUs it is
    PIX/PXB/PHB/NODE to (null when they disagree or none is)."""
    node_of = dict((g["id"], g["numa_node"]) for g in gpus)
    for column in matrix_nics or []:
        gpu_links = {}
        for label, cls in (column.get("links") or {}).items():
            record = table.by_key.get(label)
            if record is not None:
                gpu_links[record_id(record)] = cls
        gpu_links = dict((g["id"], gpu_links[g["id"]]) for g in gpus if g["id"] in gpu_links)
        device = column.get("device")
        known = [n for n in nics if device and device in (n.get("interfaces") or [])]
        if known:
            known[0]["gpu_links"] = gpu_links
            continue
        near = set(node_of.get(gid) for gid, cls in gpu_links.items() if cls in _LOCAL_LINKS)
        vendor = next((name for prefix, name in _NIC_VENDOR_PREFIXES if (device or "").startswith(prefix)), "other")
        nics.append({
            "id": column["name"],
            "pci_bus_id": None,
            "vendor": vendor,
            "interfaces": [device] if device else [],
            "numa_node": near.pop() if len(near) == 1 and None not in near else None,
            "local_cpus": None,
            "pcie": dict.fromkeys(PCIE_KEYS),
            "gpu_links": gpu_links,
        })


def _away_from_memory_nodes(record, gid, memory_only, warnings):
    """A source that puts a GPU on a NUMA node without CPUs names the GPU's
    own memory (Grace Hopper: sysfs numa_node or NVML's memory affinity
    can): that node becomes its memory_numa_node, and its CPU locality comes
    from the other sources or its local CPUs."""
    kept = []
    for said in record["numa"]:
        source, node = said
        if node in memory_only:
            if record["memory_numa"] is None:
                record["memory_numa"] = node
            warnings.append("GPU %s: %s puts it on NUMA node %d, which has no CPUs (memory only); taken as the "
                            "GPU's memory node, not its CPU locality" % (gid, source, node))
        else:
            kept.append(said)
    record["numa"] = kept


def _node_kind(node, gpus):
    """cpu, memory (no CPUs: CXL, HBM, a placeholder), gpu_memory (a GPU's own memory), null when the CPUs are unknown."""
    if node.get("cpus") is None:
        return None
    if node["cpus"]:
        return "cpu"
    if any(g["memory_numa_node"] == node["id"] for g in gpus):
        return "gpu_memory"
    return "memory"


def _narrow_link_warning(kind, gid, pcie):
    if not pcie:
        return None
    cur, top = pcie.get("current_width"), pcie.get("max_width")
    if cur and top and cur < top:
        return "%s %s PCIe link runs at x%d of x%d (check slot, riser or BIOS bifurcation)" % (kind, gid, cur, top)
    return None


def _sources(sys_part, nvml_part, smi_query_part, smi_topo_part, captured):
    sources = []
    if sys_part.get("found"):
        sources.append("sysfs")
    if nvml_part and (nvml_part.get("gpus") or nvml_part.get("links")):
        sources.append("nvml")
    if smi_query_part is not None or smi_topo_part is not None:
        sources.append("nvidia-smi")
    if captured:
        sources.append("capture")
    return sources


def _gpu_table(sys_part, ordered, warnings):
    """Every source's GPUs merged into one table, sysfs first."""
    table = GpuTable()
    for gpu in sys_part.get("gpus") or []:
        table.merge(gpu, "sysfs")
    # NVML and nvidia-smi number NVIDIA GPUs in PCI order: give the sysfs
    # records that index so that sources without bus ids can be matched.
    nvidia = [r for r in table.records if r["vendor"] == "nvidia"]
    for position, record in enumerate(sorted(nvidia, key=sort_key)):
        record["index"] = position
        record["index_derived"] = True
    for source, partial in ordered:
        if not partial:
            continue
        warnings.extend("%s: %s" % (source.split()[0], w) for w in partial.get("warnings") or [])
        for gpu in partial.get("gpus") or []:
            if gpu.get("pci_bus_id") is None and gpu.get("index") is None:
                warnings.append("%s: a GPU without bus id or index was ignored" % source)
                continue
            table.merge(gpu, source)
    # NVIDIA GPUs on the bus that the driver-level sources do not list.
    driver_sources = [s for s, p in ordered[:2] if p and p.get("gpus")]
    if driver_sources:
        for record in table.records:
            if record["vendor"] == "nvidia" and record["seen_by"] == ["sysfs"]:
                warnings.append(
                    "GPU %s is on the PCI bus but %s does not list it (driver not bound, or hidden)"
                    % (record["pci_bus_id"], " and ".join(driver_sources))
                )
    return table


def _nodes(sys_part, ordered, table):
    """NUMA nodes from sysfs, else from the other sources (and the GPUs' own memory nodes)."""
    nodes = [dict(n) for n in sys_part.get("numa_nodes") or []]
    if not nodes:
        nodes = _numa_nodes_from_partials([partial for dummy_source, partial in ordered if partial])
        # A GPU's own memory node (GPU NUMA ID) is a node without CPUs.
        known = set(n["id"] for n in nodes)
        for memory_node in sorted(set(r["memory_numa"] for r in table.records if r["memory_numa"] is not None)):
            if nodes and memory_node not in known:
                nodes.append({"id": memory_node, "cpus": "", "memory_mb": None, "distances": {}, "socket": None,
                              "usable_cpus": None})
        nodes.sort(key=lambda n: n["id"])
    return nodes


def _gpus(table, nodes, warnings):
    memory_only = set(n["id"] for n in nodes if n.get("cpus") == "")
    gpus = []
    cpu_sets = sysfs_common.node_cpu_sets(nodes)
    for record in sorted(table.records, key=sort_key):
        gid = record_id(record)
        if memory_only:
            _away_from_memory_nodes(record, gid, memory_only, warnings)
        node, cpus = _resolve_numa(record, gid, nodes, warnings, cpu_sets)
        pcie = record["pcie"] or {}
        gpu = {
            "id": gid,
            # NVIDIA: NVML/nvidia-smi index (PCI order); AMD: ROCm index (KFD order).
            "index": record["index"] if record["vendor"] in ("nvidia", "amd") else None,
            "pci_bus_id": record["pci_bus_id"],
            "uuid": record["uuid"],
            "name": record["name"],
            "vendor": record["vendor"],
            "numa_node": node,
            "local_cpus": cpus,
            "memory_mb": record["memory_mb"],
            "mig_mode": record["mig_mode"],
            "pcie": dict((k, pcie.get(k)) for k in PCIE_KEYS),
            "memory_numa_node": record["memory_numa"],
            "pci_class": record["pci_class"],  # sysfs class ("0x030200"); null when no source read it
        }
        narrow = _narrow_link_warning("GPU", gid, gpu["pcie"])
        if narrow:
            warnings.append(narrow)
        gpus.append(gpu)
    return gpus


def _links(sys_part, ordered, table, gpus, warnings):
    links = {}
    merge_links(links, sys_part.get("links"), table, "sysfs", warnings)
    for source, partial in reversed(ordered):
        if partial:
            merge_links(links, partial.get("links"), table, source.split()[0], warnings)
    # Both directions, then rows and columns in GPU order. Plain loops and
    # comprehensions: a 1,000-GPU host has a million links.
    for a, row in list(links.items()):
        for b, cls in row.items():
            back = links.get(b)
            if back is None:
                links[b] = {a: cls}
            elif a not in back:
                back[a] = cls
    ids = [g["id"] for g in gpus]
    return {a: {b: links[a][b] for b in ids if b in links[a]} for a in ids if links.get(a)}


def _nics(sys_part, smi_topo_part, table, gpus, warnings):
    nics = []
    for nic in sys_part.get("nics") or []:
        narrow = _narrow_link_warning("NIC", nic["id"], nic.get("pcie"))
        if narrow:
            warnings.append(narrow)
        nics.append(dict(nic, gpu_links=_sysfs_nic_links(nic.get("gpu_links"), table)))
    _merge_matrix_nics(nics, (smi_topo_part or {}).get("nics"), table, gpus)
    for nic in nics:
        # A NIC known from a topo -m column only: its legend names the RDMA device.
        nic.setdefault("net_interfaces", [])
        nic.setdefault("rdma_devices", list(nic.get("interfaces") or []))
        nic.setdefault("pci_class", None)
    return nics


def assemble(sysfs_part=None, nvml_part=None, smi_query_part=None, smi_topo_part=None,
             hostname=None, captured=False, extra_warnings=None):
    """Merge per-source results into one facts dict (docs/facts.md schema 1).

    sysfs_part: sysfs.collect(); the others: partial dicts of the NVML and
    nvidia-smi parsers (or None when the source did not answer).
    """
    sys_part = sysfs_part or {}
    warnings = list(sys_part.get("warnings") or [])
    sources = _sources(sys_part, nvml_part, smi_query_part, smi_topo_part, captured)
    ordered = [("nvml", nvml_part), ("nvidia-smi", smi_query_part), ("nvidia-smi topo", smi_topo_part)]
    table = _gpu_table(sys_part, ordered, warnings)
    nodes = _nodes(sys_part, ordered, table)
    gpus = _gpus(table, nodes, warnings)
    links = _links(sys_part, ordered, table, gpus, warnings)
    nics = _nics(sys_part, smi_topo_part, table, gpus, warnings)
    for node in nodes:
        node.setdefault("socket", None)
    facts = {
        "schema_version": SCHEMA_VERSION,
        "hostname": hostname,
        "sources": sources,
        "sockets": [dict(s) for s in sys_part.get("sockets") or []],
        "numa_nodes": [
            {
                "id": n["id"],
                "cpus": n.get("cpus"),
                "memory_mb": n.get("memory_mb"),
                "distances": dict(n.get("distances") or {}),
                "socket": n.get("socket"),
                "kind": _node_kind(n, gpus),
                "usable_cpus": n.get("usable_cpus"),
            }
            for n in nodes
        ],
        "smt_siblings": [list(s) for s in sys_part.get("smt_siblings") or []],
        "gpus": gpus,
        "nics": nics,
        "links": links,
        "warnings": _dedupe(warnings + list(extra_warnings or [])),
    }
    if not nodes and gpus:
        facts["warnings"].append("no source gives this host's NUMA nodes")
    return facts
