# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""One host's numa_topology facts written in the formats other tools read.

- gres_conf(facts, host): Slurm's gres.conf, one `Name=gpu` line per GPU
  with the cores of the GPU's NUMA node. Slurm numbers cores its own way
  (gres.conf(5), "Cores"): a logical core index, core 0 the first core of
  the first socket, as hwloc's `Core L#` - not OS CPU ids. The index is
  computed here from smt_siblings (one entry per physical core) ordered by
  socket, then by the core's first CPU, which is hwloc's logical order.
- nccl_topology_xml(facts, host): an NCCL topology file (NCCL_TOPO_FILE),
  the `<system>` tree NCCL dumps: per NUMA node a `<cpu>`, below it the
  GPUs' and RDMA NICs' `<pci>` elements, devices that share a PCIe switch
  (PIX/PXB) under one bridge. Only what is true for every process on the
  host is written; NCCL fills the attributes a file leaves out (dev, rank,
  gdr, NIC speed) from what it detects.

Both return {"text": ..., "warnings": [...]} and raise ValueError naming
the host and the field when the facts cannot be exported: Unexportable (a
ValueError) when well-formed facts lack what the format needs (a GPU
without a PCI bus id, index or NUMA node), its .reason saying so in a few
words. host_exports(facts, host) writes both formats and says which one
was not written for that reason, for export_topology.yml. Pure functions,
standard library only.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show

# Compute capability (NCCL's sm = major*10 + minor) by GPU name, for the
# names the recorded machines and common servers carry; unknown: left out.
_SM_BY_NAME = ((r"\bB200\b|\bGB200\b", 100), (r"\bH100\b|\bH200\b|\bH800\b|\bGH200\b", 90),
               (r"\bL40S?\b|\bL4\b|RTX 40\d0|RTX 6000 Ada", 89), (r"\bA100\b|\bA800\b|\bA30\b", 80),
               (r"RTX A\d{4}|RTX 30\d0|\bA10G?\b|\bA40\b", 86), (r"\bT4\b", 75), (r"\bV100\b", 70),
               (r"\bP100\b", 60))
_TYPE_CHARS = re.compile(r"[^a-z0-9_.-]+")
_ATTR_WORD = re.compile(r"[A-Za-z0-9_]{1,32}")
_SAME_SWITCH = ("PIX", "PXB")
BRIDGE_CLASS = "0x060400"
NVIDIA_GPU_CLASS = "0x030200"
AMD_RENDER_MINOR_BASE = 128


class Unexportable(ValueError):
    """Well-formed facts that lack what a format needs; .reason says what
    ("GPU 3 has no PCI bus id"), the message names the host and the field."""

    def __init__(self, message, reason):
        super().__init__(message)
        self.reason = reason


def _message(host, field, rule, value):
    where = "numa_topology." + field if field else "numa_topology"
    return "%s: %s: %s (got %s)" % (host, where, rule, show(value))


def _fail(host, field, rule, value):
    raise ValueError(_message(host, field, rule, value))


def _lack(host, field, rule, value, reason):
    raise Unexportable(_message(host, field, rule, value), reason)


def _gpu_name(gpu, position):
    """A GPU as the skip lines name it: by index, else by id, else by position."""
    index = gpu.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return "GPU %d" % index
    return "GPU %s" % gpu["id"] if gpu.get("id") else "GPU gpus[%d]" % position


def _checked(facts, host):
    if not isinstance(facts, dict):
        _fail(host, "", "must be a dict of numa_facts facts", facts)
    if facts.get("schema_version") != 1:
        _fail(host, "schema_version", "must be 1", facts.get("schema_version"))
    for field in ("gpus", "numa_nodes", "nics", "smt_siblings", "sockets"):
        if not isinstance(facts.get(field) or [], list):
            _fail(host, field, "must be a list", facts.get(field))
    return facts


def _cpus(host, field, text):
    try:
        return set(parse_cpulist(text or ""))
    except ValueError as exc:
        raise ValueError("%s: numa_topology.%s: %s" % (host, field, exc))


def _node_cpus(facts, host):
    nodes = {}
    for position, node in enumerate(facts.get("numa_nodes") or []):
        if not isinstance(node, dict) or not isinstance(node.get("id"), int):
            _fail(host, "numa_nodes[%d].id" % position, "must be an integer", node)
        nodes[node["id"]] = _cpus(host, "numa_nodes[%d].cpus" % position, node.get("cpus"))
    return nodes


