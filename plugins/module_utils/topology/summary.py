# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Topology facts (docs/facts.md) as lines for a human. Standard library only."""

from __future__ import annotations


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
