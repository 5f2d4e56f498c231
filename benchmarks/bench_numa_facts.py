# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""How long numa_facts takes, next to `setup gather_subset=hardware`.

Prints figures, asserts nothing. Three measurements, all on this machine:

1. the whole ad-hoc command, `ansible localhost -m gpufleet.numa.numa_facts`
   vs `ansible localhost -m ansible.builtin.setup -a gather_subset=hardware`
   (same interpreter, local connection), run in turns (or with hyperfine: --hyperfine);
2. the modules alone, run as programs by the same interpreter with their
   arguments file (no controller start-up).
Both also time `ping`, which pays the same start-up and AnsibleModule
import and does no work: the time beyond ping is what gathering costs, and
the ratio of those is the figure to compare with the 1/4 target.
3. the module's core in-process (gather + assemble, no YAML) on the
   largest recorded capture, and loading that capture.

    .venv/bin/python benchmarks/bench_numa_facts.py [--runs N]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import gather  # noqa: E402
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader


def hyperfine(commands, runs, env, workdir):
    """Mean and stddev in seconds per command, measured by hyperfine
    (--hyperfine; each command's runs back to back)."""
    out = os.path.join(workdir, "hyperfine.json")
    argv = ["hyperfine", "--warmup", "1", "--runs", str(runs), "--export-json", out, "--style", "basic"]
    for name, command in commands:
        argv += ["--command-name", name, command]
    subprocess.run(argv, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as handle:
        results = json.load(handle)["results"]
    return [(r["command"], r["mean"], r["stddev"]) for r in results]


def interleaved(commands, runs, env, workdir):
    """Median and median absolute deviation in seconds per command, the
    commands taking turns run by run, so that load from other processes on
    a shared machine falls on all of them alike (the default)."""
    samples = dict((name, []) for name, _command in commands)
    for run in range(runs + 1):
        for name, command in commands:
            start = time.perf_counter()
            subprocess.run(command, shell=True, cwd=REPO, env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if run:  # the first round warms caches
                samples[name].append(time.perf_counter() - start)
    results = []
    for name, _command in commands:
        values = sorted(samples[name])
        median = values[len(values) // 2]
        spread = sorted(abs(v - median) for v in values)[len(values) // 2]
        results.append((name, median, spread))
    return results


def report(title, results):
    """results: numa_facts, setup hardware, then the ping baseline (the
    same start-up and AnsibleModule import, no work)."""
    print(title)
    for name, mean, stddev in results:
        print("  %-40s %8.1f ms  +- %6.1f ms" % (name, mean * 1000, stddev * 1000))
    numa, setup, ping = results[0][1], results[1][1], results[2][1]
    print("  ratio numa_facts / setup hardware:                 %.2f" % (numa / setup))
    net_numa, net_setup = max(numa - ping, 0.0), max(setup - ping, 1e-9)
    print("  ratio of the work beyond ping (target <= 0.25):    %.2f  (%.0f ms vs %.0f ms)" % (
        net_numa / net_setup, net_numa * 1000, net_setup * 1000))
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--core-runs", type=int, default=200)
    parser.add_argument("--hyperfine", action="store_true", help="time with hyperfine instead of interleaved runs")
    opts = parser.parse_args()

    python = sys.executable
    bindir = os.path.dirname(python)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=os.path.join(REPO, ".collections"))
    timer = hyperfine if opts.hyperfine and shutil.which("hyperfine") else interleaved
    print("python %s, timer %s (%s), %d runs per command" % (
        sys.version.split()[0], timer.__name__, "median +- MAD" if timer is interleaved else "mean +- stddev", opts.runs))
    print()

    workdir = tempfile.mkdtemp(prefix="bench-numa-facts.")
    try:
        ansible = "%s/ansible localhost -i localhost, -c local -e ansible_python_interpreter=%s" % (bindir, python)
        report("1. whole ad-hoc command (controller start-up included)", timer([
            ("ansible -m gpufleet.numa.numa_facts", ansible + " -m gpufleet.numa.numa_facts"),
            ("ansible -m setup gather_subset=hardware",
             ansible + " -m ansible.builtin.setup -a gather_subset=hardware"),
            ("ansible -m ping (baseline)", ansible + " -m ansible.builtin.ping"),
        ], opts.runs, env, workdir))

        numa_args = os.path.join(workdir, "numa_args.json")
        setup_args = os.path.join(workdir, "setup_args.json")
        with open(numa_args, "w") as handle:
            json.dump({"ANSIBLE_MODULE_ARGS": {}}, handle)
        with open(setup_args, "w") as handle:
            json.dump({"ANSIBLE_MODULE_ARGS": {"gather_subset": ["hardware"]}}, handle)
        module = os.path.join(REPO, "plugins", "modules", "numa_facts.py")
        report("2. module alone, run as a program by the target interpreter", timer([
            ("numa_facts module", "%s %s %s" % (python, module, numa_args)),
            ("setup module gather_subset=hardware", "%s -m ansible.modules.setup %s" % (python, setup_args)),
            ("ping module (baseline)", "%s -m ansible.modules.ping %s" % (python, numa_args)),
        ], opts.runs, env, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    captures = glob.glob(os.path.join(REPO, "tests", "fixtures", "machines", "*", "capture.yml"))
    biggest = max(captures, key=os.path.getsize)
    start = time.perf_counter()
    capture = load_capture(biggest)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    for dummy_run in range(opts.core_runs):
        facts = gather.gather(CaptureReader(capture), captured=True)[0]
    core_s = (time.perf_counter() - start) / opts.core_runs
    print("3. in-process core on the largest capture (%s, %d KiB, %d GPUs, %d files)" % (
        os.path.basename(os.path.dirname(biggest)), os.path.getsize(biggest) // 1024, len(facts["gpus"]),
        len(capture.get("files") or {})))
    print("  load_capture (YAML)                      %8.1f ms" % (load_s * 1000))
    print("  gather + assemble, mean of %-4d          %8.2f ms" % (opts.core_runs, core_s * 1000))


if __name__ == "__main__":
    main()
