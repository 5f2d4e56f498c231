# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/exclude.py: exclude_gpus entries resolved to one host's GPU ids (the
fleet_plan_by_host side is in test_by_host.py)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.exclude import resolve_exclude
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.host import read_host_view
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology


def _gpus(folder):
    facts = topology.facts_from_capture(os.path.join(fixture_paths.MACHINES, folder, "capture.yml"))
    return read_host_view(facts, "gpu-a").gpus


@pytest.fixture(scope="module")
def machines():
    return {"ndv4": _gpus("azure_ndv4_like"), "h100": _gpus("h100_sxm_8gpu_nvswitch")}


@pytest.mark.parametrize("entries, ids", [
    ([3, "3", "GPU3", "gpu3"], ["0004:00:00.0"]),
    (["0004:00:00.0", "00000004:00:00.0", "GPU-A100A100-0000-4000-8000-000000000005"], ["0004:00:00.0", "000c:00:00.0"]),
    ([], []),
])
def test_entries_resolve_to_sorted_gpu_ids(machines, entries, ids):
    assert resolve_exclude("gpu-a", entries, machines["ndv4"]) == ids


def test_an_id_that_is_no_bus_id_still_names_its_gpu(machines):
    # the h100 capture names its GPUs GPU0..GPU7 (no bus ids): the index form and the id agree
    assert resolve_exclude("gpu-a", ["GPU2", 5], machines["h100"]) == ["GPU2", "GPU5"]


def test_an_entry_that_names_no_gpu_says_which_host_entry_and_gpus(machines):
    gpus = machines["ndv4"]
    with pytest.raises(PlacementError) as info:
        resolve_exclude("gpu-a", ["GPU9"], gpus)
    text = str(info.value)
    assert info.value.host == "gpu-a"
    assert text.startswith("host gpu-a: exclude_gpus entry 'GPU9' names no GPU of this host (its GPUs, as index bus-id uuid: ")
    assert "0 0001:00:00.0 GPU-a100a100-0000-4000-8000-000000000000; " in text and "7 000e:00:00.0" in text
    assert len(text) < 1000


def test_an_entry_of_no_gpu_form_names_the_host(machines):
    with pytest.raises(PlacementError, match=r"^host gpu-a: exclude_gpus holds 1.5, not a GPU index") as info:
        resolve_exclude("gpu-a", [1.5], machines["ndv4"])
    assert info.value.host == "gpu-a"
