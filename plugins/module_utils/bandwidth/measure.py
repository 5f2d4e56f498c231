# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What placement is worth on this host, measured (docs/bandwidth.md).

measure(reader, settings) reads the NUMA nodes from sysfs and runs, through
the reader seam (reader.run: the C locale, killed after its timeout), one
short child per measurement:

- memory: for each pair (CPU node C, memory node M), kernel.PROGRAM in
  mode memory under `numactl --cpunodebind=C --membind=M`; nodes without
  CPUs hold no CPU side, nodes without memory no memory side (each said in
  the notes);
- gpu: for each node N with CPUs and memory, the program in mode gpu under
  `numactl --cpunodebind=N --membind=N`: pinned copies to and from every
  GPU torch sees; the first child that finds no torch or no device ends
  the GPU part ("not measured: why").

The result is the `bandwidth` record of docs/bandwidth.md (GB/s = bytes
counted / best seconds / 1e9). Nothing is written on the host. Standard
library only (runs on targets); a CaptureReader replays recorded child
output through the same code.
"""

from __future__ import annotations

import json
import shlex
import time

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth.kernel import PROGRAM
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs import numa_nodes

RECORD_VERSION = 1
KERNELS = ("auto", "torch", "stdlib")
GPU_NODE = "/sys/bus/pci/devices/%s/numa_node"
# Bounds of the settings (docs/bandwidth.md "Bounds").
SIZE_MIB = (1, 16384)
SECONDS = (0.01, 60.0)
TIMEOUT = (1, 3600)


def check_settings(settings, names=None):
    """The module's options, each in range; ValueError names the option
    (or, with names: option -> variable, the variable it came from)."""
    def fail(option, rule):
        raise ValueError("%s: %s (got %r)" % ((names or {}).get(option, option), rule, settings.get(option)))
    size = settings.get("size_mib")
    if isinstance(size, bool) or not isinstance(size, int) or not SIZE_MIB[0] <= size <= SIZE_MIB[1]:
        fail("size_mib", "must be an integer %d-%d (MiB per buffer)" % SIZE_MIB)
    seconds = settings.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not SECONDS[0] <= seconds <= SECONDS[1]:
        fail("seconds", "must be a number %s-%s (seconds per measurement)" % SECONDS)
    timeout = settings.get("timeout")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not TIMEOUT[0] <= timeout <= TIMEOUT[1]:
        fail("timeout", "must be an integer %d-%d (seconds per child)" % TIMEOUT)
    if settings.get("kernel") not in KERNELS:
        fail("kernel", "must be one of %s" % ", ".join(KERNELS))
    return settings


def child_command(python, mode, kernel, size_bytes, seconds, cpu_node, memory_node):
    """The command line of one child, as the reader runs (and a capture records) it."""
    return " ".join(shlex.quote(word) for word in (
        "numactl", "--cpunodebind=%d" % cpu_node, "--membind=%d" % memory_node, python, "-c", PROGRAM, mode,
        kernel, str(size_bytes), repr(float(seconds))))


def _answer(reader, command):
    """(the child's JSON answer, None) or (None, why it has none)."""
    before = len(getattr(reader, "errors", []))
    out = reader.run(command)
    if out is None:
        errors = getattr(reader, "errors", [])[before:]
        why = errors[-1] if errors else "no output (numactl or the Python is missing, or the child failed)"
        # The reader names the whole command: the program's text is noise here.
        why = why[len(command):].lstrip(": ") if why.startswith(command) else why
        return None, "the child failed: %s" % excerpt(why, 300, quote=False)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return None, "the child printed no answer (%s)" % excerpt(out.strip()[-200:], 200, quote=False)
    if "error" in answer:
        return None, "the child failed: %s" % excerpt(str(answer["error"]), 300, quote=False)
    return answer, None


def _gbps(count, seconds):
    if not isinstance(count, int) or not isinstance(seconds, (int, float)) or seconds <= 0:
        return None
    return round(count / seconds / 1e9, 2)


def _nodes(reader, notes):
    warnings = []
    nodes = numa_nodes(reader, warnings)
    cpu_nodes = [n["id"] for n in nodes if n["cpus"]]
    memory_nodes = [n["id"] for n in nodes if n["memory_mb"]]
    for node in nodes:
        if not node["cpus"]:
            notes.append("NUMA node %d: no CPUs (memory only): no measurement runs on its CPUs" % node["id"])
        if not node["memory_mb"]:
            notes.append("NUMA node %d: no memory: no measurement allocates on it" % node["id"])
    return cpu_nodes, memory_nodes


def _memory(reader, settings, cpu_nodes, memory_nodes):
    out = {"method": None, "pairs": [], "notes": []}
    for cpu_node in cpu_nodes:
        for memory_node in memory_nodes:
            answer, why = _answer(reader, child_command(settings["python"], "memory", settings["kernel"],
                                                        settings["size_mib"] << 20, settings["seconds"], cpu_node,
                                                        memory_node))
            gbps = None if answer is None else _gbps(answer.get("bytes"), answer.get("seconds"))
            if gbps is None:
                out["notes"].append("CPU node %d, memory node %d: not measured: %s"
                                    % (cpu_node, memory_node, why or "the child's answer holds no figure"))
                continue
            out["method"] = out["method"] or str(answer.get("method"))
            out["pairs"].append({"cpu_node": cpu_node, "memory_node": memory_node, "gbps": gbps,
                                 "threads": answer.get("threads") if isinstance(answer.get("threads"), int) else None})
    return out


def _bus_id(text):
    try:
        return normalize_bus_id(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _gpu_node(reader, gpu):
    text = reader.read(GPU_NODE % gpu) if gpu else None
    try:
        node = int(text.strip())
    except (AttributeError, ValueError):
        return None
    return node if node >= 0 else None


def _gpus(reader, settings, nodes):
    out = {"method": None, "copies": [], "notes": []}
    if not settings.get("gpus", True):
        out["notes"].append("not measured: gpus is false")
        return out
    for node in nodes:
        answer, why = _answer(reader, child_command(settings["python"], "gpu", settings["kernel"],
                                                    settings["size_mib"] << 20, settings["seconds"], node, node))
        if answer is not None and "skipped" in answer:
            out["notes"].append("not measured: %s" % excerpt(str(answer["skipped"]), 300, quote=False))
            return out
        if answer is None or not isinstance(answer.get("copies"), list):
            out["notes"].append("NUMA node %d: not measured: %s" % (node, why or "the child's answer holds no copies"))
            continue
        out["method"] = str(answer.get("method"))
        for copy in answer["copies"]:
            gpu = _bus_id(copy.get("gpu"))
            index = copy.get("index") if isinstance(copy.get("index"), int) else None
            h2d, d2h = (_gbps(copy.get("bytes"), copy.get(k)) for k in ("h2d_seconds", "d2h_seconds"))
            if h2d is None or d2h is None:
                out["notes"].append("NUMA node %d, GPU %s: the child's answer holds no figure" % (node, index))
                continue
            out["copies"].append({"node": node, "gpu": gpu or "GPU%s" % index, "index": index,
                                  "gpu_node": _gpu_node(reader, gpu), "name": str(copy.get("name") or "")[:200],
                                  "h2d_gbps": h2d, "d2h_gbps": d2h})
    return out


def choose_python(candidates, which, own):
    """(the Python the children run, a note or None): the first candidate
    `which` finds (the engine's own interpreter, for its torch), else
    `own` (the module's interpreter: the standard-library kernel)."""
    for candidate in candidates:
        if candidate and which(candidate):
            return candidate, None
    tried = ", ".join(c for c in candidates if c) or "none given"
    return own, ("no engine Python found (%s): measured with %s, the module's own Python (without torch: "
                 "standard-library kernel, no GPU copies)" % (tried, own))


def measure(reader, settings, now=None):
    """The `bandwidth` record of this host (module docstring). settings:
    python, kernel, size_mib, seconds, timeout (the reader's), gpus."""
    check_settings(settings)
    notes = []
    cpu_nodes, memory_nodes = _nodes(reader, notes)
    record = {"version": RECORD_VERSION, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
              "python": settings["python"], "size_mib": settings["size_mib"], "seconds": float(settings["seconds"])}
    if not cpu_nodes or not memory_nodes:
        notes.append("not measured: sysfs lists no NUMA node with CPUs and one with memory")
        record.update(memory={"method": None, "pairs": [], "notes": notes},
                      gpus={"method": None, "copies": [], "notes": ["not measured: no NUMA node to bind to"]})
        return record
    memory = _memory(reader, settings, cpu_nodes, memory_nodes)
    memory["notes"] = notes + memory["notes"]
    record["memory"] = memory
    record["gpus"] = _gpus(reader, settings, [n for n in cpu_nodes if n in memory_nodes])
    return record
