# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""bandwidth/measure.py: which children run (every pair of CPU node and
memory node; each node with CPUs and memory for the GPU copies), what a
child's answer becomes, and what is said when a node, a child or torch is
missing. Recorded hosts replay through a CaptureReader (sysfs files and
each child's output keyed by its command line, as a live run would ask);
one real run measures this machine's node 0 under the real numactl."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import measure
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader

PYTHON = "/opt/vllm/bin/python"
SETTINGS = {"python": PYTHON, "kernel": "auto", "size_mib": 64, "seconds": 0.25, "timeout": 30, "gpus": True}
NODE = "/sys/devices/system/node"


def host(nodes, answers, gpu_nodes=None):
    """A CaptureReader: nodes {id: (cpulist, memory kB)}; answers {(mode, cpu, mem): answer dict or None}."""
    files = {}
    for node, (cpus, kb) in nodes.items():
        files["%s/node%d/cpulist" % (NODE, node)] = cpus + "\n"
        files["%s/node%d/meminfo" % (NODE, node)] = "Node %d MemTotal:  %d kB\n" % (node, kb)
    for gpu, node in (gpu_nodes or {}).items():
        files[measure.GPU_NODE % gpu] = "%d\n" % node
    commands = {}
    for (mode, cpu, mem), answer in answers.items():
        if answer is not None:
            command = measure.child_command(PYTHON, mode, "auto", 64 << 20, 0.25, cpu, mem)
            commands[command] = "torch warning on stdout\n" + json.dumps(answer) + "\n"
    return CaptureReader({"capture_version": 1, "files": files, "commands": commands})


def triad(gbps):
    return {"method": "torch-triad", "bytes": 24 * 10 ** 9, "seconds": 24.0 / gbps, "repeats": 5, "threads": 4}


def copies(*figures):
    return {"method": "torch-cuda-pinned", "copies": [
        {"index": i, "gpu": "0000:%02X:00.0" % (0x18 + i), "name": "NVIDIA H100", "bytes": 10 ** 9,
         "h2d_seconds": 1.0 / h2d, "d2h_seconds": 1.0 / d2h} for i, (h2d, d2h) in enumerate(figures)]}


def test_measure_runs_every_pair_and_each_node_for_the_gpus():
    reader = host({0: ("0-3", 64 << 20), 1: ("4-7", 64 << 20)}, {
        ("memory", 0, 0): triad(90), ("memory", 0, 1): triad(50), ("memory", 1, 0): triad(48),
        ("memory", 1, 1): triad(91), ("gpu", 0, 0): copies((53.1, 52.7), (20.0, 21.0)),
        ("gpu", 1, 1): copies((21.0, 20.5), (54.0, 53.0))}, gpu_nodes={"0000:18:00.0": 0, "0000:19:00.0": 1})
    found = checks.check_bandwidth("bandwidth", measure.measure(reader, dict(SETTINGS), now=0))
    assert found["measured_at"] == "1970-01-01T00:00:00Z"
    assert found["memory"] == {"method": "torch-triad", "notes": [], "pairs": [
        {"cpu_node": 0, "memory_node": 0, "gbps": 90.0, "threads": 4},
        {"cpu_node": 0, "memory_node": 1, "gbps": 50.0, "threads": 4},
        {"cpu_node": 1, "memory_node": 0, "gbps": 48.0, "threads": 4},
        {"cpu_node": 1, "memory_node": 1, "gbps": 91.0, "threads": 4}]}
    assert found["gpus"]["method"] == "torch-cuda-pinned" and found["gpus"]["notes"] == []
    assert [(c["node"], c["gpu"], c["index"], c["gpu_node"], c["h2d_gbps"], c["d2h_gbps"]) for c in found["gpus"]["copies"]] == [
        (0, "0000:18:00.0", 0, 0, 53.1, 52.7), (0, "0000:19:00.0", 1, 1, 20.0, 21.0),
        (1, "0000:18:00.0", 0, 0, 21.0, 20.5), (1, "0000:19:00.0", 1, 1, 54.0, 53.0)]


def test_measure_skips_memory_only_and_cpu_only_nodes_and_says_so():
    reader = host({0: ("0-3", 64 << 20), 1: ("", 128 << 20), 2: ("8-11", 0)}, {
        ("memory", 0, 0): triad(90), ("memory", 0, 1): triad(40), ("memory", 2, 0): triad(45),
        ("memory", 2, 1): triad(30), ("gpu", 0, 0): {"skipped": "torch 2.13.0+cpu sees no CUDA or ROCm device"}})
    found = measure.measure(reader, dict(SETTINGS))
    assert [(p["cpu_node"], p["memory_node"]) for p in found["memory"]["pairs"]] == [(0, 0), (0, 1), (2, 0), (2, 1)]
    assert found["memory"]["notes"] == [
        "NUMA node 1: no CPUs (memory only): no measurement runs on its CPUs",
        "NUMA node 2: no memory: no measurement allocates on it"]
    # Node 2 has no memory to bind its own copies to; node 0 says torch sees no device: the GPU part ends.
    assert found["gpus"] == {"method": None, "copies": [],
                             "notes": ["not measured: torch 2.13.0+cpu sees no CUDA or ROCm device"]}


def test_measure_a_failing_child_is_a_note_and_the_others_still_count():
    reader = host({0: ("0-3", 64 << 20), 1: ("4-7", 64 << 20)}, {
        ("memory", 0, 0): triad(90), ("memory", 0, 1): {"error": "RuntimeError: out of memory"},
        ("memory", 1, 0): {"method": "torch-triad", "bytes": 0, "seconds": 0.0}, ("memory", 1, 1): None,
        ("gpu", 0, 0): {"copies": "nonsense"}})
    found = measure.measure(reader, dict(SETTINGS, gpus=True))
    assert found["memory"]["pairs"] == [{"cpu_node": 0, "memory_node": 0, "gbps": 90.0, "threads": 4}]
    assert found["memory"]["notes"] == [
        "CPU node 0, memory node 1: not measured: the child failed: RuntimeError: out of memory",
        "CPU node 1, memory node 0: not measured: the child's answer holds no figure",
        "CPU node 1, memory node 1: not measured: the child failed: no output (numactl or the Python is missing, "
        "or the child failed)"]
    assert found["gpus"]["notes"] == [
        "NUMA node 0: not measured: the child's answer holds no copies",
        "NUMA node 1: not measured: the child failed: no output (numactl or the Python is missing, or the child failed)"]


def test_measure_without_gpus_runs_no_gpu_child():
    reader = host({0: ("0-1", 1 << 20)}, {("memory", 0, 0): triad(40), ("gpu", 0, 0): copies((1.0, 1.0))})
    found = measure.measure(reader, dict(SETTINGS, gpus=False))
    assert found["gpus"] == {"method": None, "copies": [], "notes": ["not measured: gpus is false"]}


def test_measure_without_numa_nodes_in_sysfs_measures_nothing():
    found = checks.check_bandwidth("bandwidth", measure.measure(CaptureReader({"capture_version": 1}), dict(SETTINGS)))
    assert found["memory"]["pairs"] == [] and found["gpus"]["copies"] == []
    assert found["memory"]["notes"] == ["not measured: sysfs lists no NUMA node with CPUs and one with memory"]


@pytest.mark.parametrize("option, value, message", [
    ("size_mib", 0, "size_mib: must be an integer 1-16384 (MiB per buffer) (got 0)"),
    ("size_mib", True, "size_mib: must be an integer 1-16384 (MiB per buffer) (got True)"),
    ("seconds", 61, "seconds: must be a number 0.01-60.0 (seconds per measurement) (got 61)"),
    ("timeout", "9", "timeout: must be an integer 1-3600 (seconds per child) (got '9')"),
    ("kernel", "numpy", "kernel: must be one of auto, torch, stdlib (got 'numpy')"),
])
def test_check_settings_names_the_option_and_the_rule(option, value, message):
    with pytest.raises(ValueError) as caught:
        measure.check_settings(dict(SETTINGS, **{option: value}))
    assert str(caught.value) == message
    with pytest.raises(ValueError) as caught:
        measure.check_settings(dict(SETTINGS, **{option: value}), {option: "gpufleet_bandwidth_" + option})
    assert str(caught.value) == "gpufleet_bandwidth_" + message


def test_choose_python_takes_the_first_that_exists_else_its_own():
    which = {"/opt/vllm/bin/python": "/opt/vllm/bin/python"}.get
    assert measure.choose_python(["/srv/none/python", "/opt/vllm/bin/python"], which, "/usr/bin/python3") == (
        "/opt/vllm/bin/python", None)
    python, note = measure.choose_python(["/srv/none/python"], which, "/usr/bin/python3")
    assert python == "/usr/bin/python3" and note.startswith("no engine Python found (/srv/none/python): measured with "
                                                            "/usr/bin/python3, the module's own Python")


def test_measure_on_this_machine_under_the_real_numactl():
    """This machine: node 0 with CPUs and memory; the standard-library kernel on this Python, small and short."""
    numactl = shutil.which("numactl")
    assert numactl, "numactl is needed (scripts/setup installs it)"
    reader = LiveReader("/", timeout=60)
    found = checks.check_bandwidth("bandwidth", measure.measure(reader, dict(
        SETTINGS, python=sys.executable, kernel="stdlib", size_mib=8, seconds=0.05)))
    assert found["memory"]["method"] == "stdlib-copy", found
    local = [p for p in found["memory"]["pairs"] if p["cpu_node"] == p["memory_node"] == 0]
    assert len(local) == 1 and local[0]["gbps"] > 0.1 and local[0]["threads"] >= 1
    assert found["gpus"]["notes"][0].startswith("not measured: no torch in ") or found["gpus"]["copies"]