def logical_cores(facts, host="host"):
    """{OS CPU id: Slurm/hwloc logical core index}; {} when smt_siblings is unknown."""
    cores = []
    for position, core in enumerate(facts.get("smt_siblings") or []):
        if not isinstance(core, list) or not core or not all(isinstance(c, int) and c >= 0 for c in core):
            _fail(host, "smt_siblings[%d]" % position, "must be a list of CPU ids", core)
        cores.append(sorted(core))
    sockets = [(min(cpus), cpus) for cpus in (
        _cpus(host, "sockets[%d].cpus" % i, s.get("cpus") if isinstance(s, dict) else None)
        for i, s in enumerate(facts.get("sockets") or [])) if cpus]
    rank_of = dict((cpu, rank) for rank, (dummy, cpus) in enumerate(sorted(sockets, key=lambda s: s[0]))
                   for cpu in cpus)
    ordered = sorted(cores, key=lambda core: (rank_of.get(core[0], len(sockets)), core[0]))
    return dict((cpu, index) for index, core in enumerate(ordered) for cpu in core)


def slurm_type(name):
    """A GPU name as a gres Type: lower case, anything but [a-z0-9_.-] as '_'."""
    return _TYPE_CHARS.sub("_", name.strip().lower()).strip("_")[:64] or None


def _device_file(gpu, position, host):
    index = gpu.get("index")
    if index is None:
        _lack(host, "gpus[%d].index" % position, "must be known to name the GPU's device file", index,
              "%s has no index (it names the device file)" % _gpu_name(gpu, position))
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        _fail(host, "gpus[%d].index" % position, "must be known to name the GPU's device file", index)
    if gpu.get("vendor") == "nvidia":
        return "/dev/nvidia%d" % index
    if gpu.get("vendor") == "amd":
        return "/dev/dri/renderD%d" % (AMD_RENDER_MINOR_BASE + index)
    _lack(host, "gpus[%d].vendor" % position, "gres.conf lines are written for nvidia and amd GPUs", gpu.get("vendor"),
          "%s is neither NVIDIA nor AMD (vendor %s)" % (_gpu_name(gpu, position), show(gpu.get("vendor"))))


def _gpu_cores(gpu, position, nodes, cores, host, warnings):
    gid = gpu.get("id") or "gpus[%d]" % position
    node = gpu.get("numa_node")
    if node is None:
        warnings.append("%s: GPU %s has no known NUMA node: its line has no Cores=" % (host, gid))
        return None
    if node not in nodes:
        _fail(host, "gpus[%d].numa_node" % position, "must be one of numa_nodes' ids %s" % sorted(nodes), node)
    if not nodes[node]:
        warnings.append("%s: GPU %s sits on NUMA node %d, which has no CPUs: its line has no Cores=" % (host, gid, node))
        return None
    if not cores:
        line = "%s: smt_siblings unknown, so Slurm's core numbering cannot be computed: no line has Cores=" % host
        if line not in warnings:
            warnings.append(line)
        return None
    missing = sorted(nodes[node] - set(cores))
    if missing:
        warnings.append("%s: CPUs %s of NUMA node %d are in no core of smt_siblings: GPU %s's line has no Cores="
                        % (host, format_cpulist(missing), node, gid))
        return None
    return format_cpulist(set(cores[cpu] for cpu in nodes[node]))


def gres_conf(facts, host="host"):
    """Slurm gres.conf text for one host: {"text", "warnings"}."""
    facts = _checked(facts, host)
    nodes = _node_cpus(facts, host)
    cores = logical_cores(facts, host)
    warnings, lines = [], []
    for position, gpu in enumerate(facts.get("gpus") or []):
        if not isinstance(gpu, dict):
            _fail(host, "gpus[%d]" % position, "must be a dict", gpu)
        words = ["Name=gpu"]
        kind = slurm_type(gpu["name"]) if isinstance(gpu.get("name"), str) else None
        if kind:
            words.append("Type=" + kind)
        words.append("File=" + _device_file(gpu, position, host))
        where = _gpu_cores(gpu, position, nodes, cores, host, warnings)
        if where:
            words.append("Cores=" + where)
        lines.append(" ".join(words))
    head = ["# gres.conf for %s, written by gpufleet.numa from its numa_topology facts." % _comment(host),
            "# Cores= are Slurm's logical core indices (core 0 = first core of the first socket, hwloc's Core L#),",
            "# not OS CPU ids: the cores of each GPU's NUMA node. Devices are listed here, not detected:",
            "AutoDetect=off"]
    tail = ["# warning: " + _comment(w) for w in warnings]
    return {"text": "\n".join(head + lines + tail) + "\n", "warnings": warnings}


def _comment(text):
    return re.sub(r"[\x00-\x1f\x7f]", "?", str(text))


# What XML 1.0 allows in no document (and so in no comment): control
# characters, lone surrogates, U+FFFE and U+FFFF.
_NOT_XML = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def _xml_comment(text):
    """TEXT fit inside "<!-- ... -->": a comment may hold no "--" (one
    "--->" in a NIC id would end it), so a '-' before another '-' gets a
    space; what XML cannot hold becomes '?'."""
    return re.sub(r"-(?=-)", "- ", _NOT_XML.sub("?", str(text)))


