# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Topology files the field already has, read as captures.

- hwloc XML (`lstopo --of xml`, what Slurm and Open MPI users have at hand);
- the NCCL/RCCL topology dump (`NCCL_TOPO_DUMP_FILE`, `<system version=...>`).

capture_from_xml(text, name) turns either into the sysfs files, symlinks
and KFD topology a live host would show, so the one sysfs parser and the
one assembly read them (no second reading of the same facts).

Both are untrusted: the text is refused when it declares entities or an
internal DTD subset (expat would expand them), and the parsed tree is
bounded in depth and elements. Standard library only (xml.etree).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import integer
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpumask
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs import MAX_NUMA_NODES

XML_MAX_DEPTH = 64  # an hwloc export of an 8-level PCI tree nests about 20 deep
XML_MAX_ELEMENTS = 200000
_DOCTYPE = re.compile(r"<!DOCTYPE\s+topology\s+SYSTEM\s+\"hwloc2?\.dtd\"\s*>")
_PCI_TYPE = re.compile(r"^([0-9a-fA-F]{4}) \[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")
NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"


def is_xml(text):
    return text.lstrip().startswith("<")


def _parse(text, name):
    # hwloc's own header names its DTD; any other declaration is refused.
    rest = _DOCTYPE.sub("", text, count=1)
    if "<!DOCTYPE" in rest or "<!ENTITY" in rest:
        raise ValueError("capture %s: XML with a DTD or entity declarations is refused" % name)
    try:
        root = ET.fromstring(rest)
    except ET.ParseError as exc:
        raise ValueError("capture %s is not well-formed XML: %s" % (name, exc))
    count = 0
    todo = [(root, 1)]
    while todo:
        element, depth = todo.pop()
        count += 1
        if depth > XML_MAX_DEPTH or count > XML_MAX_ELEMENTS:
            raise ValueError("capture %s: XML nested deeper than %d levels or larger than %d elements"
                             % (name, XML_MAX_DEPTH, XML_MAX_ELEMENTS))
        todo.extend((child, depth + 1) for child in element)
    return root


def _mask(text, what, name):
    try:
        return parse_cpumask(text or "")
    except ValueError as exc:
        raise ValueError("capture %s: %s: %s" % (name, what, exc))


def _bus_id(text, what, name):
    """A bus id of the XML in sysfs's form; the error names the capture and the attribute."""
    try:
        return normalize_bus_id(text)
    except ValueError:
        raise ValueError("capture %s: %s: must be a PCI bus id such as 0000:1a:00.0 (got %s)"
                         % (name, what, excerpt(text)))


def _node_id(text, what, name):
    """A NUMA node id of the XML: decimal digits, 0 to Linux's limit (isdigit() took '\u0663')."""
    return integer("capture %s: %s" % (name, what), text, 0, MAX_NUMA_NODES - 1)


