# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""bandwidth/checks.py: a record passes whole or fails naming the field
and the rule (a host's numa_bandwidth result and a kept plan's
hosts.HOST.bandwidth are untrusted input)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import checks


def good():
    return {
        "version": 1, "measured_at": "2025-05-01T12:00:00Z", "python": "/opt/vllm/bin/python", "size_mib": 256,
        "seconds": 0.5,
        "memory": {"method": "torch-triad", "notes": ["NUMA node 2: no CPUs (memory only): no measurement runs on its CPUs"],
                   "pairs": [{"cpu_node": 0, "memory_node": 0, "gbps": 95.2, "threads": 32},
                             {"cpu_node": 0, "memory_node": 1, "gbps": 51, "threads": None}]},
        "gpus": {"method": "torch-cuda-pinned", "notes": [],
                 "copies": [{"node": 0, "gpu": "0000:18:00.0", "index": 0, "gpu_node": 0, "name": "NVIDIA H100",
                             "h2d_gbps": 53.1, "d2h_gbps": 52.7},
                            {"node": 1, "gpu": "GPU3", "index": None, "gpu_node": None, "name": None,
                             "h2d_gbps": 20.0, "d2h_gbps": 21.0}]},
    }


def test_check_bandwidth_accepts_a_measured_record():
    assert checks.check_bandwidth("b", good()) == good()
    assert checks.check_bandwidth("b", good(), nodes={0, 1}) == good()


def set_path(value, path, new):
    target = value
    for key in path[:-1]:
        target = target[key]
    if new is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = new
    return value


@pytest.mark.parametrize("path, new, message", [
    (("version",), 2, "b.version: must be at most 1 (got 2)"),
    (("measured_at",), "yesterday", "b.measured_at: must be a UTC time YYYY-MM-DDTHH:MM:SSZ (got 'yesterday')"),
    (("size_mib",), 0, "b.size_mib: must be at least 1 (got 0)"),
    (("seconds",), "0.5", "b.seconds: must be a number of seconds above 0, at most 60 (got '0.5')"),
    (("python",), None, "b.python: must be a string (got None)"),
    (("extra",), 1, "b: has unknown field(s) extra (known: version, measured_at, python, size_mib, seconds, memory, "
                    "gpus) (got ['extra'])"),
    (("gpus",), KeyError, "b: lacks gpus"),
    (("memory", "method"), "stream", "b.memory.method: must be one of torch-triad, stdlib-copy (got 'stream')"),
    (("memory", "method"), None, "b.memory.method: must name the method of the figures in pairs (got None)"),
    (("memory", "pairs", 1, "gbps"), 0, "b.memory.pairs[1].gbps: must be above 0 and at most 100000 GB/s (got 0)"),
    (("memory", "pairs", 1, "gbps"), float("nan"), "b.memory.pairs[1].gbps: must be a number of GB/s (got nan)"),
    (("memory", "pairs", 1, "gbps"), True, "b.memory.pairs[1].gbps: must be a number of GB/s (got True)"),
    (("memory", "pairs", 1, "memory_node"), 0, "b.memory.pairs[1]: must not repeat a pair of CPU node and memory "
                                               "node (got [0, 0])"),
    (("memory", "pairs", 0, "cpu_node"), 4095, "b.memory.pairs[0].cpu_node: must be at most 1023 (got 4095)"),
    (("memory", "pairs", 0, "threads"), 0, "b.memory.pairs[0].threads: must be at least 1 (got 0)"),
    (("memory", "notes"), ["x" * 5000], "b.memory.notes[0]: must be at most 4096 characters"),
    (("gpus", "copies", 0, "gpu"), "../../etc", "b.gpus.copies[0].gpu: must be a GPU id (a PCI bus id, a UUID or "
                                                "GPU<index>) (got '../../etc')"),
    (("gpus", "copies", 1, "gpu"), "0000:18:00.0", "b.gpus.copies[1].index: must be an integer (got None)"),
    (("gpus", "copies", 0, "d2h_gbps"), -1, "b.gpus.copies[0].d2h_gbps: must be above 0"),
    (("gpus", "copies", 0, "h2d"), 1, "b.gpus.copies[0]: has unknown field(s) h2d"),
    (("gpus", "copies"), {}, "b.gpus.copies: must be a list (got {})"),
])
def test_check_bandwidth_names_the_field_and_the_rule(path, new, message):
    bad = set_path(good(), path, new)
    if path == ("gpus", "copies", 1, "gpu"):  # a repeated pair of node and GPU
        bad["gpus"]["copies"][1].update(node=0, index=0)
        message = "b.gpus.copies[1]: must not repeat a pair of NUMA node and GPU (got [0, '0000:18:00.0'])"
    with pytest.raises(ValueError) as caught:
        checks.check_bandwidth("b", bad)
    assert str(caught.value).startswith(message)


def test_check_bandwidth_refuses_nodes_the_host_does_not_have():
    with pytest.raises(ValueError) as caught:
        checks.check_bandwidth("hosts.gpu-a.bandwidth", good(), nodes={0})
    assert str(caught.value) == ("hosts.gpu-a.bandwidth.memory.pairs[1].memory_node: must be a NUMA node this host "
                                 "has (0) (got 1)")


def test_check_bandwidth_bounds_every_list():
    bad = good()
    bad["memory"]["pairs"] = [copy.deepcopy(bad["memory"]["pairs"][0])] * (checks.MAX_PAIRS + 1)
    with pytest.raises(ValueError) as caught:
        checks.check_bandwidth("b", bad)
    assert str(caught.value) == "b.memory.pairs: must hold at most 4096 entries (got '4097 entries')"
    bad = good()
    bad["gpus"]["notes"] = ["n"] * (checks.MAX_NOTES + 1)
    with pytest.raises(ValueError) as caught:
        checks.check_bandwidth("b", bad)
    assert str(caught.value) == "b.gpus.notes: must hold at most 256 entries (got '257 entries')"
