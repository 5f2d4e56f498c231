# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""bandwidth/verdict.py with published figures (docs/bandwidth.md,
"Published figures"): a P100 box, 12.2 GB/s local vs 3.8 GB/s remote H2D;
a GB200, about 330 vs 115 GB/s; a dual EPYC with MI210s, no difference;
and hosts with one NUMA node or nothing measured."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import verdict


def record(pairs=(), copies=(), memory_notes=(), gpu_notes=()):
    """A checked bandwidth record from (cpu, mem, GB/s) pairs and
    (node, gpu, index, gpu_node, h2d, d2h) copies."""
    value = {
        "version": 1, "measured_at": "2025-05-01T12:00:00Z", "python": "/opt/vllm/bin/python", "size_mib": 256,
        "seconds": 0.5,
        "memory": {"method": "torch-triad" if pairs else None, "notes": list(memory_notes),
                   "pairs": [{"cpu_node": c, "memory_node": m, "gbps": g, "threads": 32} for c, m, g in pairs]},
        "gpus": {"method": "torch-cuda-pinned" if copies else None, "notes": list(gpu_notes),
                 "copies": [{"node": n, "gpu": g, "index": i, "gpu_node": home, "name": "GPU", "h2d_gbps": h,
                             "d2h_gbps": d} for n, g, i, home, h, d in copies]},
    }
    return checks.check_bandwidth("bandwidth", value)


P100 = record(copies=[(0, "0000:04:00.0", 0, 0, 12.2, 12.6), (1, "0000:04:00.0", 0, 0, 3.8, 5.1)])
GB200 = record(copies=[(0, "0008:01:00.0", 0, 0, 330.0, 320.0), (1, "0008:01:00.0", 0, 0, 115.0, 112.0)])
MI210 = record(pairs=[(0, 0, 160.0), (0, 1, 158.0), (1, 1, 161.0), (1, 0, 159.5)],
               copies=[(0, "0000:c1:00.0", 0, 1, 24.9, 25.1), (1, "0000:c1:00.0", 0, 1, 25.0, 25.2)])


def test_verdict_p100_published_figures_say_binding_worth_3_2x():
    found = verdict.verdict(P100)
    assert found["effect"] is True and found["worth"] == 3.21
    assert found["text"] == ("binding worth 3.2x here (H2D GPU 0 (0000:04:00.0): 12.2 GB/s from node 0, "
                             "3.8 GB/s from node 1)")


def test_verdict_gb200_published_figures_say_binding_worth_2_9x():
    found = verdict.verdict(GB200)
    assert found["effect"] is True and found["worth"] == 2.87
    assert found["text"].startswith("binding worth 2.9x here (H2D GPU 0 (0008:01:00.0): 330.0 GB/s from node 0")


def test_verdict_mi210_equal_figures_say_no_measurable_effect():
    found = verdict.verdict(MI210)
    assert found["effect"] is False and found["worth"] < verdict.NOISE
    assert found["text"].startswith("no measurable effect (local within 15% of remote: largest ")


def test_verdict_threshold_is_noise_exactly():
    below = record(pairs=[(0, 0, 114.9), (0, 1, 100.0)])
    at = record(pairs=[(0, 0, 115.0), (0, 1, 100.0)])
    assert verdict.verdict(below)["effect"] is False
    assert verdict.verdict(at)["effect"] is True and verdict.verdict(at)["text"].startswith(
        "binding worth 1.15x here (memory: 115.0 GB/s on node 0, 100.0 GB/s across 0->1)")


def test_verdict_memory_compares_best_local_with_worst_remote():
    found = verdict.memory_ratio(record(pairs=[(0, 0, 90.0), (1, 1, 100.0), (0, 1, 60.0), (1, 0, 50.0)])["memory"])
    assert (found["local_gbps"], found["local_node"], found["remote_gbps"], found["remote_node"], found["ratio"]) == (
        100.0, 1, 50.0, "1->0", 2.0)


def test_verdict_gpu_without_its_node_compares_its_best_node_with_the_others():
    found = verdict.gpu_ratios(record(copies=[(0, "0000:04:00.0", 0, None, 3.8, 5.0),
                                              (1, "0000:04:00.0", 0, None, 12.2, 12.0)])["gpus"])
    assert [(r["what"], r["local_node"], r["remote_node"], r["ratio"]) for r in found] == [
        ("H2D", 1, 0, 3.21), ("D2H", 1, 0, 2.4)]


def test_verdict_one_numa_node_has_nothing_to_compare():
    note = "not measured: torch 2.13.0+cpu sees no CUDA or ROCm device"
    found = verdict.verdict(record(pairs=[(0, 0, 46.0)], gpu_notes=[note]))
    assert found == {"text": "one NUMA node: nothing to compare", "worth": None, "effect": None, "ratios": []}


def test_verdict_nothing_measured_says_why():
    found = verdict.verdict(record(memory_notes=["CPU node 0, memory node 0: not measured: the child failed: x"],
                                   gpu_notes=["not measured: gpus is false"]))
    assert found["text"] == "not measured: CPU node 0, memory node 0: not measured: the child failed: x"
    assert verdict.verdict(record())["text"] == "not measured"


def test_lines_show_verdict_figures_and_notes():
    lines = verdict.lines(P100, "gpu-a")
    assert lines[0].startswith("gpu-a: binding worth 3.2x here")
    assert lines[1:] == ["  GPU 0 0000:04:00.0 from node 0: H2D 12.2 GB/s, D2H 12.6 GB/s",
                         "  GPU 0 0000:04:00.0 from node 1: H2D 3.8 GB/s, D2H 5.1 GB/s"]


@pytest.mark.parametrize("field", ["h2d_gbps", "d2h_gbps"])
def test_verdict_takes_the_worst_direction_into_account(field):
    value = copy.deepcopy(MI210)
    value["gpus"]["copies"][0][field] = 50.0  # from node 0, remote for this GPU (node 1)
    value["gpus"]["copies"][1][field] = 25.0
    found = verdict.verdict(value)
    assert found["effect"] is False  # remote faster than local: binding is worth nothing
    value["gpus"]["copies"][1][field] = 100.0
    assert verdict.verdict(value)["worth"] == 2.0


def test_lines_print_a_hosts_control_characters_escaped():
    """The probe: a note of a host's bandwidth result (free text, checked
    for length only) reached the console with its escapes and newlines."""
    found = record(memory_notes=["not measured: \x1b[31mred\x1b[0m\nfake: line"])
    lines = verdict.lines(found, "gpu-a")
    assert lines == ["gpu-a: not measured: \\x1b[31mred\\x1b[0m\\x0afake: line",
                     "  note: not measured: \\x1b[31mred\\x1b[0m\\x0afake: line"]