class _Tree(object):
    """The files and symlinks of the capture being built."""

    def __init__(self):
        self.files, self.symlinks = {}, {}

    def node(self, node_id, cpus, memory_bytes=None):
        base = "%s/node%d" % (NODE_DIR, node_id)
        self.files[base + "/cpulist"] = format_cpulist(cpus) + "\n"
        if memory_bytes is not None:
            self.files[base + "/meminfo"] = "Node %d MemTotal: %d kB\n" % (node_id, memory_bytes // 1024)

    def cpu(self, cpu, package=None, siblings=None):
        base = "%s/cpu%d/topology" % (CPU_DIR, cpu)
        self.files.setdefault(base + "/physical_package_id", "%d\n" % (package if package is not None else -1))
        if siblings:
            self.files[base + "/thread_siblings_list"] = format_cpulist(siblings) + "\n"

    def device(self, bus_id, chain, pci_class, vendor, device, numa_node, local_cpus, net=(), rdma=()):
        self.symlinks["/sys/bus/pci/devices/" + bus_id] = "../../../devices/" + "/".join(chain + [bus_id])
        real = "/sys/devices/" + "/".join(chain + [bus_id])
        for key, value in (("class", pci_class), ("vendor", vendor), ("device", device),
                           ("numa_node", "%d" % (-1 if numa_node is None else numa_node)),
                           ("local_cpulist", None if local_cpus is None else format_cpulist(local_cpus))):
            if value is not None:
                self.files["%s/%s" % (real, key)] = value + "\n"
        for sub, names in (("net", net), ("infiniband", rdma)):
            for item in names:
                self.files["%s/%s/%s/dev_id" % (real, sub, item)] = "0x0\n"


def _node_of(cpus, nodes):
    owners = [i for i, have in nodes.items() if have and set(cpus) <= set(have)]
    return owners[0] if len(owners) == 1 else None


def _hwloc_distances(root, tree):
    for dist in root.iter("distances2"):
        if dist.get("type") != "NUMANode":
            continue
        indexes = " ".join(i.text or "" for i in dist.findall("indexes")).split()
        values = " ".join(v.text or "" for v in dist.findall("u64values")).split()
        if len(values) != len(indexes) ** 2 or not all(v.isdigit() for v in indexes + values):
            continue
        n = len(indexes)
        for i, node in enumerate(indexes):
            tree.files["%s/node%s/distance" % (NODE_DIR, node)] = " ".join(values[i * n:(i + 1) * n]) + "\n"
        return


def _hwloc_pci(element, chain, cpus, tree, nodes, name):
    """PCI devices below element: bridges extend the chain, devices are written."""
    for child in element.findall("object"):
        kind = child.get("type")
        if kind == "Bridge":
            if child.get("bridge_type", "").startswith("0-"):  # a host bridge: "0000:[00-07]"
                domain_bus = (child.get("bridge_pci") or "0000:[00").split("[")
                link = ["pci%s%s" % (domain_bus[0], domain_bus[1][:2] if len(domain_bus) > 1 else "00")]
            else:
                link = chain + [_bus_id(child.get("pci_busid"), "Bridge pci_busid", name)]
            _hwloc_pci(child, link, cpus, tree, nodes, name)
        elif kind == "PCIDev":
            bus_id = _bus_id(child.get("pci_busid"), "PCIDev pci_busid", name)
            match = _PCI_TYPE.match(child.get("pci_type") or "")
            if not match:
                continue
            osdevs = [o for o in child.findall("object") if o.get("type") == "OSDev"]
            net = [o.get("name") for o in osdevs if o.get("osdev_type") in ("2", "16")]
            rdma = [o.get("name") for o in osdevs if o.get("osdev_type") in ("3", "32")]
            host = chain or ["pci%s:%s" % (bus_id[:4], bus_id[5:7])]
            tree.device(bus_id, host, "0x%s00" % match.group(1).lower(), "0x" + match.group(2).lower(),
                        "0x" + match.group(3).lower(), _node_of(cpus, nodes) if cpus else None, cpus or None,
                        net, rdma)
            _hwloc_pci(child, host + [bus_id], cpus, tree, nodes, name)
        elif kind not in ("OSDev", "Misc"):
            here = _mask(child.get("cpuset"), "cpuset of %s" % kind, name) if child.get("cpuset") else cpus
            _hwloc_pci(child, chain, here, tree, nodes, name)


def _from_hwloc(root, name):
    tree = _Tree()
    nodes = {}
    for element in root.iter("object"):
        kind = element.get("type")
        if kind == "NUMANode" and element.get("os_index") is not None:
            cpus = _mask(element.get("cpuset"), "NUMANode cpuset", name)
            memory = element.get("local_memory")
            node = _node_id(element.get("os_index"), "NUMANode os_index", name)
            nodes[node] = cpus
            tree.node(node, cpus, int(memory) if memory and memory.isdigit() else None)
        elif kind == "Package":
            package = element.get("os_index")
            for cpu in _mask(element.get("cpuset"), "Package cpuset", name):
                tree.cpu(cpu, int(package) if package is not None else None)
        elif kind == "Core":
            siblings = _mask(element.get("cpuset"), "Core cpuset", name)
            for cpu in siblings:
                tree.cpu(cpu, siblings=siblings)
    _hwloc_distances(root, tree)
    _hwloc_pci(root, [], None, tree, nodes, name)
    return tree


def _nccl_pci(element, chain, node, cpus, tree, kfd, name):
    for child in element.findall("pci"):
        bus_id = _bus_id(child.get("busid"), "<pci> busid", name)
        host = chain or ["pci%s:%s" % (bus_id[:4], bus_id[5:7])]
        nets = [n.get("name") for nic in child.findall("nic") for n in nic.findall("net")]
        vendor = (child.get("vendor") or "").lower()
        gpus = child.findall("gpu")
        if not vendor and gpus:  # older dumps leave vendor out: RCCL writes gcn=, NCCL does not
            vendor = "0x1002" if gpus[0].get("gcn") else "0x10de"
        tree.device(bus_id, host, (child.get("class") or "0x000000").lower(), vendor,
                    (child.get("device") or "").lower(), node, cpus, rdma=[n for n in nets if n])
        for gpu in gpus:
            kfd.append((gpu.get("dev"), bus_id, [(x.get("target"), x.get("count")) for x in gpu.findall("xgmi")]))
        _nccl_pci(child, host + [bus_id], node, cpus, tree, kfd, name)


def _write_kfd(kfd, tree, name):
    """AMD GPUs of an RCCL dump as the KFD topology: ROCm's device order is
    `dev`, XGMI links as io_links (type 11), so the sysfs reader indexes
    them and draws XGMI<n> as on a live host."""
    ordered = sorted(kfd, key=lambda g: int(g[0]) if (g[0] or "").isdigit() else 1 << 30)
    node_of = dict((bus_id, position + 1) for position, (dummy, bus_id, dummy_links) in enumerate(ordered))
    for position, (dummy, bus_id, links) in enumerate(ordered):
        domain, bus, rest = bus_id.split(":")
        slot, function = rest.split(".")
        location = int(bus, 16) << 8 | int(slot, 16) << 3 | int(function)
        base = "%s/%d" % (KFD_NODES, position + 1)
        tree.files[base + "/properties"] = "simd_count 1\nlocation_id %d\ndomain %d\n" % (location, int(domain, 16))
        link_no = 0
        for target, count in links:
            try:
                peer = node_of[normalize_bus_id(target)]
                times = max(1, min(int(count or 1), 64))
            except (KeyError, ValueError, AttributeError):
                continue
            for dummy_n in range(times):
                tree.files["%s/io_links/%d/properties" % (base, link_no)] = "type 11\nnode_to %d\n" % peer
                link_no += 1
    if ordered:
        tree.files[KFD_NODES + "/0/properties"] = "simd_count 0\n"  # the CPU node


def _from_nccl(root, name):
    tree = _Tree()
    kfd = []
    for cpu in root.findall("cpu"):
        if cpu.get("numaid") is None:
            raise ValueError("capture %s: <cpu> without a numaid" % name)
        node = _node_id(cpu.get("numaid"), "<cpu> numaid", name)
        cpus = _mask(cpu.get("affinity"), "cpu affinity", name)
        tree.node(node, cpus)
        _nccl_pci(cpu, [], node, cpus, tree, kfd, name)
    _write_kfd(kfd, tree, name)
    return tree


def capture_from_xml(text, name):
    """A capture dict from hwloc XML or an NCCL/RCCL topology dump;
    ValueError names the capture and the problem."""
    root = _parse(text, name)
    try:
        if root.tag == "topology":
            tree, kind = _from_hwloc(root, name), "hwloc XML (lstopo --of xml)"
        elif root.tag == "system":
            tree, kind = _from_nccl(root, name), "NCCL topology dump (NCCL_TOPO_DUMP_FILE)"
        else:
            raise ValueError("capture %s: XML root <%s> is neither hwloc's <topology> nor NCCL's <system>"
                             % (name, root.tag[:40]))
    except (TypeError, AttributeError, IndexError) as exc:
        raise ValueError("capture %s: XML lacks what a %s needs (%s)" % (name, root.tag[:40], type(exc).__name__))
    return {"capture_version": 1, "files": tree.files, "symlinks": tree.symlinks,
            "source": {"description": "%s read from %s" % (kind, name)}}
