# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Wall time of `deploy_inference.yml --tags plan` on the demo fleet, with
and without one more host whose recorded capture has 1,000 GPUs (an
`nvidia-smi topo -m` matrix under the default capture size limit).

Red-team round 3 (M7): such a host made the planning run take 195-224 s,
103 s of it in one task that read the host's variables once per instance;
the planner itself needs 0.2 s for such a host. Bound: 20 s over the run
without it. Prints figures, asserts nothing.

    .venv/bin/python benchmarks/bench_large_host_plan.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
GPUS = 1000


def topo_matrix(count):
    """`nvidia-smi topo -m` of COUNT GPUs, half on each NUMA node (4 bytes a cell: under 4 MiB)."""
    names = ["GPU%d" % i for i in range(count)]
    lines = ["\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity"])]
    for a in range(count):
        node = 0 if a < count // 2 else 1
        cpus = "0-63" if node == 0 else "64-127"
        lines.append("GPU%d\t" % a + "\t".join("X" if a == b else "SYS" for b in range(count))
                     + "\t%s\t%d" % (cpus, node))
    return "\n".join(lines) + "\n"


def inventory(workdir, big):
    with open(os.path.join(REPO, "inventories", "demo", "hosts.yml")) as handle:
        hosts = yaml.safe_load(handle)
    shutil.copytree(os.path.join(REPO, "inventories", "demo", "group_vars"), os.path.join(workdir, "group_vars"))
    if big:
        # The matrix as nvidia-smi prints it (a capture may be that text alone).
        capture = os.path.join(workdir, "big-topo.txt")
        with open(capture, "w") as handle:
            handle.write(topo_matrix(GPUS))
        hosts["all"]["children"]["gpu_servers"]["hosts"]["big-1000"] = {
            "ansible_host": "127.0.0.9", "numa_capture": capture, "gpufleet_tp_size": 2,
            "gpufleet_dist_port_stride": 1}
    path = os.path.join(workdir, "hosts.yml")
    with open(path, "w") as handle:
        yaml.safe_dump(hosts, handle)
    return path


def run(workdir, path):
    env = dict(os.environ, GPUFLEET_REPO=REPO, GPUFLEET_STAGING=os.path.join(workdir, "staging"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    start = time.monotonic()
    proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
                           os.path.join(REPO, "playbooks", "deploy_inference.yml"), "-i", path, "--tags", "plan"],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:])
    return took, proc.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    for big in (False, True):
        times = []
        for dummy in range(args.runs):
            workdir = tempfile.mkdtemp(prefix="gpufleet-bench-")
            try:
                took, rc = run(workdir, inventory(workdir, big))
            finally:
                shutil.rmtree(workdir)
            times.append(took)
        print("%-34s runs %d  wall %s s  (rc %d)" % (
            "demo fleet + 1,000-GPU host" if big else "demo fleet", args.runs,
            ", ".join("%.1f" % t for t in times), rc))


if __name__ == "__main__":
    main()
