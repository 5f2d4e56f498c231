# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Test-only filters for the Molecule verify playbooks: read back, from a
rendered unit, where it binds its process (GPUs, CPUs, NUMA nodes)."""

from __future__ import annotations

import shlex

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices


def _logical_lines(text):
    """Unit lines with backslash continuations joined."""
    lines, current = [], ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        lines.append(current + raw)
        current = ""
    return lines


def unit_placement(text):
    """Return {gpu_indices, cpus, cpu_nodes, mem_nodes, mem_policy, argv}
    of a unit rendered by role gpufleet.numa.vllm (numactl or systemd binding)."""
    settings = {}
    env = {}
    for line in _logical_lines(text):
        key, sep, value = line.partition("=")
        if not sep or line.lstrip().startswith(("#", ";")):
            continue
        key = key.strip()
        if key == "Environment":
            for item in shlex.split(value):
                name, dummy, val = item.partition("=")
                env[name] = val
        else:
            settings[key] = value.strip()
    if "ExecStart" not in settings:
        raise AnsibleFilterError("unit has no ExecStart")
    argv = shlex.split(settings["ExecStart"])
    result = {"gpu_indices": [], "cpus": None, "cpu_nodes": None, "mem_nodes": None, "mem_policy": None, "argv": argv}
    # The GPUs are named by the device class's own variable (NVIDIA
    # CUDA_VISIBLE_DEVICES, AMD ROCR_VISIBLE_DEVICES; devices.py's table).
    for device in devices.CLASSES.values():
        if device.visible and env.get(device.visible[0]):
            result["gpu_indices"] = [int(i) for i in env[device.visible[0]].split(",")]
    if argv and argv[0].endswith("numactl"):
        for arg in argv[1:]:
            if not arg.startswith("--"):
                break
            opt, dummy, val = arg.partition("=")
            if opt == "--cpunodebind":
                result["cpu_nodes"] = parse_cpulist(val)
            elif opt == "--physcpubind":
                result["cpus"] = parse_cpulist(val)
            elif opt in ("--membind", "--interleave"):
                result["mem_nodes"] = parse_cpulist(val)
                result["mem_policy"] = "bind" if opt == "--membind" else "interleave"
    else:
        if "CPUAffinity" in settings:
            result["cpus"] = parse_cpulist(settings["CPUAffinity"].replace(" ", ","))
        if "NUMAMask" in settings:
            result["mem_nodes"] = parse_cpulist(settings["NUMAMask"].replace(" ", ","))
            result["mem_policy"] = settings.get("NUMAPolicy")
    return result


def cpulist_expand(text):
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"unit_placement": unit_placement, "cpulist_expand": cpulist_expand}