def _mask(cpus):
    """A kernel cpumask ("000000ff,ffffffff") as NCCL writes cpu affinity."""
    value = sum(1 << cpu for cpu in set(cpus))
    words = []
    while True:
        words.append("%08x" % (value & 0xFFFFFFFF))
        value >>= 32
        if not value:
            return ",".join(reversed(words))


def _pci_attrs(busid, pci_class, pcie):
    attrs = {"busid": busid, "class": pci_class}
    pcie = pcie if isinstance(pcie, dict) else {}
    if pcie.get("max_speed"):
        attrs["link_speed"] = str(pcie["max_speed"])
    if isinstance(pcie.get("max_width"), int):
        attrs["link_width"] = str(pcie["max_width"])
    return attrs


def _sm(name):
    for pattern, sm in _SM_BY_NAME:
        if isinstance(name, str) and re.search(pattern, name):
            return sm
    return None


def _gpu_device(gpu, position, facts, host, warnings):
    busid = gpu.get("pci_bus_id")
    if not busid:
        _lack(host, "gpus[%d].pci_bus_id" % position, "must be known: NCCL finds GPUs by bus id", busid,
              "%s has no PCI bus id" % _gpu_name(gpu, position))
    pci_class = gpu.get("pci_class")
    if not pci_class and gpu.get("vendor") == "nvidia":
        # Every NVIDIA GPU is a display-class device (0x0300 VGA, 0x0302 3D), all NCCL asks of the class.
        pci_class = NVIDIA_GPU_CLASS
        line = "%s: the NVIDIA GPUs' PCI class is unknown (no sysfs): written as %s" % (host, pci_class)
        if line not in warnings:
            warnings.append(line)
    if not pci_class:
        _lack(host, "gpus[%d].pci_class" % position, "must be known: NCCL tells GPUs from bridges by it", pci_class,
              "%s has no PCI class" % _gpu_name(gpu, position))
    pci = ET.Element("pci", _pci_attrs(busid, pci_class, gpu.get("pcie")))
    element = ET.SubElement(pci, "gpu")
    if gpu.get("vendor") == "nvidia" and _sm(gpu.get("name")):
        element.set("sm", str(_sm(gpu.get("name"))))
    peers = dict((g.get("pci_bus_id"), g) for g in facts.get("gpus") or [] if isinstance(g, dict))
    for peer, link in sorted(((facts.get("links") or {}).get(gpu.get("id")) or {}).items()):
        # XGMI links are AMD's own, keyed by bus id; NVLink is left to NVML
        # (on NVSwitch systems the facts give every pair the switch-link count).
        if isinstance(link, str) and link.startswith("XGMI") and link[4:].isdigit() and peer in peers:
            ET.SubElement(element, "xgmi", {"target": peer, "count": link[4:],
                                            "tclass": peers[peer].get("pci_class") or pci_class})
    return pci


def _nic_device(nic, position, host):
    if nic.get("pci_class") is None:
        _lack(host, "nics[%d].pci_class" % position, "must be known for a NIC with a bus id", None,
              "NIC %s has no PCI class" % (nic.get("id") or "nics[%d]" % position))
    pci = ET.Element("pci", _pci_attrs(nic["pci_bus_id"], nic["pci_class"], nic.get("pcie")))
    card = ET.SubElement(pci, "nic")
    for name in _net_names(nic):
        ET.SubElement(card, "net", {"name": str(name)})
    return pci


def _net_names(nic):
    """NCCL's <net> names: the RDMA devices (its IB transport); a NIC with
    none is named by its interfaces (the socket transport, as RCCL dumps eth0)."""
    return sorted(nic.get("rdma_devices") or nic.get("net_interfaces") or [])


def _devices(facts, host, warnings):
    """[(numa node, bus id, element)] of the GPUs and RDMA NICs."""
    out = []
    for position, gpu in enumerate(facts.get("gpus") or []):
        if not isinstance(gpu, dict):
            _fail(host, "gpus[%d]" % position, "must be a dict", gpu)
        if gpu.get("numa_node") is None:
            _lack(host, "gpus[%d].numa_node" % position, "must be known: NCCL places a GPU under its CPU", None,
                  "%s has no known NUMA node" % _gpu_name(gpu, position))
        if not isinstance(gpu.get("numa_node"), int) or isinstance(gpu.get("numa_node"), bool):
            _fail(host, "gpus[%d].numa_node" % position, "must be known: NCCL places a GPU under its CPU",
                  gpu.get("numa_node"))
        out.append((gpu["numa_node"], gpu.get("pci_bus_id"), _gpu_device(gpu, position, facts, host, warnings)))
    for position, nic in enumerate(facts.get("nics") or []):
        if not isinstance(nic, dict) or not _net_names(nic):
            continue
        if not nic.get("pci_bus_id") or not isinstance(nic.get("numa_node"), int):
            warnings.append("%s: NIC %s (%s) is left out: its %s is unknown" % (
                host, nic.get("id"), ",".join(_net_names(nic)),
                "bus id" if not nic.get("pci_bus_id") else "NUMA node"))
            continue
        out.append((nic["numa_node"], nic["pci_bus_id"], _nic_device(nic, position, host)))
    return out


