# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What limits the CPUs services may run on: the cgroup cpuset of their
slice, this process's Cpus_allowed_list, isolcpus=. cpu_limits() reads the
limits through the reader seam, apply_limits() turns them into each NUMA
node's usable_cpus. Standard library only (runs on targets).
"""

from __future__ import annotations

import re
from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import absolute_path
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_common import (
    CPU_DIR,
    cpulist_or_warn,
    list_text,
)

CGROUP_DIR = "/sys/fs/cgroup"
CGROUP_V1_CPUSET_DIR = CGROUP_DIR + "/cpuset"  # where cgroup v1 mounts the cpuset controller by default
MOUNTINFO = "/proc/self/mountinfo"
PROC_STATUS = "/proc/self/status"
ISOLATED = CPU_DIR + "/isolated"
DEFAULT_SLICE = "system.slice"
MAX_MOUNTINFO_LINES = 10000
_CPUS_ALLOWED = re.compile(r"^Cpus_allowed_list:[ \t]*(\S*)[ \t]*$", re.MULTILINE)

# One limit: allowed (the only CPUs it lets services use) or denied (CPUs
# it takes away); the other is None.
CpuLimit = namedtuple("CpuLimit", "reason allowed denied")
CgroupMounts = namedtuple("CgroupMounts", "v2 v1_cpuset")


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
    """CgroupMounts(cgroup2 mount point, cgroup v1 cpuset mount point) from
    /proc/self/mountinfo; the usual places when it cannot be read or does
    not say. A mount point that is no plain absolute path is refused."""
    text = reader.read(MOUNTINFO)
    v2 = v1 = None
    for line in (text or "").splitlines()[:MAX_MOUNTINFO_LINES]:
        mine, sep, theirs = line.partition(" - ")
        fields, tail = mine.split(), theirs.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup2", "cgroup"):
            continue
        fs_type, options = tail[0], tail[2]
        point = _unescape_mount(fields[4])
        if len(point) > 4096 or not point.startswith("/") or "/../" in point + "/" or "\0" in point:
            warnings.append("%s: cgroup mount point %s is not a plain absolute path; not read" % (MOUNTINFO, excerpt(point)))
            continue
        if fs_type == "cgroup2" and v2 is None:
            v2 = point.rstrip("/") or "/"
        elif fs_type == "cgroup" and "cpuset" in options.split(",") and v1 is None:
            v1 = point.rstrip("/") or "/"
    if text is None or (v1 is None and v2 is None):
        return CgroupMounts(CGROUP_DIR, CGROUP_V1_CPUSET_DIR)
    return CgroupMounts(v2, v1)


# The cpuset files of the CPUs and of the memory nodes: (cgroup v2 names, cgroup v1 names).
CPUSET_CPUS = (("cpuset.cpus.effective",), ("cpuset.effective_cpus", "cpuset.cpus"))
CPUSET_MEMS = (("cpuset.mems.effective",), ("cpuset.effective_mems", "cpuset.mems"))


def cpuset_files(reader, slice_name, warnings, names=CPUSET_CPUS):
    """The cpuset files that may limit the services, most specific first:
    cgroup v2 (cpuset.cpus.effective) where mountinfo says it is mounted,
    then cgroup v1's cpuset controller (cpuset.effective_cpus, cpuset.cpus),
    each for the slice, then for the root this host shows. names: the files
    to look for (CPUSET_CPUS, or CPUSET_MEMS for the memory nodes)."""
    mounts = cgroup_mounts(reader, warnings)
    paths = []
    for top, names in ((mounts.v2, names[0]), (mounts.v1_cpuset, names[1])):
        if top is None:
            continue
        top = "" if top == "/" else top
        for where in (["%s/%s" % (top, slice_name)] if slice_name else []) + [top]:
            paths.extend("%s/%s" % (where, name) for name in names)
    return paths


def _cpuset_limit(reader, slice_name, warnings):
    """The first cpuset file that reads and names CPUs, as a limit (None when none does)."""
    for path in cpuset_files(reader, slice_name, warnings):
        text = list_text(reader.read(path), warnings)
        if text is None:
            continue
        if not text.strip():
            continue  # a cpuset that inherits and shows nothing yet: no limit from it
        try:
            return CpuLimit("outside %s (cgroup cpuset)" % path, set(parse_cpulist(text)), None)
        except ValueError as exc:
            warnings.append("%s: %s" % (path, exc))
        return None
    return None


def _status_limit(reader, warnings):
    """This process's Cpus_allowed_list as a limit (None when the file does not read or says nothing)."""
    status = reader.read(PROC_STATUS)
    if status is None:
        return None
    match = _CPUS_ALLOWED.search(status)
    try:
        if match is None:
            raise ValueError("no Cpus_allowed_list line")
        return CpuLimit("outside Cpus_allowed_list of %s" % PROC_STATUS, set(parse_cpulist(match.group(1))), None)
    except ValueError as exc:
        warnings.append("%s: %s" % (PROC_STATUS, exc))
    return None


def cpu_limits(reader, warnings, cgroup_slice=DEFAULT_SLICE):
    """The CPUs services may run on, from what limits them: [CpuLimit(reason, allowed CPUs or None, denied CPUs or None)].

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
    slice_name = (cgroup_slice or "").strip("/")
    limits = [limit for limit in (_cpuset_limit(reader, slice_name, warnings), _status_limit(reader, warnings))
              if limit is not None]
    isolated = cpulist_or_warn(reader, ISOLATED, warnings)
    if isolated is not None:
        limits.append(CpuLimit("isolated (%s, isolcpus=)" % ISOLATED, None, set(isolated)))
    return limits


def apply_limits(nodes, limits, warnings):
    """Each node's usable_cpus: its CPUs that every limit allows; a warning
    per limit that takes CPUs away, naming them. usable_cpus is None when no
    limit was read at all (unknown, not unrestricted)."""
    gone_by = [set() for dummy in limits]  # per limit, the CPUs it took
    for node in nodes:
        if node["cpus"] is None or not limits:
            node["usable_cpus"] = None if node["cpus"] is None or not limits else node["cpus"]
            continue
        usable = set(parse_cpulist(node["cpus"]))
        for position, limit in enumerate(limits):
            gone = (usable - limit.allowed) if limit.allowed is not None else (usable & limit.denied)
            if gone:
                usable -= gone
                gone_by[position] |= gone
        node["usable_cpus"] = format_cpulist(usable)
    for limit, gone in zip(limits, gone_by):
        if gone:
            warnings.append("CPUs %s are not usable by services: %s; they are left out of usable_cpus"
                            % (format_cpulist(gone), limit.reason))
