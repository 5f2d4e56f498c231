"""Helpers of benchmarks/gpu_check.sh, the check run on a machine with NVIDIA GPUs.

    gpu_check.py compare DIR      numa_facts per source (DIR/facts-{nvml,nvidia-smi,sysfs}.json)
                                  against nvidia-smi's own list and sysfs read here
    gpu_check.py bandwidth --node N [--size-mib 256] [--reps 5]
                                  pinned host-to-device and device-to-host copies to every GPU
                                  (run under numactl --cpunodebind=N --membind=N)

compare exits 1 when the sources disagree; bandwidth exits 3 when torch sees no CUDA device.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

SOURCES = ("nvml", "nvidia-smi", "sysfs")


def bus_id(text):
    """A PCI bus id as the facts write it: 4-digit lower-case domain (nvidia-smi prints 8, upper case)."""
    domain, rest = text.strip().lower().split(":", 1)
    return "%04x:%s" % (int(domain, 16), rest)


def nvidia_smi_gpus(timeout=60):
    """[(index, bus id)] from nvidia-smi's query interface."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True, timeout=timeout).stdout
    return [(int(index), bus_id(bus)) for index, bus in (line.split(",") for line in out.splitlines() if line.strip())]


def sysfs_reading(bus_ids, root="/"):
    """{bus id: numa_node or None} and {node: cpulist} read from sysfs directly."""
    def read(path):
        with open(path) as handle:
            return handle.read().strip()
    gpu_nodes = {}
    for bus in bus_ids:
        node = int(read(os.path.join(root, "sys/bus/pci/devices", bus, "numa_node")))
        gpu_nodes[bus] = node if node >= 0 else None
    nodes = {}
    for path in glob.glob(os.path.join(root, "sys/devices/system/node/node[0-9]*/cpulist")):
        nodes[int(os.path.basename(os.path.dirname(path))[4:])] = read(path)
    return gpu_nodes, nodes


def compare_sources(facts, smi_gpus, sysfs_gpu_nodes, sysfs_nodes):
    """(report lines, agree): GPUs (index, bus id, NUMA node) and NUMA nodes (id, CPUs) of every
    numa_facts source against nvidia-smi's list and sysfs."""
    lines, agree = [], True
    want_gpus = [(index, bus, sysfs_gpu_nodes.get(bus)) for index, bus in smi_gpus]
    lines.append("nvidia-smi/sysfs: %d GPUs %s" % (len(want_gpus), " ".join("%d=%s@node%s" % g for g in want_gpus)))
    want_nodes = sorted(sysfs_nodes.items())
    lines.append("sysfs: NUMA nodes %s" % " ".join("%d:%s" % n for n in want_nodes))
    for source in SOURCES:
        if source not in facts:
            lines.append("%-10s  no facts" % source)
            agree = False
            continue
        gpus = [(g["index"], g["pci_bus_id"], g["numa_node"]) for g in facts[source]["gpus"] if g.get("vendor") == "nvidia"]
        nodes = sorted((n["id"], n["cpus"]) for n in facts[source]["numa_nodes"] if n["cpus"])
        problems = []
        if gpus != want_gpus:
            problems.append("GPUs %s" % " ".join("%s=%s@node%s" % g for g in gpus))
        if nodes != [n for n in want_nodes if n[1]]:
            problems.append("NUMA nodes %s" % " ".join("%d:%s" % n for n in nodes))
        agree = agree and not problems
        lines.append("%-10s  %s" % (source, "; ".join(problems) if problems else
                                    "agrees (%d GPUs, bus ids, NUMA nodes)" % len(gpus)))
    return lines, agree


def compare(directory):
    facts = {}
    for source in SOURCES:
        path = os.path.join(directory, "facts-%s.json" % source)
        if os.path.exists(path):
            with open(path) as handle:
                facts[source] = json.load(handle)
    smi = nvidia_smi_gpus()
    gpu_nodes, nodes = sysfs_reading([bus for index, bus in smi])
    lines, agree = compare_sources(facts, smi, gpu_nodes, nodes)
    print("\n".join(lines))
    print("facts: %s" % ("all sources agree" if agree else "SOURCES DISAGREE"))
    return 0 if agree else 1


def copy_seconds(torch, source, target, reps):
    """Best of REPS timed copies (CUDA events), after one warm-up."""
    target.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    best = None
    for dummy in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source, non_blocking=True)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1000.0
        best = seconds if best is None else min(best, seconds)
    return best


def bandwidth(node, size_mib, reps):
    import torch
    if not torch.cuda.is_available():
        print("gpu_check: torch %s sees no CUDA device" % torch.__version__, file=sys.stderr)
        return 3
    size = size_mib << 20
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    for index in range(torch.cuda.device_count()):
        with torch.cuda.device(index):
            device = torch.empty(size, dtype=torch.uint8, device="cuda")
            h2d = copy_seconds(torch, host, device, reps)
            d2h = copy_seconds(torch, device, host, reps)
            name = torch.cuda.get_device_name(index)[:24]
            print("%4d  %3d  %-24s %9.1f %9.1f" % (node, index, name, size / h2d / 1e9, size / d2h / 1e9),
                  flush=True)
            del device
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    compare_cmd = commands.add_parser("compare", help="numa_facts per source against nvidia-smi and sysfs")
    compare_cmd.add_argument("directory")
    band = commands.add_parser("bandwidth", help="pinned H2D and D2H copies to every GPU (GB/s)")
    band.add_argument("--node", type=int, required=True, help="the NUMA node numactl binds this run to (printed)")
    band.add_argument("--size-mib", type=int, default=256)
    band.add_argument("--reps", type=int, default=5)
    band.add_argument("--header", action="store_true", help="print the table's header first")
    args = parser.parse_args(argv)
    if args.command == "compare":
        return compare(args.directory)
    if args.size_mib < 1 or args.reps < 1:
        parser.error("--size-mib and --reps must be at least 1")
    if args.header:
        print("node  gpu  %-24s %9s %9s" % ("name", "H2D GB/s", "D2H GB/s"), flush=True)
    return bandwidth(args.node, args.size_mib, args.reps)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
