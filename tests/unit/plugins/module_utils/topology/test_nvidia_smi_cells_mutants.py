# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of nvidia_smi_cells that the mutation run (scripts/mutation.py) showed
missing: the edges of header cutting, legend lines, the NVLink/cpulist split
and the bounds of read_cells. Exact values throughout."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvidia_smi_cells as cells


def test_header_devices_refuses_a_token_that_only_starts_with_a_device_name():
    # "GPU1x" holds GPU1, but the token is not made of device names.
    assert cells.header_devices("\tGPU0\tGPU1x") is None
    assert cells.header_devices("\tGPU0\tNIC0junk\tCPU Affinity") is None


def test_header_devices_keeps_the_last_character_before_the_title_or_the_end():
    # A paste that lost the tab before "CPU Affinity", and a header without titles.
    assert cells.header_devices("\tGPU0\tGPU1CPU Affinity") == ["GPU0", "GPU1"]
    assert cells.header_devices("\tGPU0\tGPU1") == ["GPU0", "GPU1"]


def test_split_label_legend_with_a_space_before_the_colon_is_no_row():
    assert cells.split_label("NIC0 : mlx5_0") == (None, None)
    assert cells.split_label("  GPU0 :x") == (None, None)


@pytest.mark.parametrize("token, cell, rest", [
    # One digit after NV is the count itself: nothing to give back.
    ("NV2-47", "NV2", "-47"),
    # Two digits: the last one starts the cpulist.
    ("NV10-47", "NV1", "0-47"),
    # At most three digits stay with NV, as many as leave a valid cpulist.
    ("NV1812-47", "NV181", "2-47"),
    ("NV12345-47", "NV123", "45-47"),
])
def test_read_cells_nvlink_digits_given_back_to_the_cpulist(token, cell, rest):
    assert cells.read_cells(["X", token], 2) == (["X", cell], [rest])


def test_read_cells_nvlink_split_only_on_the_last_cell():
    # The split is for the last link cell, where the affinity follows; before
    # it, "-47" is no cell and the row stops there.
    assert cells.read_cells(["X", "NV10-47", "SYS"], 3) == (["X", "NV10"], ["-47", "SYS"])


def test_read_cells_takes_no_more_than_count():
    assert cells.read_cells(["X", "PIX", "NODE"], 2) == (["X", "PIX"], ["NODE"])
    assert cells.read_cells(["XPIXNODE"], 2) == (["X", "PIX"], ["NODE"])
    # The rest of the cut token comes first, the other tokens after it whole.
    assert cells.read_cells(["XPIXNODE", "0-3"], 2) == (["X", "PIX"], ["NODE", "0-3"])


def test_read_cells_with_nothing_to_read_gives_the_tokens_back_whole():
    assert cells.read_cells(["0-47"], 2) == ([], ["0-47"])
    assert cells.read_cells(["0-47", "1"], 0) == ([], ["0-47", "1"])
    assert cells.read_cells([], 2) == ([], [])


def test_read_cells_fast_path_when_exactly_count_tokens():
    whole = {}
    assert cells.read_cells(["X", "PIX"], 2, whole) == (["X", "PIX"], [])
    assert whole == {"X": True, "PIX": True}
    # A merged token is no whole cell: the slow path splits it.
    whole = {}
    assert cells.read_cells(["X", "NODENODE", "0-3"], 3, whole) == (["X", "NODE", "NODE"], ["0-3"])
    assert whole == {"X": True, "NODENODE": False}
