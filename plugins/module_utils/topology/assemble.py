# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""One topology facts dict (docs/facts.md, schema 1) from every source.

gather(reader, pynvml=None) reads sysfs, NVML and nvidia-smi through the
reader seam and returns (facts, raw NVML record); assemble() merges the
per-source results; facts_from_capture() replays a recorded capture;
summary() renders facts as lines for a human.

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

import socket

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvidia_smi
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import (
    CAPTURE_MAX_BYTES,
    COMMAND_TIMEOUT,
    CaptureReader,
    LiveReader,
    RecordingReader,
    load_capture,
)

SCHEMA_VERSION = 1
_IDENTITY_FIELDS = ("uuid", "name", "memory_mb", "mig_mode", "pci_class")
_PCIE_KEYS = ("current_speed", "max_speed", "current_width", "max_width")


def _partial_key(gpu):
    if gpu.get("pci_bus_id"):
        return gpu["pci_bus_id"]
    if gpu.get("index") is not None:
        return "GPU%d" % gpu["index"]
    return None


def _pcie_known(pcie):
    return bool(pcie) and any(pcie.get(k) is not None for k in _PCIE_KEYS)


def _sort_key(record):
    return (record["pci_bus_id"] is None, record["pci_bus_id"] or "", record["index"] if record["index"] is not None else -1)


def _dedupe(lines):
    seen = set()
    out = []
    for line in lines:
        if line not in seen:
            seen.add(line)
            out.append(line)
    return out


class _GpuTable(object):
    """GPU records being merged, findable by bus id and by NVIDIA index."""

    def __init__(self):
        self.records = []
        self.by_key = {}  # any key a source used ("0000:1a:00.0", "GPU3") -> record

    def find(self, gpu):
        bus = gpu.get("pci_bus_id")
        if bus:
            for record in self.records:
                if record["pci_bus_id"] == bus:
                    return record
        if gpu.get("index") is not None:
            for record in self.records:
                if record["index"] == gpu["index"] and record["vendor"] == "nvidia":
                    # An index only matches a record whose bus id it cannot contradict.
                    if not bus or record["pci_bus_id"] is None:
                        return record
        return None

    def add(self, gpu, source):
        record = {
            "index": gpu.get("index"),
            "index_derived": False,
            "pci_bus_id": gpu.get("pci_bus_id"),
            "uuid": None,
            "name": None,
            "vendor": gpu.get("vendor") or "nvidia",
            "memory_mb": None,
            "mig_mode": None,
            "pci_class": None,
            "pcie": None,
            "numa": [],  # (source, node) in precedence order
            "cpus": [],  # (source, cpulist) in precedence order
            "seen_by": [],
            "numa_reported": gpu.get("numa_node_reported"),
            "memory_numa": None,  # the GPU's own memory node (Grace: a NUMA node without CPUs)
        }
        self.records.append(record)
        return record

    def merge(self, gpu, source):
        record = self.find(gpu)
        if record is None:
            record = self.add(gpu, source)
        if gpu.get("index") is not None and (record["index"] is None or record["index_derived"]):
            record["index"] = gpu["index"]
            record["index_derived"] = False
        if record["pci_bus_id"] is None and gpu.get("pci_bus_id"):
            record["pci_bus_id"] = gpu["pci_bus_id"]
        for field in _IDENTITY_FIELDS:
            if record[field] is None and gpu.get(field) is not None:
                record[field] = gpu[field]
        if not _pcie_known(record["pcie"]) and _pcie_known(gpu.get("pcie")):
            record["pcie"] = dict((k, gpu["pcie"].get(k)) for k in _PCIE_KEYS)
        if gpu.get("numa_node") is not None:
            record["numa"].append((source, gpu["numa_node"]))
        if gpu.get("local_cpus"):
            record["cpus"].append((source, gpu["local_cpus"]))
        if record["memory_numa"] is None and gpu.get("memory_numa_node") is not None:
            record["memory_numa"] = gpu["memory_numa_node"]
        record["seen_by"].append(source)
        key = _partial_key(gpu)
        if key:
            self.by_key[key] = record
        return record


def _record_id(record):
    if record["pci_bus_id"]:
        return record["pci_bus_id"]
    return "GPU%d" % record["index"]


