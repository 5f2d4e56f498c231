# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Build small sysfs captures for tests: the files, symlinks and listings a
kernel shows, written out by path so readers can be exercised by path."""

from __future__ import annotations


class SysfsBuilder(object):
    def __init__(self, hostname="test-host"):
        self.files = {}
        self.symlinks = {}
        self.pci = []

    def node(self, node_id, cpus, memory_kb=None, distances=None):
        base = "/sys/devices/system/node/node%d" % node_id
        self.files[base + "/cpulist"] = cpus + "\n"
        if memory_kb is not None:
            self.files[base + "/meminfo"] = "Node %d MemTotal:       %d kB\nNode %d MemFree: 1 kB\n" % (
                node_id, memory_kb, node_id)
        if distances is not None:
            self.files[base + "/distance"] = " ".join(str(d) for d in distances) + "\n"
        return self

    def cpu(self, cpu, package, siblings):
        base = "/sys/devices/system/cpu/cpu%d/topology" % cpu
        self.files[base + "/physical_package_id"] = "%d\n" % package
        self.files[base + "/thread_siblings_list"] = siblings + "\n"
        return self

    def online(self, cpus):
        self.files["/sys/devices/system/cpu/online"] = cpus + "\n"
        return self

    def device(self, bus_id, chain, pci_class, vendor, numa_node="0", local_cpus=None,
               width=(16, 16), speed=("16.0 GT/s PCIe", "16.0 GT/s PCIe"), device="0x2330",
               net=(), infiniband=()):
        """chain: host bridge then bridges, e.g. ["pci0000:15", "0000:15:01.0"]."""
        base = "/sys/bus/pci/devices/" + bus_id
        self.pci.append(bus_id)
        self.symlinks[base] = "../../../devices/" + "/".join(list(chain) + [bus_id])
        real = "/sys/devices/" + "/".join(list(chain) + [bus_id])
        values = {
            "class": pci_class, "vendor": vendor, "device": device, "numa_node": numa_node,
            "local_cpulist": local_cpus, "current_link_width": width[0], "max_link_width": width[1],
            "current_link_speed": speed[0], "max_link_speed": speed[1],
        }
        for name, value in values.items():
            if value is not None:
                self.files["%s/%s" % (real, name)] = "%s\n" % value
        for name in net:
            self.files["%s/net/%s/ifindex" % (real, name)] = "2\n"
        for name in infiniband:
            self.files["%s/infiniband/%s/node_type" % (real, name)] = "1: CA\n"
        return self

    def capture(self, hostname="test-host", commands=None, nvml=None):
        data = {
            "capture_version": 1,
            "hostname": hostname,
            "files": dict(self.files),
            "symlinks": dict(self.symlinks),
            "directories": {"/sys/bus/pci/devices": sorted(self.pci)},
        }
        if commands:
            data["commands"] = commands
        if nvml is not None:
            data["nvml"] = nvml
        return data


def write_tree(capture, root):
    """Lay a capture's files and symlinks out under root (a path or str),
    as a real sysfs tree."""
    import os

    for path, content in capture["files"].items():
        target = os.path.join(str(root), path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as handle:
            handle.write(content)
    for path, link in capture["symlinks"].items():
        target = os.path.join(str(root), path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(link, target)
