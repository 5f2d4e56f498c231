# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What Linux sysfs says about NUMA nodes, CPUs, GPUs, NICs and the PCI tree.

collect(reader) reads through the reader seam (topology_reader) and never
raises: a file that is missing or unreadable leaves its value None, a file
whose content makes no sense adds a warning naming the file. Works for any
GPU vendor; NVML and nvidia-smi only refine what is found here.
Standard library only (runs on targets).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import (
    format_cpulist,
    parse_cpulist,
    parse_cpumask,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import MAX_GPUS, normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import absolute_path

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"
PCI_DIR = "/sys/bus/pci/devices"
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"
CGROUP_DIR = "/sys/fs/cgroup"
CGROUP_V1_CPUSET_DIR = CGROUP_DIR + "/cpuset"  # where cgroup v1 mounts the cpuset controller by default
MOUNTINFO = "/proc/self/mountinfo"
PROC_STATUS = "/proc/self/status"
ISOLATED = CPU_DIR + "/isolated"
DEFAULT_SLICE = "system.slice"
MAX_NUMA_NODES = 1024  # Linux's own limit (CONFIG_NODES_SHIFT 10)
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
_NODE_NAME = re.compile(r"^node(\d{1,9})$", re.ASCII)
_CPU_NAME = re.compile(r"^cpu(\d{1,9})$", re.ASCII)
_KFD_NODE = re.compile(r"^\d{1,9}$", re.ASCII)
_HOST_BRIDGE = re.compile(r"^pci([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2})$")
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_MEMTOTAL = re.compile(r"MemTotal:\s*(\d+)\s*kB")
_CPUS_ALLOWED = re.compile(r"^Cpus_allowed_list:[ \t]*(\S*)[ \t]*$", re.MULTILINE)


NUL_LISTS = ("sysfs list files end in a NUL byte (the kernel's bitmap_print_to_buf copies the terminator, "
             "as on some 5.15 kernels); read without it")
MASKS_ONLY = ("sysfs has no *_list file where one was expected (an older kernel): CPUs read from the bitmap files "
              "(cpumap, thread_siblings, core_siblings, local_cpus)")
PER_CPU_ONLINE = ("%s/online is missing: which CPUs are online was read from each cpuN/online" % CPU_DIR)


def _strip(text):
    return None if text is None else text.strip()


def _note_once(warnings, line):
    if line not in warnings:
        warnings.append(line)


def _list_text(text, warnings):
    """A list file's text without the NUL some kernels write after it."""
    if text is not None and "\0" in text:
        cut = text.rstrip("\0\n \t")
        if "\0" not in cut:
            _note_once(warnings, NUL_LISTS)
            return cut
    return text


def _parsed_or_warn(parse, text, path, warnings):
    """parse(text), or None with a warning naming the file."""
    try:
        return parse(text)
    except ValueError as exc:
        warnings.append("%s: %s" % (path, exc))
        return None


def _cpulist_or_warn(reader, path, warnings, mask_path=None):
    """The CPUs a list file names (None when unreadable); with mask_path,
    the bitmap file beside it is read when the list file is missing."""
    text = _list_text(reader.read(path), warnings)
    if text is not None:
        return _parsed_or_warn(parse_cpulist, text, path, warnings)
    mask = None if mask_path is None else _list_text(reader.read(mask_path), warnings)
    if mask is None:
        return None
    cpus = _parsed_or_warn(parse_cpumask, mask, mask_path, warnings)
    if cpus is not None:
        _note_once(warnings, MASKS_ONLY)
    return cpus


def _int_or_none(text):
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


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
        cpus = _cpulist_or_warn(reader, base + "/cpulist", warnings, base + "/cpumap")
        if cpus is not None and online_cpus is not None:
            cpus = [c for c in cpus if c in online_cpus]
        memory_mb = None
        meminfo = reader.read(base + "/meminfo")
        if meminfo is not None:
            match = _MEMTOTAL.search(meminfo)
            if match:
                memory_mb = int(match.group(1)) // 1024
            else:
                warnings.append("%s/meminfo has no MemTotal line" % base)
        distances = {}
        row = reader.read(base + "/distance")
        if row is not None:
            values = row.split()
            if len(values) == len(ids) and all(v.isdigit() for v in values):
                distances = dict(zip(ids, (int(v) for v in values)))
            else:
                warnings.append(
                    "%s/distance %s does not hold one distance per node (%d nodes)" % (base, excerpt(row.strip()), len(ids))
                )
        nodes.append({
            "id": node_id,
            "cpus": None if cpus is None else format_cpulist(cpus),
            "memory_mb": memory_mb,
            "distances": distances,
        })
    return nodes


def _online_per_cpu(reader, listed, warnings):
    """Online CPUs from each cpuN/online when the global list is missing
    (None when no CPU has the file). cpu0 often has none: it cannot go
    offline, so a CPU without the file is online."""
    states = dict((cpu, _strip(reader.read("%s/cpu%d/online" % (CPU_DIR, cpu)))) for cpu in listed)
    if not any(state is not None for state in states.values()):
        return None
    _note_once(warnings, PER_CPU_ONLINE)
    return [cpu for cpu in listed if states[cpu] != "0"]


def _packages(reader, cpus, warnings):
    """{cpu: package id}: physical_package_id; where a CPU has none (or -1,
    as older ARM kernels write), the groups of core_siblings are numbered
    in order of their first CPU, as hwloc does."""
    package, groups = {}, {}
    for cpu in cpus:
        base = "%s/cpu%d/topology" % (CPU_DIR, cpu)
        pkg = _int_or_none(reader.read(base + "/physical_package_id"))
        if pkg is not None and pkg >= 0:
            package[cpu] = pkg
            continue
        group = _cpulist_or_warn(reader, base + "/core_siblings_list", warnings, base + "/core_siblings")
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
    online = _cpulist_or_warn(reader, CPU_DIR + "/online", warnings)
    names = reader.listdir(CPU_DIR) or []
    listed = sorted(int(m.group(1)) for m in (_CPU_NAME.match(n) for n in names) if m)
    if online is None and listed:
        online = _online_per_cpu(reader, listed, warnings) or listed
    online_set = None if online is None else set(online)
    offline = [c for c in listed if online_set is not None and c not in online_set]
    siblings = set()
    for cpu in (online or []):
        base = "%s/cpu%d/topology" % (CPU_DIR, cpu)
        threads = _cpulist_or_warn(reader, base + "/thread_siblings_list", warnings, base + "/thread_siblings")
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


def node_cpu_sets(nodes):
    """[(node id, set of its CPUs)] for the nodes whose cpulist reads."""
    sets = []
    for node in nodes:
        if node.get("cpus") is None:
            continue
        try:
            sets.append((node["id"], set(parse_cpulist(node["cpus"]))))
        except ValueError:
            continue
    return sets


def node_for_cpus(cpus, nodes, cpu_sets=None):
    """The id of the one node whose cpulist covers every CPU in cpus
    (a list of ints), or None when none or several do. cpu_sets: what
    node_cpu_sets(nodes) gives, when the caller asks many times."""
    wanted = set(cpus)
    if not wanted:
        return None
    matches = [nid for nid, have in (node_cpu_sets(nodes) if cpu_sets is None else cpu_sets)
               if have and wanted <= have]
    return matches[0] if len(matches) == 1 else None


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
        value = _strip(reader.read("%s/%s" % (base, name)))
        return None if not value or value.lower().startswith("unknown") else value

    def width(name):
        value = _int_or_none(reader.read("%s/%s" % (base, name)))
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
    """(numa_node, local_cpus, reported) of a device.

    numa_node -1 means the firmware did not say: for a NIC the one node
    whose CPUs cover local_cpulist is taken; for a GPU numa_node stays None
    and `reported` keeps the raw value, so that assembly can weigh the
    other sources first and warn once.
    """
    local = _cpulist_or_warn(reader, base + "/local_cpulist", warnings, base + "/local_cpus")
    local_cpus = None if not local else format_cpulist(local)
    raw = _strip(reader.read(base + "/numa_node"))
    node = _int_or_none(raw)
    if raw is not None and node is None:
        warnings.append("%s/numa_node %s is not a number" % (base, excerpt(raw)))
    reported = None
    if node is not None and node < 0:
        reported = raw if len(raw) <= 20 else raw[:20] + "..."
        node = node_for_cpus(local or [], nodes, cpu_sets) if kind == "NIC" else None
    elif node is not None and nodes and node not in [n["id"] for n in nodes]:
        warnings.append("%s %s reports numa_node %d, which is not a NUMA node here" % (kind, bus_id, node))
    return node, local_cpus, reported


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
        pci_class = _strip(reader.read(base + "/class"))
        if pci_class is None:
            warnings.append("%s/class cannot be read: PCI device %s is not classified (a GPU or NIC there "
                            "is left out)" % (base, bus_id))
            continue
        pci_class = pci_class.lower()
        vendor_id = (_strip(reader.read(base + "/vendor")) or "").lower()
        prefix = pci_class[:6]
        if prefix in GPU_CLASSES and vendor_id in GPU_VENDORS:
            if len(gpus) >= MAX_GPUS:
                line = "%s: more than %d GPUs; the rest is not read" % (PCI_DIR, MAX_GPUS)
                if line not in warnings:
                    warnings.append(line)
                continue
            node, local_cpus, reported = _locality(reader, base, bus_id, "GPU", nodes, warnings)
            gpus.append({
                "index": None,
                "pci_bus_id": bus_id,
                "uuid": None,
                "name": None,
                "memory_mb": None,
                "numa_node": node,
                "numa_node_reported": reported,
                "local_cpus": local_cpus,
                "mig_mode": None,
                "pcie": _pcie(reader, base),
                "vendor": GPU_VENDORS[vendor_id],
                "device_id": _strip(reader.read(base + "/device")),
                "pci_class": pci_class,
                "pci_path": _pci_chain(reader, entry),
            })
        else:
            net, rdma = _interfaces(reader, base)
            if prefix not in NIC_CLASSES and not net and not rdma:
                continue
            node, local_cpus, dummy_reported = _locality(reader, base, bus_id, "NIC", nodes, warnings, cpu_sets)
            nics.append({
                "id": bus_id,
                "pci_bus_id": bus_id,
                "vendor": NIC_VENDORS.get(vendor_id, "other"),
                "interfaces": sorted(set(net) | set(rdma)),
                "net_interfaces": net,
                "rdma_devices": rdma,
                "pci_class": pci_class,
                "numa_node": node,
                "local_cpus": local_cpus,
                "pcie": _pcie(reader, base),
                "pci_path": _pci_chain(reader, entry),
            })
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
            values[parts[0]] = _int_or_none(parts[1])
    return values


def kfd_gpu_nodes(reader):
    """AMD GPUs in KFD topology order: [(kfd node number, bus id)].

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
        found.append((node, "%04x:%02x:%02x.%d" % (
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


def _index_amd_gpus(gpus, gpu_nodes, warnings):
    """Give AMD GPUs their ROCm device index (KFD order). Without a KFD
    topology the index stays unknown: PCI order is only a guess on ROCm."""
    order = dict((bus_id, position) for position, (dummy, bus_id) in enumerate(gpu_nodes))
    for gpu in gpus:
        if gpu["vendor"] != "amd":
            continue
        gpu["index"] = order.get(gpu["pci_bus_id"])
        if gpu["index"] is None:
            warnings.append("AMD GPU %s is not in the KFD topology (%s); its ROCm device index is unknown"
                            % (gpu["pci_bus_id"], KFD_NODES))


def check_cgroup_slice(value):
    """The cgroup path of the services (below /sys/fs/cgroup, "system.slice"), checked; ValueError otherwise."""
    if value is None or value == "":
        return ""
    absolute_path("cgroup_slice", "/" + value.lstrip("/") if isinstance(value, str) else value)
    return value.strip("/")


def _unescape_mount(field):
    """A mountinfo path field: octal escapes (\\040 is a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cgroup_mounts(reader, warnings):
    """(cgroup2 mount point, cgroup v1 cpuset mount point) from
    /proc/self/mountinfo; the usual places when it cannot be read or does
    not say. A mount point that is no plain absolute path is refused."""
    text = reader.read(MOUNTINFO)
    v2 = v1 = None
    for line in (text or "").splitlines()[:10000]:
        mine, sep, theirs = line.partition(" - ")
        fields, tail = mine.split(), theirs.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup2", "cgroup"):
            continue
        point = _unescape_mount(fields[4])
        if len(point) > 4096 or not point.startswith("/") or "/../" in point + "/" or "\0" in point:
            warnings.append("%s: cgroup mount point %s is not a plain absolute path; not read" % (MOUNTINFO, excerpt(point)))
            continue
        if tail[0] == "cgroup2" and v2 is None:
            v2 = point.rstrip("/") or "/"
        elif tail[0] == "cgroup" and "cpuset" in tail[2].split(",") and v1 is None:
            v1 = point.rstrip("/") or "/"
    if text is None or (v1 is None and v2 is None):
        return CGROUP_DIR, CGROUP_V1_CPUSET_DIR
    return v2, v1


def _cpuset_files(reader, slice_name, warnings):
    """The cpuset files that may limit the services, most specific first:
    cgroup v2 (cpuset.cpus.effective) where mountinfo says it is mounted,
    then cgroup v1's cpuset controller (cpuset.effective_cpus, cpuset.cpus),
    each for the slice, then for the root this host shows."""
    v2, v1 = cgroup_mounts(reader, warnings)
    paths = []
    for top, names in ((v2, ("cpuset.cpus.effective",)), (v1, ("cpuset.effective_cpus", "cpuset.cpus"))):
        if top is None:
            continue
        top = "" if top == "/" else top
        for where in (["%s/%s" % (top, slice_name)] if slice_name else []) + [top]:
            paths.extend("%s/%s" % (where, name) for name in names)
    return paths


def cpu_limits(reader, warnings, cgroup_slice=DEFAULT_SLICE):
    """The CPUs services may run on, from what limits them: [(reason, allowed CPUs or None, denied CPUs or None)].

    - the cgroup v2 cpuset of the services' slice
      (/sys/fs/cgroup/<slice>/cpuset.cpus.effective, or wherever
      /proc/self/mountinfo says cgroup2 is mounted), else of the cgroup
      root this host shows (an LXC container's or a pod's own root); on
      cgroup v1 the cpuset controller's cpuset.effective_cpus/cpuset.cpus
      (/sys/fs/cgroup/cpuset/..., RHEL 8);
    - this process's Cpus_allowed_list in /proc/self/status (a container, a
      taskset or a CPUAffinity= around the whole session);
    - /sys/devices/system/cpu/isolated (isolcpus=): those CPUs the
      scheduler does not balance onto, not to be handed out.

    Only what could be read is listed: [] means nothing limits the CPUs as
    far as these files tell (or none was read, as in an nvidia-smi capture).
    """
    limits = []
    slice_name = (cgroup_slice or "").strip("/")
    for path in _cpuset_files(reader, slice_name, warnings):
        text = _list_text(reader.read(path), warnings)
        if text is None:
            continue
        if not text.strip():
            continue  # a cpuset that inherits and shows nothing yet: no limit from it
        try:
            limits.append(("outside %s (cgroup cpuset)" % path, set(parse_cpulist(text)), None))
        except ValueError as exc:
            warnings.append("%s: %s" % (path, exc))
        break
    status = reader.read(PROC_STATUS)
    if status is not None:
        match = _CPUS_ALLOWED.search(status)
        try:
            if match is None:
                raise ValueError("no Cpus_allowed_list line")
            limits.append(("outside Cpus_allowed_list of %s" % PROC_STATUS, set(parse_cpulist(match.group(1))), None))
        except ValueError as exc:
            warnings.append("%s: %s" % (PROC_STATUS, exc))
    isolated = _cpulist_or_warn(reader, ISOLATED, warnings)
    if isolated is not None:
        limits.append(("isolated (%s, isolcpus=)" % ISOLATED, None, set(isolated)))
    return limits


def _apply_limits(nodes, limits, warnings):
    """Each node's usable_cpus: its CPUs that every limit allows; a warning
    per limit that takes CPUs away, naming them. usable_cpus is None when no
    limit was read at all (unknown, not unrestricted)."""
    taken_by = []
    for node in nodes:
        if node["cpus"] is None or not limits:
            node["usable_cpus"] = None if node["cpus"] is None or not limits else node["cpus"]
            continue
        usable = set(parse_cpulist(node["cpus"]))
        for position, (dummy_reason, allowed, denied) in enumerate(limits):
            gone = (usable - allowed) if allowed is not None else (usable & denied)
            if gone:
                usable -= gone
                taken_by.append((position, gone))
        node["usable_cpus"] = format_cpulist(usable)
    for position, (reason, dummy_allowed, dummy_denied) in enumerate(limits):
        gone = set()
        for where, cpus in taken_by:
            if where == position:
                gone |= cpus
        if gone:
            warnings.append("CPUs %s are not usable by services: %s; they are left out of usable_cpus"
                            % (format_cpulist(gone), reason))


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
        node_online = _cpulist_or_warn(reader, NODE_DIR + "/online", warnings)
        listed = set(n["id"] for n in nodes)
        gone = sorted(set(node_online or []) ^ listed) if node_online is not None else []
        warnings.append("CPUs %s are online but in no NUMA node%s; they belong to no node and no socket and are "
                        "left out" % (format_cpulist(stray), " (node(s) %s offline or missing)" % ", ".join(
                            map(str, gone)) if gone else ""))


def collect(reader, cgroup_slice=DEFAULT_SLICE):
    """Everything sysfs says, as plain dicts (see module docstring).

    Returns {numa_nodes, sockets, smt_siblings, offline_cpus, gpus, nics,
    links, warnings, found} where found is True when any sysfs data was
    read at all (a capture of nvidia-smi output alone has none).
    cgroup_slice: the cgroup (below /sys/fs/cgroup) whose cpuset limits the
    services' CPUs (cpu_limits).
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
    _apply_limits(nodes, cpu_limits(reader, warnings, cgroup_slice) if nodes else [], warnings)

    sockets = {}
    for node in nodes:
        node_cpus = parse_cpulist(node["cpus"]) if node["cpus"] else []
        packages = sorted(set(cpus["package"][c] for c in node_cpus if c in cpus["package"]))
        if len(packages) > 1:
            warnings.append("NUMA node %d has CPUs of several sockets %s" % (node["id"], packages))
        node["socket"] = packages[0] if packages else None
        for pkg in packages:
            sockets.setdefault(pkg, {"id": pkg, "numa_nodes": [], "cpus": []})
            sockets[pkg]["numa_nodes"].append(node["id"])
    for cpu, pkg in cpus["package"].items():
        if pkg in sockets:
            sockets[pkg]["cpus"].append(cpu)
    socket_list = []
    for pkg in sorted(sockets):
        sock = sockets[pkg]
        socket_list.append({"id": pkg, "numa_nodes": sorted(sock["numa_nodes"]), "cpus": format_cpulist(sock["cpus"])})

    gpus, nics = pci_devices(reader, nodes, warnings)
    found = bool(nodes or cpus["online"] or gpus or nics or reader.listdir(PCI_DIR))
    links = pci_tree_links(gpus, nodes)
    nic_gpu_links(nics, gpus, nodes)
    gpu_nodes = kfd_gpu_nodes(reader) if any(g["vendor"] == "amd" for g in gpus) else []
    _index_amd_gpus(gpus, gpu_nodes, warnings)
    # XGMI beats any PCIe path between the same two AMD GPUs.
    for a, row in kfd_xgmi_links(reader, warnings, gpu_nodes).items():
        for b, cls in row.items():
            if a in links and b in links[a]:
                links[a][b] = cls
    return {
        "numa_nodes": nodes,
        "sockets": socket_list,
        "smt_siblings": cpus["smt_siblings"],
        "offline_cpus": format_cpulist(cpus["offline"]),
        "gpus": gpus,
        "nics": nics,
        "links": links,
        "warnings": warnings,
        "found": found,
    }
