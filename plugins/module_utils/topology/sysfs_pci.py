# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What Linux sysfs says about the PCI tree: GPUs and NICs under
/sys/bus/pci/devices, their locality, the link class between two devices
from their PCI paths, and AMD's KFD topology (ROCm device order, XGMI).

Read through the reader seam; never raises on what a host wrote (see
sysfs.py). Standard library only (runs on targets).
"""

from __future__ import annotations

import re
from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import MAX_GPUS, normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_common import (
    cpulist_or_warn,
    int_or_none,
    node_cpu_sets,
    node_for_cpus,
    note_once,
    stripped,
)

PCI_DIR = "/sys/bus/pci/devices"
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"
KFD_LINK_XGMI = 11  # io_link type of an XGMI link (type 2 is PCIe)

GPU_VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}
# VGA, 3D controller, processing accelerator, and "other display
# controller" (0x0380: AMD Instinct MI100/MI200 report themselves so).
GPU_CLASSES = ("0x0300", "0x0302", "0x0380", "0x1200")
# Ethernet, InfiniBand, InfiniBand serial bus (QLogic/Intel HCAs). Any other
# PCI device that has a net/ or infiniband/ interface counts as a NIC too
# (a ConnectX-3 reports 0x0280, "network controller, other").
NIC_CLASSES = ("0x0200", "0x0207", "0x0c06")
NIC_VENDORS = {
    "0x15b3": "mellanox",
    "0x8086": "intel",
    "0x14e4": "broadcom",
    "0x1077": "qlogic",
    "0x1924": "solarflare",
    "0x1d0f": "amazon",
    "0x1af4": "virtio",
    "0x10ee": "xilinx",
    "0x1dd8": "pensando",
    "0x19e5": "huawei",
    "0x8088": "wangxun",
    "0x1c36": "annapurna",
    "0x10df": "emulex",
    "0x17d5": "exar",
    "0x1fc9": "tehuti",
    "0x177d": "cavium",
    "0x1ae0": "google",
    "0x10de": "nvidia",
    "0x1002": "amd",
    "0x1022": "amd",
}
_KFD_NODE = re.compile(r"^\d{1,9}$", re.ASCII)
_HOST_BRIDGE = re.compile(r"^pci([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2})$")
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")

# Where a device sits: numa_node (None when unknown), local_cpus (a
# cpulist or None), reported (the raw numa_node a GPU's firmware wrote
# when it said -1, else None).
Locality = namedtuple("Locality", "numa_node local_cpus reported")
KfdGpu = namedtuple("KfdGpu", "kfd_node bus_id")
PciDevices = namedtuple("PciDevices", "gpus nics links")


def _pci_chain(reader, bus_id):
    """(host bridge, [bridge bus ids from the root port down]) for a device,
    from the realpath of /sys/bus/pci/devices/<bus_id>; None when unknown."""
    real = reader.realpath("%s/%s" % (PCI_DIR, bus_id))
    if not real:
        return None
    parts = [p for p in real.split("/") if p]
    host = None
    for i, part in enumerate(parts):
        if _HOST_BRIDGE.match(part):
            host = i
    if host is None or not parts or parts[-1].lower() != bus_id:
        return None
    bridges = [p.lower() for p in parts[host + 1:-1] if _BDF.match(p)]
    return {"host_bridge": "/".join(parts[: host + 1]), "bridges": bridges}


def _pcie(reader, base):
    def speed(name):
        value = stripped(reader.read("%s/%s" % (base, name)))
        return None if not value or value.lower().startswith("unknown") else value

    def width(name):
        value = int_or_none(reader.read("%s/%s" % (base, name)))
        return value if value else None  # 0 means the link is down / unknown

    return {
        "current_speed": speed("current_link_speed"),
        "max_speed": speed("max_link_speed"),
        "current_width": width("current_link_width"),
        "max_width": width("max_link_width"),
    }


def _interfaces(reader, base):
    """(net interface names, RDMA device names) of a PCI device: net/ and
    infiniband/ below it (NCCL_IB_HCA takes the infiniband/ names)."""
    net = set(reader.listdir(base + "/net") or [])
    # virtio and some other drivers put net/ one level down (virtio0/net/eth0).
    for child in reader.listdir(base) or []:
        if child.startswith("virtio"):
            net.update(reader.listdir("%s/%s/net" % (base, child)) or [])
    return sorted(net), sorted(reader.listdir(base + "/infiniband") or [])


def _locality(reader, base, bus_id, kind, nodes, warnings, cpu_sets=None):
    """Locality(numa_node, local_cpus, reported) of a device.

    numa_node -1 means the firmware did not say: for a NIC the one node
    whose CPUs cover local_cpulist is taken; for a GPU numa_node stays None
    and `reported` keeps the raw value, so that assembly can weigh the
    other sources first and warn once.
    """
    local = cpulist_or_warn(reader, base + "/local_cpulist", warnings, base + "/local_cpus")
    local_cpus = None if not local else format_cpulist(local)
    raw = stripped(reader.read(base + "/numa_node"))
    node = int_or_none(raw)
    if raw is not None and node is None:
        warnings.append("%s/numa_node %s is not a number" % (base, excerpt(raw)))
    reported = None
    if node is not None and node < 0:
        reported = raw if len(raw) <= 20 else raw[:20] + "..."
        node = node_for_cpus(local or [], nodes, cpu_sets) if kind == "NIC" else None
    elif node is not None and nodes and node not in [n["id"] for n in nodes]:
        warnings.append("%s %s reports numa_node %d, which is not a NUMA node here" % (kind, bus_id, node))
    return Locality(node, local_cpus, reported)


def _gpu_entry(reader, entry, bus_id, pci_class, vendor_id, nodes, warnings):
    """A GPU as sysfs shows it; what NVML or nvidia-smi say is merged later."""
    base = "%s/%s" % (PCI_DIR, entry)
    where = _locality(reader, base, bus_id, "GPU", nodes, warnings)
    return {
        "index": None,
        "pci_bus_id": bus_id,
        "uuid": None,
        "name": None,
        "memory_mb": None,
        "numa_node": where.numa_node,
        "numa_node_reported": where.reported,
        "local_cpus": where.local_cpus,
        "mig_mode": None,
        "pcie": _pcie(reader, base),
        "vendor": GPU_VENDORS[vendor_id],
        "device_id": stripped(reader.read(base + "/device")),
        "pci_class": pci_class,
        "pci_path": _pci_chain(reader, entry),
    }


def _nic_entry(reader, entry, bus_id, pci_class, vendor_id, nodes, warnings, cpu_sets):
    """A NIC: a device of a NIC class, or any device with a net/ or
    infiniband/ interface; None when this device is neither."""
    base = "%s/%s" % (PCI_DIR, entry)
    net, rdma = _interfaces(reader, base)
    if pci_class[:6] not in NIC_CLASSES and not net and not rdma:
        return None
    where = _locality(reader, base, bus_id, "NIC", nodes, warnings, cpu_sets)
    return {
        "id": bus_id,
        "pci_bus_id": bus_id,
        "vendor": NIC_VENDORS.get(vendor_id, "other"),
        "interfaces": sorted(set(net) | set(rdma)),
        "net_interfaces": net,
        "rdma_devices": rdma,
        "pci_class": pci_class,
        "numa_node": where.numa_node,
        "local_cpus": where.local_cpus,
        "pcie": _pcie(reader, base),
        "pci_path": _pci_chain(reader, entry),
    }


def pci_devices(reader, nodes, warnings):
    """GPUs and NICs found under /sys/bus/pci/devices, sorted by bus id."""
    gpus, nics = [], []
    cpu_sets = node_cpu_sets(nodes)
    for entry in reader.listdir(PCI_DIR) or []:
        try:
            bus_id = normalize_bus_id(entry)
        except ValueError:
            continue
        base = "%s/%s" % (PCI_DIR, entry)
        pci_class = stripped(reader.read(base + "/class"))
        if pci_class is None:
            warnings.append("%s/class cannot be read: PCI device %s is not classified (a GPU or NIC there "
                            "is left out)" % (base, bus_id))
            continue
        pci_class = pci_class.lower()
        vendor_id = (stripped(reader.read(base + "/vendor")) or "").lower()
        if pci_class[:6] in GPU_CLASSES and vendor_id in GPU_VENDORS:
            if len(gpus) >= MAX_GPUS:
                note_once(warnings, "%s: more than %d GPUs; the rest is not read" % (PCI_DIR, MAX_GPUS))
                continue
            gpus.append(_gpu_entry(reader, entry, bus_id, pci_class, vendor_id, nodes, warnings))
            continue
        nic = _nic_entry(reader, entry, bus_id, pci_class, vendor_id, nodes, warnings, cpu_sets)
        if nic is not None:
            nics.append(nic)
    gpus.sort(key=lambda g: g["pci_bus_id"])
    nics.sort(key=lambda n: n["pci_bus_id"])
    return gpus, nics


def pci_link_class(path_a, path_b, node_a, node_b):
    """The nvidia-smi link class between two devices from their PCI paths.

    PIX: below one PCIe switch (at most one bridge between them);
    PXB: several bridges, without crossing the host bridge;
    PHB: through the host bridge (same root complex);
    NODE: different host bridges of one NUMA node;
    SYS: different NUMA nodes (or locality unknown: assume the worst).
    """
    if path_a is None or path_b is None or path_a["host_bridge"] != path_b["host_bridge"]:
        if node_a is not None and node_a == node_b:
            return "NODE"
        return "SYS"
    a, b = path_a["bridges"], path_b["bridges"]
    common = 0
    while common < len(a) and common < len(b) and a[common] == b[common]:
        common += 1
    if common == 0:
        return "PHB"
    # Below the deepest shared bridge each side has its own downstream port
    # at most: that is one switch (PIX). More levels mean nested switches.
    if len(a) - common <= 1 and len(b) - common <= 1:
        return "PIX"
    return "PXB"


def _effective_node(device, nodes, cpu_sets=None):
    if device["numa_node"] is not None:
        return device["numa_node"]
    if device.get("local_cpus"):
        node = node_for_cpus(parse_cpulist(device["local_cpus"]), nodes, cpu_sets)
        if node is not None:
            return node
    return nodes[0]["id"] if len(nodes) == 1 else None


def pci_tree_links(gpus, nodes=()):
    """Links between every pair of GPUs from the PCI tree, keyed by bus id."""
    links = {}
    cpu_sets = node_cpu_sets(nodes)
    effective = [_effective_node(g, nodes, cpu_sets) for g in gpus]
    for a, node_a in zip(gpus, effective):
        row = {}
        for b, node_b in zip(gpus, effective):
            if a is b:
                continue
            row[b["pci_bus_id"]] = pci_link_class(a["pci_path"], b["pci_path"], node_a, node_b)
        links[a["pci_bus_id"]] = row
    return links


def nic_gpu_links(nics, gpus, nodes=()):
    """Each NIC's link class to every GPU from the PCI tree (as nvidia-smi
    topo -m prints it in its NIC columns): nic["gpu_links"], by GPU bus id.
    The PCI path is dropped from the NIC (it is no fact)."""
    cpu_sets = node_cpu_sets(nodes)
    gpu_nodes = [_effective_node(g, nodes, cpu_sets) for g in gpus]
    for nic in nics:
        path = nic.pop("pci_path", None)
        nic_node = _effective_node(nic, nodes, cpu_sets)
        nic["gpu_links"] = dict(
            (g["pci_bus_id"], pci_link_class(path, g["pci_path"], nic_node, node)) for g, node in zip(gpus, gpu_nodes))


def _properties(text):
    values = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            values[parts[0]] = int_or_none(parts[1])
    return values


def kfd_gpu_nodes(reader):
    """AMD GPUs in KFD topology order: [KfdGpu(kfd node number, bus id)].

    ROCm (HSA, then HIP) enumerates GPU agents in this order, so a GPU's
    position here is its device index for HIP_VISIBLE_DEVICES and
    CUDA_VISIBLE_DEVICES on ROCm. CPU nodes (no SIMDs) are skipped.
    """
    found = []
    nodes = sorted(int(n) for n in reader.listdir(KFD_NODES) or [] if _KFD_NODE.match(n))
    for node in nodes:
        props = _properties(reader.read("%s/%d/properties" % (KFD_NODES, node)))
        location = props.get("location_id")
        if not props.get("simd_count") or location is None:
            continue  # a CPU node
        found.append(KfdGpu(node, "%04x:%02x:%02x.%d" % (
            props.get("domain") or 0, location >> 8, (location >> 3) & 0x1F, location & 0x7)))
    return found


def kfd_xgmi_links(reader, warnings, gpu_nodes=None):
    """AMD XGMI links from the KFD topology: {bus id: {bus id: "XGMI<n>"}},
    n = the number of XGMI io_links between the two GPUs."""
    bus_of = dict(kfd_gpu_nodes(reader) if gpu_nodes is None else gpu_nodes)
    links = {}
    for node in sorted(bus_of):
        base = "%s/%d/io_links" % (KFD_NODES, node)
        for link in reader.listdir(base) or []:
            props = _properties(reader.read("%s/%s/properties" % (base, link)))
            if props.get("type") != KFD_LINK_XGMI:
                continue
            peer = bus_of.get(props.get("node_to"))
            if peer is None:
                warnings.append("%s/%s: XGMI link to KFD node %s, which is not a GPU" % (base, link, props.get("node_to")))
                continue
            row = links.setdefault(bus_of[node], {})
            row[peer] = row.get(peer, 0) + 1
    return dict((a, dict((b, "XGMI%d" % n) for b, n in row.items())) for a, row in links.items())


def index_amd_gpus(gpus, gpu_nodes, warnings):
    """Give AMD GPUs their ROCm device index (KFD order). Without a KFD
    topology the index stays unknown: PCI order is only a guess on ROCm."""
    order = dict((gpu.bus_id, position) for position, gpu in enumerate(gpu_nodes))
    for gpu in gpus:
        if gpu["vendor"] != "amd":
            continue
        gpu["index"] = order.get(gpu["pci_bus_id"])
        if gpu["index"] is None:
            warnings.append("AMD GPU %s is not in the KFD topology (%s); its ROCm device index is unknown"
                            % (gpu["pci_bus_id"], KFD_NODES))


def collect_pci(reader, nodes, warnings):
    """PciDevices(gpus, nics, links): the devices, each NIC's gpu_links, the
    links between GPUs from the PCI tree, XGMI where the KFD topology has it."""
    gpus, nics = pci_devices(reader, nodes, warnings)
    links = pci_tree_links(gpus, nodes)
    nic_gpu_links(nics, gpus, nodes)
    gpu_nodes = kfd_gpu_nodes(reader) if any(g["vendor"] == "amd" for g in gpus) else []
    index_amd_gpus(gpus, gpu_nodes, warnings)
    # XGMI beats any PCIe path between the same two AMD GPUs.
    for a, row in kfd_xgmi_links(reader, warnings, gpu_nodes).items():
        for b, cls in row.items():
            if a in links and b in links[a]:
                links[a][b] = cls
    return PciDevices(gpus, nics, links)