def _switch_groups(facts, busids):
    """Sets of bus ids that share a PCIe switch (PIX/PXB), by union-find."""
    parent = dict((b, b) for b in busids)

    def root(b):
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        return b

    id_to_bus = dict((g.get("id"), g.get("pci_bus_id")) for g in facts.get("gpus") or [] if isinstance(g, dict))
    pairs = [(id_to_bus.get(a), id_to_bus.get(b)) for a, row in (facts.get("links") or {}).items()
             for b, link in (row or {}).items() if link in _SAME_SWITCH]
    pairs += [(n.get("pci_bus_id"), id_to_bus.get(g)) for n in facts.get("nics") or [] if isinstance(n, dict)
              for g, link in (n.get("gpu_links") or {}).items() if link in _SAME_SWITCH]
    for a, b in pairs:
        if a in parent and b in parent:
            parent[root(a)] = root(b)
    groups = {}
    for b in sorted(busids):
        groups.setdefault(root(b), []).append(b)
    return sorted(groups.values())


def nccl_topology_xml(facts, host="host", cpu_arch=None, cpu_vendor=None):
    """NCCL topology file text for one host: {"text", "warnings"}."""
    facts = _checked(facts, host)
    nodes = _node_cpus(facts, host)
    warnings = []
    for name, value in (("cpu_arch", cpu_arch), ("cpu_vendor", cpu_vendor)):
        if value is not None and not (isinstance(value, str) and _ATTR_WORD.fullmatch(value)):
            raise ValueError("%s: %s: must be a word of letters, digits and _ (got %s)" % (host, name, show(value)))
    devices = _devices(facts, host, warnings)
    system = ET.Element("system", {"version": "1"})
    bridges = 0
    for node in sorted(set(d[0] for d in devices)):
        if node not in nodes:
            _fail(host, "numa_nodes", "must hold node %d with its CPUs (a device sits on it)" % node, sorted(nodes))
        if not nodes[node]:
            _lack(host, "numa_nodes", "must hold node %d with its CPUs (a device sits on it)" % node, sorted(nodes),
                  "NUMA node %d, where a GPU or NIC sits, has no known CPUs" % node)
        cpu = ET.SubElement(system, "cpu", {"numaid": str(node), "affinity": _mask(nodes[node])})
        for key, value in (("arch", cpu_arch), ("vendor", cpu_vendor)):
            if value:
                cpu.set(key, value)
        here = dict((busid, element) for n, busid, element in devices if n == node)
        for group in _switch_groups(facts, list(here)):
            parent = cpu
            if len(group) > 1:
                bridges += 1
                attrs = dict((k, v) for k, v in here[group[0]].attrib.items() if k.startswith("link_"))
                attrs = dict([("busid", "ffff:ff:%02x.0" % bridges), ("class", BRIDGE_CLASS)] + sorted(attrs.items()))
                parent = ET.SubElement(cpu, "pci", attrs)
            for busid in group:
                parent.append(here[busid])
    ET.indent(system, "  ")
    comment = "<!-- NCCL_TOPO_FILE for %s, written by gpufleet.numa from its numa_topology facts -->" % (
        _xml_comment(host))
    lines = [comment] + ["<!-- warning: %s -->" % _xml_comment(w) for w in warnings]
    return {"text": "\n".join(lines + [ET.tostring(system, encoding="unicode")]) + "\n", "warnings": warnings}


# The formats export_topology.yml writes, by file suffix.
FORMATS = (("gres.conf", gres_conf), ("nccl-topo.xml", nccl_topology_xml))


def host_exports(facts, host="host"):
    """Every format of one host: {"files": {suffix: text, or None when not
    written}, "warnings": [...] of the files written, "skipped": ["<host>:
    <suffix> not written: <reason>", ...]}. Facts that lack what one format
    needs skip that format; facts that are not numa_facts facts raise
    ValueError as the format functions do."""
    out = {"files": {}, "warnings": [], "skipped": []}
    for suffix, make in FORMATS:
        try:
            result = make(facts, host)
        except Unexportable as exc:
            out["files"][suffix] = None
            out["skipped"].append("%s: %s not written: %s" % (host, suffix, exc.reason))
            continue
        out["files"][suffix] = result["text"]
        out["warnings"].extend(result["warnings"])
    return out
