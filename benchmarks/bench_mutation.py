# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Mutation score of the core pure modules (scripts/mutation.py; not in CI: a
module takes minutes).

    nice -n 15 .venv/bin/python benchmarks/bench_mutation.py [--modules common/cpulist ...] [--wider]

Prints, per module: mutants, killed, survived, timed out, equivalent
(tests/mutation_equivalent.txt) and the score, the share of the mutants that
change behaviour that the module's own tests catch (target: 90%). With
--wider, survivors also meet every plugin test file that imports the module
(slower). Survivors are listed by scripts/mutation.py MODULE.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "mutation.py")
CORE = ("common/cpulist", "topology/nvidia_smi", "topology/nvidia_smi_topo", "topology/nvidia_smi_cells",
        "topology/nvml", "topology/nvml_parse", "topology/sysfs", "topology/sysfs_pci", "placement/search",
        "placement/domains", "placement/cpus", "placement/template", "common/checks", "deploy/gateway/settings",
        "plan/artifact")
TARGET = 90.0


def score(module, wider):
    with tempfile.TemporaryDirectory(prefix="bench-mutation-") as tmp:
        out = os.path.join(tmp, "result.json")
        command = [sys.executable, SCRIPT, module, "--json", out] + ([] if wider else ["--wider", "none"])
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if run.returncode != 0 or not os.path.exists(out):
            return None, run.stdout.strip().splitlines()[-1:] or ["exit %d" % run.returncode]
        with open(out, encoding="utf-8") as handle:
            return json.load(handle)[0]["summary"], []


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", nargs="+", default=list(CORE))
    parser.add_argument("--wider", action="store_true", help="survivors also meet the wider suite")
    args = parser.parse_args()
    print("%-26s %7s %7s %8s %8s %10s %7s" % ("module", "mutants", "killed", "survived", "timeout", "equivalent",
                                              "score"))
    for module in args.modules:
        figures, error = score(module, args.wider)
        if figures is None:
            print("%-26s failed: %s" % (module, " ".join(error)))
            continue
        print("%-26s %7d %7d %8d %8d %10d %6.1f%%%s" % (
            module, figures["total"], figures["killed"], figures["survived"], figures["timeout"],
            figures["equivalent"], figures["score"], "" if figures["score"] >= TARGET else "  (below %d%%)" % TARGET),
            flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
