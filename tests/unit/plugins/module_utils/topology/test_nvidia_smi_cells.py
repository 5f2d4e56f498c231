# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of nvidia_smi_cells: the tokens of `nvidia-smi topo -m` (header names, row labels, merged cells)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvidia_smi_cells as cells


def test_header_devices_splits_merged_names_and_stops_at_affinity_titles():
    line = "\tGPU0\tGPU1\tNIC0NIC1\tmlx5_2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    assert cells.header_devices(line) == ["GPU0", "GPU1", "NIC0", "NIC1", "mlx5_2"]


@pytest.mark.parametrize("line", ["", "Legend:", "\tNIC0\tGPU0\tCPU Affinity", "\tGPU0\tfoo\tCPU Affinity"])
def test_header_devices_none_for_what_is_no_header(line):
    assert cells.header_devices(line) is None


def test_split_label_gpu10_is_not_gpu1_and_a_legend_is_no_row():
    assert cells.split_label("GPU10\t X \tNV4") == ("GPU10", "\t X \tNV4")
    assert cells.split_label("GPU1NODE\tX") == ("GPU1", "NODE\tX")
    assert cells.split_label("  NIC0: mlx5_0") == (None, None)
    assert cells.split_label("GPU10x") == (None, None)


def test_read_cells_splits_merged_tokens_and_gives_back_the_rest():
    assert cells.read_cells(["X", "NODENODE", "SYS", "0-3", "0"], 4) == (["X", "NODE", "NODE", "SYS"], ["0-3", "0"])
    # A clean row takes the fast path: the first `count` tokens as they are.
    whole = {}
    assert cells.read_cells(["X", "PIX", "0-3"], 2, whole) == (["X", "PIX"], ["0-3"])
    assert whole == {"X": True, "PIX": True}


def test_read_cells_nvlink_merged_with_cpu_affinity():
    assert cells.read_cells(["X", "NV180-47,96-143", "0"], 2) == (["X", "NV18"], ["0-47,96-143", "0"])


def test_affinity_tokens_split_merged_numa_cells():
    assert cells.affinity_tokens(["0-3", "0N/A", "N/A"]) == ["0-3", "0", "N/A", "N/A"]


@pytest.mark.parametrize("cell, value", [("SOC", "SYS"), ("NV12", "NV12"), ("PIX", "PIX"), ("X", None),
                                         ("N/A", None), ("XGMI2", None)])
def test_link_value_reads_old_names_and_refuses_what_is_no_nvidia_smi_link(cell, value):
    assert cells.link_value(cell) == value
