# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of nvidia_smi (the --query-gpu CSV) that the mutation run
(scripts/mutation.py) showed missing: quoted fields, blank rows, line numbers
in warnings, the GPU count bound and the parser-bug fallback."""

from __future__ import annotations

import os

import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import MAX_GPUS
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvidia_smi
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi import QUERY_COMMAND, parse_query_gpu


def _recorded(name):
    with open(os.path.join(fixture_paths.MACHINES, name, "capture.yml")) as handle:
        return yaml.safe_load(handle)["commands"][QUERY_COMMAND]


def _line(index):
    return "%d, GPU-5e7f0000-0000-4000-8000-%012d, NVIDIA H100 80GB HBM3, 00000000:%02x:00.0, 81559, Disabled" % (
        index, index, index % 256)


def test_recorded_gh200_whole_gpu():
    partial = parse_query_gpu(_recorded("gh200_grace_hopper"))
    assert (partial["warnings"], partial["error"]) == ([], None)
    assert partial["gpus"] == [{
        "index": 0, "pci_bus_id": "0009:01:00.0", "uuid": "GPU-5a1c3e2b-7d40-4f8e-9b61-0c2d4e6f8a10",
        "name": "NVIDIA GH200 480GB", "memory_mb": 97871, "numa_node": None, "local_cpus": None,
        "mig_mode": "disabled", "pcie": None, "vendor": "nvidia", "memory_numa_node": None,
    }]


def test_a_quoted_name_with_a_comma_after_the_separator_space_is_one_field():
    text = '0, GPU-1, "NVIDIA A100, SXM4", 00000000:07:00.0, 40960, Enabled'
    partial = parse_query_gpu(text)
    assert partial["warnings"] == []
    assert [(g["name"], g["mig_mode"], g["memory_mb"]) for g in partial["gpus"]] == [("NVIDIA A100, SXM4", "enabled", 40960)]


def test_rows_of_blank_cells_are_skipped_and_lines_are_counted_from_one():
    text = " , ,\n" + _line(0) + "\n0, GPU-x\nx, GPU-y, n, 00000000:01:00.0, 1, Disabled\n"
    partial = parse_query_gpu(text)
    assert [g["index"] for g in partial["gpus"]] == [0]
    assert partial["warnings"] == [
        "nvidia-smi --query-gpu: line 2 has 2 fields, expected 6: '0, GPU-x'",
        "nvidia-smi --query-gpu: line 3: index 'x' is not a number",
    ]


def test_at_most_max_gpus_are_read():
    partial = parse_query_gpu("\n".join(_line(i) for i in range(MAX_GPUS + 1)))
    assert len(partial["gpus"]) == MAX_GPUS
    assert partial["gpus"][-1]["index"] == MAX_GPUS - 1
    assert partial["warnings"] == ["nvidia-smi --query-gpu: more than %d GPUs; the rest is not read" % MAX_GPUS]


def test_a_parser_bug_is_named_not_raised(monkeypatch):
    def broken(text):
        raise RuntimeError("boom")

    monkeypatch.setattr(nvidia_smi, "_parse_query_gpu", broken)
    assert parse_query_gpu(_line(0)) == {
        "gpus": [], "links": {}, "numa_nodes": [],
        "warnings": ["nvidia-smi --query-gpu: could not be read (RuntimeError: boom)"],
        "error": "RuntimeError: boom",
    }
