# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Time and peak memory of hostile captures through the real load path, and of hostile hosts through the planner.

Prints figures, asserts nothing. Each case runs in a fresh Python process
that imports the collection and then calls what the action plugin calls
(`facts_from_capture(path, max_bytes=...)`, which loads, validates and
assembles), or, for the `plan_*` cases, builds a host's facts and calls
the fleet_plan filter on it (timed alone; its facts count in the peak);
the parent takes the child's peak resident memory from
wait4's rusage (ru_maxrss) and the child reports the wall and CPU time of
the call alone (CPU time is the steadier figure on a shared machine). The
`baseline` case imports and does nothing: its peak is what the
interpreter and imports cost before any input is read. Target: each case
under 2 s and 200 MB.

    .venv/bin/python benchmarks/bench_hostile_input.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LARGEST = os.path.join(REPO, "tests", "fixtures", "machines", "mi300x_8gpu_xgmi", "capture.yml")
TOPO = "nvidia-smi topo -m"


def alias_bomb():
    """The billion laughs: 9 levels of 9 aliases, 549 bytes."""
    lines = ["capture_version: 1", "notes:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        name, prev = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append("  %s: &%s [%s]" % (name, name, ",".join(["*" + prev] * 9)))
    return "\n".join(lines) + "\n"


def matrix(count):
    names = ["GPU%d" % i for i in range(count)]
    lines = ["\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity"])]
    for a in range(count):
        lines.append("GPU%d\t" % a + "\t".join("X" if a == b else "NV18" for b in range(count)) + "\t0-7\t0")
    return "\n".join(lines) + "\n"


def write_cases(workdir):
    """name -> (path, capture_max_bytes or None for the default, what it is)."""
    cases = {}

    def put(name, text, max_bytes, what):
        path = os.path.join(workdir, name + ".yml")
        with open(path, "w") as handle:
            handle.write(text)
        cases[name] = (path, max_bytes, what)

    cases["baseline"] = (None, None, "interpreter and imports only")
    put("alias_bomb", alias_bomb(), None, "549-byte YAML alias bomb")
    put("nesting_flow", "capture_version: 1\nnotes: " + "[" * 100000 + "]" * 100000 + "\n", None,
        "100,000-level flow nesting, 200 KB")
    put("nesting_block", "capture_version: 1\nnotes:\n" + "".join(" " * i + "- \n" for i in range(1, 2000)), None,
        "2,000-level block nesting, 2 MB")
    put("cpulist_huge", "capture_version: 1\nfiles:\n  /sys/devices/system/node/node0/cpulist: 0-99999999\n"
        "  /sys/devices/system/cpu/online: 0-99999999\n", None, "cpulist 0-99999999 (node and online)")
    text = matrix(1000)
    put("matrix_1000_default_cap", text, None, "1,000-GPU topo -m text, %d bytes, default cap" % len(text))
    put("matrix_1000_text", text, 8 << 20, "1,000-GPU topo -m text file, capture_max_bytes=8 MiB")
    pasted = "capture_version: 1\ncommands:\n  %s: |\n" % TOPO
    pasted += "".join("    " + line + "\n" for line in text.splitlines())
    put("matrix_1000_pasted_yaml", pasted, 8 << 20,
        "the same pasted in a YAML block with tabs (pure Python loader), %d bytes" % len(pasted))
    cases["dev_zero"] = ("/dev/zero", None, "/dev/zero as capture")
    fifo = os.path.join(workdir, "fifo.yml")
    os.mkfifo(fifo)
    cases["fifo"] = (fifo, None, "a FIFO as capture (nothing writes to it)")
    cases["largest_fixture"] = (LARGEST, None, "largest recorded capture (MI300X, %d bytes)" % os.path.getsize(LARGEST))
    for name, case in PLAN_CASES.items():
        cases[name] = (name, None, case[-1])
    return cases


LINK_CLASSES = ["NV18", "NV12", "NV8", "NV4", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]

# name -> (GPUs, NUMA nodes, nodes per socket (0: sockets unknown), links, tp_size, what)
# links: "equal" (every pair NV18) or "distinct" (seeded random classes: no two GPUs alike,
# the search's worst case). The worst shapes found by a sweep over 16-1,000 GPUs,
# tp 1-8, 1-64 nodes.
PLAN_CASES = {
    "plan_1000_capture": (1000, None, None, None, 2, "the 1,000-GPU topo -m capture planned, tp 2"),
    "plan_1000_equal_2sock": (1000, 2, 1, "equal", 2, "1,000 GPUs alike on 2 sockets, tp 2"),
    "plan_1000_distinct": (1000, 2, 1, "distinct", 2, "1,000 distinct GPUs on 2 sockets, tp 2"),
    "plan_1000_64nodes": (1000, 64, 0, "distinct", 1, "1,000 distinct GPUs, 64 nodes, sockets unknown, tp 1"),
    "plan_64_equal": (64, 2, 1, "equal", 2, "64 GPUs alike on 2 nodes, tp 2"),
    "plan_64_distinct": (64, 2, 1, "distinct", 2, "64 distinct GPUs on 2 nodes, tp 2"),
    "plan_16_distinct_tp7": (16, 2, 2, "distinct", 7, "16 distinct GPUs on 2 nodes of one socket, tp 7"),
    "plan_32_distinct_tp4": (32, 1, 1, "distinct", 4, "32 distinct GPUs on one node, tp 4"),
    "plan_128_distinct": (128, 4, 2, "distinct", 2, "128 distinct GPUs, 4 nodes on 2 sockets, tp 2"),
    "plan_256_distinct": (256, 8, 4, "distinct", 4, "256 distinct GPUs, 8 nodes on 2 sockets, tp 4"),
}


