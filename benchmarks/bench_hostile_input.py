# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Time and peak memory of hostile captures through the real load path.

Prints figures, asserts nothing. Each case runs in a fresh Python process
that imports the collection and then calls what the action plugin calls
(`facts_from_capture(path, max_bytes=...)`, which loads, validates and
assembles); the parent takes the child's peak resident memory from
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
LARGEST = os.path.join(REPO, "tests", "unit", "fixtures", "machines", "mi300x_8gpu_xgmi", "capture.yml")
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
    return cases


def child(path, max_bytes):
    """Run one case in this (fresh) process; print {wall, outcome}."""
    sys.path.insert(0, os.path.join(REPO, ".collections"))
    from ansible_collections.gpufleet.numa.plugins.module_utils import topology
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology_reader import CAPTURE_MAX_BYTES

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
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0] or None, int(args.child[1]) or None)
        return
    workdir = tempfile.mkdtemp(prefix="bench-hostile-")
    try:
        cases = write_cases(workdir)
        print("%-24s %8s %8s %8s  %s" % ("case", "wall ms", "cpu ms", "peak MB", "what"))
        for name, (path, max_bytes, what) in cases.items():
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