def _merge_links(links, partial_links, table, source, warnings):
    # Work per link is two dict lookups: a 1,000-GPU matrix has a million.
    ids = dict((key, (id(record), _record_id(record))) for key, record in table.by_key.items())
    for key_a, row in (partial_links or {}).items():
        rec_a = ids.get(key_a)
        if rec_a is None:
            warnings.append("%s: link row for unknown GPU %s ignored" % (source, key_a))
            continue
        out = None
        for key_b, cls in (row or {}).items():
            rec_b = ids.get(key_b)
            if rec_b is None or rec_b[0] == rec_a[0] or not cls:
                continue
            if out is None:
                out = links.setdefault(rec_a[1], {})
            out[rec_b[1]] = cls


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
    node = numa[0][1] if numa else None
    others = [(s, n) for s, n in numa if n != node]
    if others:
        warnings.append(
            "GPU %s: sources disagree on its NUMA node (%s); using %s from %s"
            % (gid, ", ".join("%s says %s" % (s, n) for s, n in numa), node, numa[0][0])
        )
    cpus = record["cpus"][0][1] if record["cpus"] else None
    reported = record["numa_reported"]
    if node is None and cpus:
        try:
            guess = sysfs.node_for_cpus(parse_cpulist(cpus), nodes, cpu_sets)
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
            out[_record_id(record)] = cls
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
                gpu_links[_record_id(record)] = cls
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
            "pcie": dict.fromkeys(_PCIE_KEYS),
            "gpu_links": gpu_links,
        })


def _away_from_memory_nodes(record, gid, memory_only, warnings):
    """A source that puts a GPU on a NUMA node without CPUs names the GPU's
    own memory (Grace Hopper: sysfs numa_node or NVML's memory affinity
    can): that node becomes its memory_numa_node, and its CPU locality comes
    from the other sources or its local CPUs."""
    kept = []
    for source, node in record["numa"]:
        if node in memory_only:
            if record["memory_numa"] is None:
                record["memory_numa"] = node
            warnings.append("GPU %s: %s puts it on NUMA node %d, which has no CPUs (memory only); taken as the "
                            "GPU's memory node, not its CPU locality" % (gid, source, node))
        else:
            kept.append((source, node))
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


def assemble(sysfs_part=None, nvml_part=None, smi_query_part=None, smi_topo_part=None,
             hostname=None, captured=False, extra_warnings=None):
    """Merge per-source results into one facts dict (docs/facts.md schema 1).

    sysfs_part: sysfs.collect(); the others: partial dicts of the NVML and
    nvidia-smi parsers (or None when the source did not answer).
    """
    sys_part = sysfs_part or {}
    warnings = list(sys_part.get("warnings") or [])
    sources = []
    if sys_part.get("found"):
        sources.append("sysfs")
    if nvml_part and (nvml_part.get("gpus") or nvml_part.get("links")):
        sources.append("nvml")
    if smi_query_part is not None or smi_topo_part is not None:
        sources.append("nvidia-smi")
    if captured:
        sources.append("capture")

    table = _GpuTable()
    for gpu in sys_part.get("gpus") or []:
        table.merge(gpu, "sysfs")
    # NVML and nvidia-smi number NVIDIA GPUs in PCI order: give the sysfs
    # records that index so that sources without bus ids can be matched.
    nvidia = [r for r in table.records if r["vendor"] == "nvidia"]
    for position, record in enumerate(sorted(nvidia, key=_sort_key)):
        record["index"] = position
        record["index_derived"] = True

    ordered = [("nvml", nvml_part), ("nvidia-smi", smi_query_part), ("nvidia-smi topo", smi_topo_part)]
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
    node_ids = [n["id"] for n in nodes]
    memory_only = set(n["id"] for n in nodes if n.get("cpus") == "")

    gpus = []
    cpu_sets = sysfs.node_cpu_sets(nodes)
    for record in sorted(table.records, key=_sort_key):
        gid = _record_id(record)
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
            "pcie": dict((k, pcie.get(k)) for k in _PCIE_KEYS),
            "memory_numa_node": record["memory_numa"],
            "pci_class": record["pci_class"],  # sysfs class ("0x030200"); null when no source read it
        }
        narrow = _narrow_link_warning("GPU", gid, gpu["pcie"])
        if narrow:
            warnings.append(narrow)
        gpus.append(gpu)

    links = {}
    _merge_links(links, sys_part.get("links"), table, "sysfs", warnings)
    for source, partial in reversed(ordered):
        if partial:
            _merge_links(links, partial.get("links"), table, source.split()[0], warnings)
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
    links = {a: {b: links[a][b] for b in ids if b in links[a]} for a in ids if links.get(a)}

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
    if not node_ids and gpus:
        facts["warnings"].append("no source gives this host's NUMA nodes")
    return facts