def planner_facts(count, nodes, per_socket, links):
    """Topology facts (schema 1) of a hostile host: count GPUs spread evenly over nodes."""
    import random

    rng = random.Random(count * 1000 + nodes)
    ids = ["0000:%02x:%02x.0" % (1 + i // 32, i % 32) for i in range(count)]
    gpu_nodes = [i * nodes // count for i in range(count)]
    table = {}
    for a in range(count):
        table[ids[a]] = row = {}
        for b in range(a):
            row[ids[b]] = table[ids[b]][ids[a]] = "NV18" if links == "equal" else rng.choice(LINK_CLASSES)
    sockets = [{"id": s, "numa_nodes": [n for n in range(nodes) if n // per_socket == s], "cpus": ""}
               for s in range(nodes // per_socket)] if per_socket else []
    return {
        "schema_version": 1, "hostname": "hostile", "sources": ["sysfs", "nvml"], "sockets": sockets,
        "numa_nodes": [{"id": n, "cpus": "%d-%d" % (8 * n, 8 * n + 7), "memory_mb": 1024, "distances": {},
                        "socket": n // per_socket if per_socket else None} for n in range(nodes)],
        "smt_siblings": [],
        "gpus": [{"id": ids[i], "index": i, "pci_bus_id": ids[i], "uuid": "GPU-%04d" % i, "name": "GPU",
                  "vendor": "nvidia", "numa_node": gpu_nodes[i], "local_cpus": None, "memory_mb": 1,
                  "mig_mode": "disabled", "pcie": None} for i in range(count)],
        "nics": [], "links": table, "warnings": [],
    }


def plan_child(name):
    """Plan one hostile host through the fleet_plan filter in this (fresh) process; print {wall, outcome}."""
    sys.path.insert(0, os.path.join(REPO, ".collections"))
    from ansible.errors import AnsibleFilterError

    from ansible_collections.gpufleet.numa.plugins.filter.placement import fleet_plan
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology

    count, nodes, per_socket, links, tp, dummy = PLAN_CASES[name]
    if nodes is None:
        facts = topology.facts_from_capture({"capture_version": 1, "commands": {TOPO: matrix(count)}})
    else:
        facts = planner_facts(count, nodes, per_socket, links)
    start, cpu = time.perf_counter(), time.process_time()
    try:
        plan = fleet_plan({"hostile": {"numa_topology": facts}}, tp_size=tp, dist_port_stride=1,
                          base_port=10000, dist_port_base=20000)
        searched = not any("exact search" in w["text"] for w in plan["warnings"])
        outcome = "%d instances, %d unused, %s" % (len(plan["instances"]), len(plan["unused"]),
                                                   "searched exactly" if searched else "fallback, warned")
    except AnsibleFilterError as exc:
        outcome = "AnsibleFilterError: %s" % exc
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"wall": wall, "cpu": cpu, "outcome": outcome}))


def child(path, max_bytes):
    """Run one case in this (fresh) process; print {wall, outcome}."""
    sys.path.insert(0, os.path.join(REPO, ".collections"))
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CAPTURE_MAX_BYTES

    import yaml  # noqa: F401 - imported by the load path anyway; counted in the baseline

    outcome = "imports only"
    start, cpu = time.perf_counter(), time.process_time()
    if path:
        try:
            facts = topology.facts_from_capture(path, max_bytes=max_bytes or CAPTURE_MAX_BYTES)
            outcome = "facts: %d GPUs, %d links, %d warnings" % (
                len(facts["gpus"]), sum(len(r) for r in facts["links"].values()), len(facts["warnings"]))
        except ValueError as exc:
            outcome = "ValueError: %s" % str(exc).replace(os.path.dirname(path) + "/", "")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"wall": wall, "cpu": cpu, "outcome": outcome}))


def run_case(path, max_bytes):
    argv = [sys.executable, os.path.abspath(__file__), "--child", path or "", str(max_bytes or 0)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read()
    err = proc.stderr.read()
    dummy_pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        return None, None, usage.ru_maxrss, "child exited %d: %s" % (proc.returncode, err.decode()[-300:])
    result = json.loads(out)
    return result["wall"], result["cpu"], usage.ru_maxrss, result["outcome"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per case (median reported)")
    parser.add_argument("--only", help="run only the cases whose name starts with this")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and args.child[0].startswith("plan_"):
        plan_child(args.child[0])
        return
    if args.child:
        child(args.child[0] or None, int(args.child[1]) or None)
        return
    workdir = tempfile.mkdtemp(prefix="bench-hostile-")
    try:
        cases = write_cases(workdir)
        print("%-24s %8s %8s %8s  %s" % ("case", "wall ms", "cpu ms", "peak MB", "what"))
        for name, (path, max_bytes, what) in cases.items():
            if args.only and not name.startswith(args.only):
                continue
            walls, cpus, peaks, outcome = [], [], [], None
            for dummy in range(args.runs):
                wall, cpu, peak_kb, outcome = run_case(path, max_bytes)
                if wall is not None:
                    walls.append(wall)
                    cpus.append(cpu)
                peaks.append(peak_kb / 1024.0)
            shown = ("%8.0f %8.0f" % (statistics.median(walls) * 1000, statistics.median(cpus) * 1000)
                     if walls else "%8s %8s" % ("-", "-"))
            print("%-24s %s %8.1f  %s" % (name, shown, max(peaks), what))
            print("%-24s %8s %8s %8s  -> %s" % ("", "", "", "", outcome[:150]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
