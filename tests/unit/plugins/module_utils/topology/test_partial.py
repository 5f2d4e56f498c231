# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of partial: the partial dict every GPU source returns."""

from __future__ import absolute_import, division, print_function

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import partial as topology_partial

__metaclass__ = type

PARTIAL_KEYS = {"gpus", "links", "numa_nodes", "warnings", "error"}
GPU_KEYS = {
    "index", "pci_bus_id", "uuid", "name", "memory_mb", "numa_node",
    "local_cpus", "mig_mode", "pcie", "vendor", "memory_numa_node",
}


def test_empty_partial_has_all_keys():
    assert set(topology_partial.empty_partial()) == PARTIAL_KEYS
    assert set(topology_partial.new_gpu()) == GPU_KEYS


def test_bounded_warnings_keeps_200_and_counts_the_rest():
    assert topology_partial.bounded_warnings(["w"] * 200, "src") == ["w"] * 200
    assert topology_partial.bounded_warnings(["w"] * 203, "src") == ["w"] * 200 + ["src: 3 more warnings not shown"]


def test_gave_up_names_the_exception_and_is_empty():
    got = topology_partial.gave_up("nvidia-smi topo -m", KeyError("x" * 500))
    assert got["gpus"] == [] and got["links"] == {} and got["error"].startswith("KeyError: ")
    assert len(got["error"]) < 120  # the value is cut
    assert got["warnings"] == ["nvidia-smi topo -m: could not be read (%s)" % got["error"]]