def gather(reader, pynvml=None, use_nvml=True, use_nvidia_smi=True, hostname=None, captured=False, record=False,
           cgroup_slice=sysfs.DEFAULT_SLICE):
    """Read every source through reader; return (facts, raw NVML record).

    pynvml: the imported NVML binding on a live host (None: none, or in
    replay the capture's `nvml:` record is used). nvidia-smi runs only when
    NVML did not list the GPUs and sysfs shows NVIDIA GPUs (or has no PCI
    data at all, as in a pasted matrix), unless record asks for everything.
    """
    sys_part = sysfs.collect(reader, sysfs.check_cgroup_slice(cgroup_slice))
    raw_nvml = None
    if use_nvml:
        raw_nvml = nvml.collect(pynvml) if pynvml is not None else reader.nvml()
    nvml_part = nvml.parse(raw_nvml) if raw_nvml else None

    smi_query = smi_topo = None
    has_nvidia = any(g["vendor"] == "nvidia" for g in sys_part["gpus"])
    nvml_listed = bool(nvml_part and nvml_part.get("gpus"))
    if use_nvidia_smi and (record or (not nvml_listed and (has_nvidia or not sys_part["found"]))):
        text = reader.run(nvidia_smi.QUERY_COMMAND)
        if text is not None:
            smi_query = nvidia_smi.parse_query_gpu(text)
        text = reader.run(nvidia_smi.TOPO_COMMAND)
        if text is not None:
            smi_topo = nvidia_smi.parse_topo_matrix(text)
        if nvml_listed:
            # Recorded for the capture only: NVML already said it all.
            smi_query = smi_topo = None

    extra = list(getattr(reader, "errors", []) or [])
    facts = assemble(sys_part, nvml_part, smi_query, smi_topo, hostname=hostname, captured=captured,
                     extra_warnings=extra)
    return facts, raw_nvml


def gather_live(root="/", runner=None, which=None, nvidia_smi_binary="nvidia-smi", pynvml=None,
                use_nvml=True, record=False, hostname=None, timeout=COMMAND_TIMEOUT, cgroup_slice=sysfs.DEFAULT_SLICE):
    """Facts of the running machine; with record=True also its capture.

    timeout: seconds each nvidia-smi call may run; one that does not
    answer in time is killed and reported in the warnings.
    Returns (facts, capture or None). Raises ValueError when root is not
    an existing directory.
    """
    reader = LiveReader(root=root, runner=runner, which=which, binaries={"nvidia-smi": nvidia_smi_binary},
                        timeout=timeout)
    hostname = hostname or socket.gethostname()
    if record:
        recorder = RecordingReader(reader, hostname=hostname)
        facts, raw = gather(recorder, pynvml=pynvml, use_nvml=use_nvml, hostname=hostname, record=True,
                            cgroup_slice=cgroup_slice)
        recorder.record_nvml(raw)
        return facts, recorder.capture
    facts = gather(reader, pynvml=pynvml, use_nvml=use_nvml, hostname=hostname, cgroup_slice=cgroup_slice)[0]
    return facts, None


def facts_from_capture(capture, hostname=None, max_bytes=CAPTURE_MAX_BYTES, cgroup_slice=sysfs.DEFAULT_SLICE):
    """Facts from a capture (a dict, a file path or YAML/JSON text, or the
    plain output of nvidia-smi topo -m).

    Raises ValueError naming the capture and the problem when it is not a
    valid capture (or larger than max_bytes). hostname overrides the
    capture's own.
    """
    data = load_capture(capture, max_bytes=max_bytes)
    reader = CaptureReader(data)
    facts = gather(reader, hostname=hostname or data.get("hostname"), captured=True, cgroup_slice=cgroup_slice)[0]
    return facts


def summary(facts):
    """Human-readable lines: per NUMA node its CPUs, memory and GPUs; then
    GPUs without a NUMA node; then warnings."""
    lines = []
    gpus = facts.get("gpus") or []
    nodes = facts.get("numa_nodes") or []
    lines.append(
        "%s: %d NUMA node(s), %d socket(s), %d GPU(s); sources: %s"
        % (facts.get("hostname") or "host", len(nodes), len(facts.get("sockets") or []), len(gpus),
           ", ".join(facts.get("sources") or []) or "none")
    )

    def gpu_line(gpu):
        index = "-" if gpu["index"] is None else str(gpu["index"])
        return "  GPU %s %s %s" % (index, gpu["pci_bus_id"] or gpu["id"], gpu["name"] or gpu["vendor"])

    for node in nodes:
        memory = "unknown" if node["memory_mb"] is None else "%d MB" % node["memory_mb"]
        sock = "" if node["socket"] is None else " (socket %d)" % node["socket"]
        cpus = node["cpus"] if node["cpus"] else ("none (memory only)" if node["cpus"] == "" else "unknown")
        if node.get("kind") == "gpu_memory":
            cpus = "none (a GPU's memory)"
        usable = node.get("usable_cpus")
        if node["cpus"] and usable is not None and usable != node["cpus"]:
            cpus += " (usable by services: %s)" % (usable or "none")
        lines.append("NUMA node %d%s: CPUs %s; memory %s" % (node["id"], sock, cpus, memory))
        for gpu in gpus:
            if gpu["numa_node"] == node["id"]:
                lines.append(gpu_line(gpu))
    known = set(n["id"] for n in nodes)
    stray = [g for g in gpus if g["numa_node"] is None or g["numa_node"] not in known]
    if stray:
        lines.append("GPUs with unknown NUMA node:")
        lines.extend(gpu_line(g) for g in stray)
    for warning in facts.get("warnings") or []:
        lines.append("warning: %s" % warning)
    return lines
