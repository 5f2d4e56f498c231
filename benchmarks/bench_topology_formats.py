# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""How long the facts take from the topology formats, next to lstopo.

Prints figures, asserts nothing. On this machine:

1. the largest recorded sysfs capture: numa_facts' core (load + gather +
   assemble) in-process, next to `lstopo --if fsroot` reading the same tree
   laid out on disk (a process each run, as a user would run it);
2. an hwloc XML of the 16-GPU host (dgx2_v100_16gpu_nvswitch; written here
   by lstopo from its recorded tree): facts_from_capture on the XML, next to
   `lstopo --if xml` reading it;
3. the exports (gres.conf, NCCL XML) from those facts.

    .venv/bin/python benchmarks/bench_topology_formats.py [--runs N]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.gpufleet.numa.tests.fixtures import hwloc_oracle  # noqa: E402
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import export as topology_export  # noqa: E402
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture  # noqa: E402
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture  # noqa: E402

MACHINES = os.path.join(REPO, "tests", "fixtures", "machines")


def timed(function, runs):
    """Median and min in ms of `runs` calls (one warm-up call first)."""
    function()
    samples = []
    for dummy in range(runs):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return samples[len(samples) // 2] * 1000, samples[0] * 1000


def lstopo_run(argv):
    env = dict(os.environ, LC_ALL="C", HWLOC_THISSYSTEM="0")
    return lambda: subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=120)


def line(name, figures):
    print("  %-52s %9.2f ms  (min %.2f)" % (name, figures[0], figures[1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    opts = parser.parse_args()
    lstopo = shutil.which("lstopo") or shutil.which("lstopo-no-graphics")
    if lstopo is None:
        sys.exit("lstopo is not installed (scripts/setup installs hwloc)")
    work = tempfile.mkdtemp(prefix="bench-topology-formats.")
    try:
        captures = [p for p in glob.glob(os.path.join(MACHINES, "*", "capture.yml"))
                    if any(k.startswith("/sys/devices/system/cpu/") for k in (load_capture(p).get("files") or {}))]
        biggest = max(captures, key=os.path.getsize)
        name = os.path.basename(os.path.dirname(biggest))
        tree = os.path.join(work, "tree")
        hwloc_oracle.write_tree(load_capture(biggest), tree)
        facts = facts_from_capture(biggest)
        print("python %s, %s, %d runs each (median, min)" % (sys.version.split()[0], lstopo, opts.runs))
        print("1. largest sysfs capture: %s (%d KiB, %d GPUs, %d CPUs)" % (
            name, os.path.getsize(biggest) // 1024, len(facts["gpus"]), sum(len(c) for c in facts["smt_siblings"])))
        line("numa_facts core: facts_from_capture (YAML load incl.)", timed(lambda: facts_from_capture(biggest), opts.runs))
        line("lstopo --if fsroot --input <tree> --of xml (process)",
             timed(lstopo_run([lstopo, "--if", "fsroot", "--input", tree, "--whole-io", "--of", "xml", "-"]), opts.runs))

        dgx2 = os.path.join(MACHINES, "dgx2_v100_16gpu_nvswitch", "capture.yml")
        tree16 = os.path.join(work, "tree16")
        hwloc_oracle.write_tree(load_capture(dgx2), tree16)
        xml_path = os.path.join(work, "dgx2.xml")
        with open(xml_path, "w") as handle:
            handle.write(hwloc_oracle.lstopo_xml(tree16, lstopo))
        facts16 = facts_from_capture(xml_path)
        print("2. hwloc XML of the 16-GPU host (dgx2_v100_16gpu_nvswitch, %d KiB, %d GPUs)" % (
            os.path.getsize(xml_path) // 1024, len(facts16["gpus"])))
        line("numa_facts core: facts_from_capture(<hwloc XML>)", timed(lambda: facts_from_capture(xml_path), opts.runs))
        line("lstopo --if xml --input <xml> --of xml (process)",
             timed(lstopo_run([lstopo, "--if", "xml", "--input", xml_path, "--of", "xml", "-"]), opts.runs))
        line("lstopo --if fsroot on the same tree (process)",
             timed(lstopo_run([lstopo, "--if", "fsroot", "--input", tree16, "--whole-io", "--of", "xml", "-"]),
                   opts.runs))
        print("3. exports from the facts")
        for label, data in ((name, facts), ("dgx2_v100_16gpu_nvswitch", facts16)):
            line("gres_conf (%s)" % label, timed(lambda: topology_export.gres_conf(data, label), opts.runs))
            line("nccl_topology_xml (%s)" % label, timed(lambda: topology_export.nccl_topology_xml(data, label),
                                                         opts.runs))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
