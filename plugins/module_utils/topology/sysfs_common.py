# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What every sysfs reader shares: list files read through the reader seam
(NUL bytes some kernels write, bitmap files older kernels have instead),
numbers that may be missing, and the one NUMA node that covers some CPUs.

Nothing here raises on what a host wrote: an unreadable value is None, a
value that makes no sense adds a warning naming the file. Standard library
only (runs on targets).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist, parse_cpumask

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"

NUL_LISTS = ("sysfs list files end in a NUL byte (the kernel's bitmap_print_to_buf copies the terminator, "
             "as on some 5.15 kernels); read without it")
MASKS_ONLY = ("sysfs has no *_list file where one was expected (an older kernel): CPUs read from the bitmap files "
              "(cpumap, thread_siblings, core_siblings, local_cpus)")


def stripped(text):
    return None if text is None else text.strip()


def int_or_none(text):
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def note_once(warnings, line):
    if line not in warnings:
        warnings.append(line)


def list_text(text, warnings):
    """A list file's text without the NUL some kernels write after it."""
    if text is not None and "\0" in text:
        cut = text.rstrip("\0\n \t")
        if "\0" not in cut:
            note_once(warnings, NUL_LISTS)
            return cut
    return text


def parsed_or_warn(parse, text, path, warnings):
    """parse(text), or None with a warning naming the file."""
    try:
        return parse(text)
    except ValueError as exc:
        warnings.append("%s: %s" % (path, exc))
        return None


def cpulist_or_warn(reader, path, warnings, mask_path=None):
    """The CPUs a list file names (None when unreadable); with mask_path,
    the bitmap file beside it is read when the list file is missing."""
    text = list_text(reader.read(path), warnings)
    if text is not None:
        return parsed_or_warn(parse_cpulist, text, path, warnings)
    mask = None if mask_path is None else list_text(reader.read(mask_path), warnings)
    if mask is None:
        return None
    cpus = parsed_or_warn(parse_cpumask, mask, mask_path, warnings)
    if cpus is not None:
        note_once(warnings, MASKS_ONLY)
    return cpus


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
