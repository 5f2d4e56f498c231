# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of nvidia_smi_topo that the mutation run (scripts/mutation.py) showed
missing: whole partials of recorded machines, and the exact warnings of each
affinity and link cell the parser refuses."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvidia_smi_topo
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi_topo import TOPO_COMMAND, parse_topo_matrix

TITLES = "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"


def _recorded(name):
    with open(os.path.join(fixture_paths.MACHINES, name, "capture.yml")) as handle:
        return yaml.safe_load(handle)["commands"][TOPO_COMMAND]


def _gpu(index, numa_node=None, local_cpus=None, memory_numa_node=None):
    return {"index": index, "pci_bus_id": None, "uuid": None, "name": None, "memory_mb": None,
            "numa_node": numa_node, "local_cpus": local_cpus, "mig_mode": None, "pcie": None,
            "vendor": "nvidia", "memory_numa_node": memory_numa_node}


def _two_gpus(row0_affinity, row1_affinity="4-7\t1\tN/A", titles=TITLES, cell01="PIX", cell10="PIX"):
    return "\n".join(["\tGPU0\tGPU1" + titles,
                      "GPU0\t X \t%s\t%s" % (cell01, row0_affinity),
                      "GPU1\t%s\t X \t%s" % (cell10, row1_affinity)])


def _gpu0(text):
    partial = parse_topo_matrix(text)
    return partial["gpus"][0], partial["warnings"]


def test_recorded_gh200_whole_partial_with_gpu_numa_id():
    assert parse_topo_matrix(_recorded("gh200_grace_hopper")) == {
        "gpus": [_gpu(0, numa_node=0, local_cpus="0-71", memory_numa_node=1)],
        "links": {},
        "numa_nodes": [{"id": 0, "cpus": "0-71"}],
        "warnings": [],
        "error": None,
        "nics": [{"name": "NIC0", "device": "mlx5_0", "links": {"GPU0": "NODE"}}],
    }


def test_recorded_rtx3090_numa_na_whole_partial():
    assert parse_topo_matrix(_recorded("rtx3090_2gpu_threadripper_numa_na")) == {
        "gpus": [_gpu(0, local_cpus="0-7,16-23"), _gpu(1, numa_node=1, local_cpus="8-15,24-31")],
        "links": {"GPU0": {"GPU1": "SYS"}, "GPU1": {"GPU0": "SYS"}},
        "numa_nodes": [{"id": 1, "cpus": "8-15,24-31"}],
        "warnings": ["GPU0: NUMA Affinity is N/A; NUMA node unknown"],
        "error": None,
        "nics": [],
    }


def test_numa_affinity_of_two_nodes_is_unknown_with_the_exact_warning():
    gpu, warnings = _gpu0(_two_gpus("0-3\t0-1\tN/A"))
    assert (gpu["numa_node"], gpu["local_cpus"]) == (None, "0-3")
    assert warnings == ["GPU0: NUMA Affinity '0-1' names several nodes; NUMA node unknown"]


@pytest.mark.parametrize("cell, node", [("123456789", 123456789), ("7", 7)])
def test_gpu_numa_id_up_to_nine_digits(cell, node):
    gpu, warnings = _gpu0(_two_gpus("0-3\t0\t" + cell))
    assert (gpu["memory_numa_node"], warnings) == (node, [])


# "\u0661" is ARABIC-INDIC DIGIT ONE: a digit to str.isdigit and int(), not to nvidia-smi.
@pytest.mark.parametrize("cell, shown", [("1234567890", "1234567890"), ("-", "-"), ("\u0661", "\u0661")])
def test_gpu_numa_id_unreadable_is_unknown_with_the_exact_warning(cell, shown):
    gpu, warnings = _gpu0(_two_gpus("0-3\t0\t" + cell))
    assert gpu["memory_numa_node"] is None
    assert warnings == ["GPU0: unreadable GPU NUMA ID '%s'" % shown]


def test_cpu_affinity_na_is_unknown_without_a_warning():
    gpu, warnings = _gpu0(_two_gpus("N/A\t0\tN/A"))
    assert (gpu["local_cpus"], gpu["numa_node"], warnings) == (None, 0, [])


def test_cpu_affinity_unreadable_exact_warning():
    gpu, warnings = _gpu0(_two_gpus("0--3\t0\tN/A"))
    assert gpu["local_cpus"] is None
    assert warnings == ["GPU0: unreadable CPU Affinity '0--3'"]


def test_unexpected_affinity_cells_are_named_unquoted_and_dropped_from_the_left():
    gpu, warnings = _gpu0(_two_gpus("zz\tyy\t0-3\t0\tN/A"))
    assert (gpu["local_cpus"], gpu["numa_node"]) == ("0-3", 0)
    assert warnings == ["nvidia-smi topo -m: row GPU0 has unexpected cells zz yy"]


def test_row_labels_with_leading_zeros_are_the_gpus_of_the_header():
    text = "\n".join(["\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity",
                      "GPU00\t X \tNV4\t0-3\t0",
                      "GPU01\tNV4\t X \t4-7\t1"])
    partial = parse_topo_matrix(text)
    assert partial["warnings"] == []
    assert partial["links"] == {"GPU0": {"GPU1": "NV4"}, "GPU1": {"GPU0": "NV4"}}
    assert [g["local_cpus"] for g in partial["gpus"]] == ["0-3", "4-7"]


def test_na_link_cell_is_silent_and_an_off_diagonal_x_is_named():
    partial = parse_topo_matrix(_two_gpus("0-3\t0\tN/A", cell01="N/A", cell10="X"))
    assert partial["links"] == {}
    assert partial["warnings"] == ["nvidia-smi topo -m: GPU1-GPU0 has cell 'X'"]


def test_a_parser_bug_is_named_not_raised(monkeypatch):
    def broken(lines):
        raise RuntimeError("boom")

    monkeypatch.setattr(nvidia_smi_topo, "_find_header", broken)
    assert parse_topo_matrix("\tGPU0\nGPU0\t X ") == {
        "gpus": [], "links": {}, "numa_nodes": [],
        "warnings": ["nvidia-smi topo -m: could not be read (RuntimeError: boom)"],
        "error": "RuntimeError: boom",
    }
