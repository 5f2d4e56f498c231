# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""hwloc as the oracle: lay a capture's sysfs out as a tree, let `lstopo`
read it as its fsroot, and read hwloc's XML answer back into the fields
numa_facts reports. The XML is read here with ElementTree on purpose, not
with the collection's own hwloc XML reader, so that the two stay
independent witnesses."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET

CPU_DIR = "/sys/devices/system/cpu"
NODE_DIR = "/sys/devices/system/node"
# hwloc reads the cpumask files; captures often hold only the lists.
_MASK_OF_LIST = (("cpulist", "cpumap"), ("local_cpulist", "local_cpus"), ("thread_siblings_list", "thread_siblings"),
                 ("core_siblings_list", "core_siblings"), ("package_cpus_list", "package_cpus"),
                 ("core_cpus_list", "core_cpus"))


def _mask(cpus):
    """A kernel cpumask ("00000000,00000003") for a set of CPU ids."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = []
    while True:
        words.append("%08x" % (value & 0xFFFFFFFF))
        value >>= 32
        if not value:
            break
    return ",".join(reversed(words))


def _cpus(text):
    cpus = set()
    for part in text.strip().strip("\0").strip().split(","):
        if not part:
            continue
        lo, dummy, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _hwloc_needs(files):
    """Files hwloc 2.9 insists on that the capture may leave out, derived
    from what the capture holds: the package and thread cpumasks (hwloc
    reads the masks, not physical_package_id or the *_list files), and
    /proc/meminfo (without it hwloc reads no node's memory)."""
    extra = {}
    packages = {}
    for path, text in files.items():
        if path.startswith(CPU_DIR + "/cpu") and path.endswith("/topology/physical_package_id"):
            cpu = int(path[len(CPU_DIR + "/cpu"):].split("/")[0])
            packages.setdefault(int(str(text).strip()), set()).add(cpu)
    for package, cpus in packages.items():
        for cpu in cpus:
            base = "%s/cpu%d/topology/" % (CPU_DIR, cpu)
            if base + "package_cpus" not in files and base + "core_siblings" not in files:
                extra[base + "package_cpus"] = _mask(cpus) + "\n"
            siblings = files.get(base + "thread_siblings_list")
            if siblings is not None and base + "core_cpus" not in files:
                # hwloc takes core_cpus (not thread_siblings) once package_cpus exists.
                extra[base + "core_cpus"] = _mask(_cpus(str(siblings))) + "\n"
            if siblings is not None and base + "core_id" not in files:
                extra[base + "core_id"] = "%d\n" % min(_cpus(str(siblings)))
    for path, text in files.items():
        for list_name, mask_name in _MASK_OF_LIST:
            if path.endswith("/" + list_name):
                mask_path = path[:-len(list_name)] + mask_name
                if mask_path not in files:
                    extra[mask_path] = _mask(_cpus(str(text))) + "\n"
    if "/proc/meminfo" not in files:
        total = 0
        for path, text in files.items():
            if path.startswith(NODE_DIR + "/node") and path.endswith("/meminfo"):
                for line in str(text).splitlines():
                    if "MemTotal:" in line:
                        total += int(line.split("MemTotal:")[1].split()[0])
        extra["/proc/meminfo"] = "MemTotal:       %d kB\nMemFree:        0 kB\n" % total
    return extra


def write_tree(capture, root):
    """Lay out a capture as a directory tree under root: symlinks first
    (their targets' directories made), then files through them, then the
    files hwloc needs (_hwloc_needs); empty recorded directories made."""
    root = str(root)
    files = dict(capture.get("files") or {})
    for path, link in sorted((capture.get("symlinks") or {}).items()):
        where = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(where), exist_ok=True)
        target = os.path.normpath(os.path.join(os.path.dirname(where), link)) if not link.startswith("/") \
            else os.path.join(root, link.lstrip("/"))
        os.makedirs(target, exist_ok=True)
        if not os.path.lexists(where):
            os.symlink(link if not link.startswith("/") else os.path.relpath(target, os.path.dirname(where)), where)
    files.update(_hwloc_needs(files))
    for path, content in files.items():
        where = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(where, "w") as handle:
            handle.write("" if content is None else str(content))
    for path, names in (capture.get("directories") or {}).items():
        for name in names or []:
            where = os.path.join(root, path.lstrip("/"), name)
            if not os.path.lexists(where):  # a listed name with no content: an empty directory
                os.makedirs(where)


def lstopo_xml(root, lstopo="lstopo", timeout=60):
    """hwloc's XML export of the tree under root (lstopo --input DIR)."""
    env = dict(os.environ, LANG="C", LC_ALL="C", HWLOC_THISSYSTEM="0")
    done = subprocess.run([lstopo, "--if", "fsroot", "--input", str(root), "--whole-io", "--of", "xml", "-"], check=False,
                          capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise AssertionError("lstopo failed (%d): %s" % (done.returncode, done.stderr.strip()[:2000]))
    return done.stdout


def _mask_cpus(text):
    value = 0
    for word in text.replace("0x", "").split(","):
        value = (value << 32) | int(word or "0", 16)
    return set(bit for bit in range(value.bit_length()) if value >> bit & 1)


def read_hwloc(xml_text):
    """What hwloc found, in numa_facts' terms:
    {packages: {id: cpus}, nodes: {id: {cpus, memory_mb}}, distances: {id: {id: d}},
     smt: sorted tuples of PU ids per Core, pci: {bus id: cpus of its locality}}."""
    root = ET.fromstring(xml_text.split("\n", 2)[2] if "<!DOCTYPE" in xml_text else xml_text)
    out = {"packages": {}, "nodes": {}, "distances": {}, "smt": [], "pci": {}, "os_devices": {}}

    def walk(element, cpuset):
        for child in element.findall("object"):
            kind = child.get("type")
            here = _mask_cpus(child.get("cpuset")) if child.get("cpuset") else cpuset
            if kind == "Package":
                # No os_index when the tree has no physical_package_id: hwloc's own order then.
                out["packages"][int(child.get("os_index", len(out["packages"])))] = here
            elif kind == "NUMANode":
                memory = child.get("local_memory")
                out["nodes"][int(child.get("os_index"))] = {
                    "cpus": here, "memory_mb": None if memory is None else int(memory) // (1024 * 1024)}
            elif kind == "Core":
                pus = tuple(sorted(int(pu.get("os_index")) for pu in child.iter("object") if pu.get("type") == "PU"))
                if pus:
                    out["smt"].append(pus)
            elif kind == "PCIDev":
                out["pci"][child.get("pci_busid")] = cpuset
                out["os_devices"][child.get("pci_busid")] = sorted(
                    os.get("name") for os in child.findall("object") if os.get("type") == "OSDev")
            walk(child, here)

    walk(root, set())
    for dist in root.iter("distances2"):
        if dist.get("type") != "NUMANode":
            continue
        indexes = [int(i) for i in " ".join(i.text for i in dist.findall("indexes")).split()]
        values = [int(v) for v in " ".join(v.text for v in dist.findall("u64values")).split()]
        n = len(indexes)
        out["distances"] = dict((indexes[i], dict((indexes[j], values[i * n + j]) for j in range(n))) for i in range(n))
    out["smt"].sort()
    return out
