# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""nvidia-smi parsers against the recorded machines and damaged pastes."""

from __future__ import absolute_import, division, print_function

import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi import QUERY_COMMAND, parse_query_gpu
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi_topo import TOPO_COMMAND

__metaclass__ = type

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
GPU_KEYS = {
    "index", "pci_bus_id", "uuid", "name", "memory_mb", "numa_node",
    "local_cpus", "mig_mode", "pcie", "vendor", "memory_numa_node",
}


def _capture(name):
    with open(os.path.join(MACHINES, name, "capture.yml")) as handle:
        return yaml.safe_load(handle)


def test_topo_and_query_commands_are_the_documented_command_lines():
    assert TOPO_COMMAND == "nvidia-smi topo -m"
    assert QUERY_COMMAND == (
        "nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,mig.mode.current"
        " --format=csv,noheader,nounits"
    )


def test_parse_query_gpu_azure_identity_and_bus_ids():
    partial = parse_query_gpu(_capture("azure_ndv4_like")["commands"][QUERY_COMMAND])
    assert partial["warnings"] == []
    assert [g["pci_bus_id"] for g in partial["gpus"]] == [
        "0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0004:00:00.0",
        "000b:00:00.0", "000c:00:00.0", "000d:00:00.0", "000e:00:00.0",
    ]
    first = partial["gpus"][0]
    assert set(first) == GPU_KEYS
    assert first["index"] == 0
    assert first["name"] == "NVIDIA A100-SXM4-40GB"
    assert first["memory_mb"] == 40960
    assert first["mig_mode"] == "disabled"
    assert first["uuid"].startswith("GPU-")
    assert first["numa_node"] is None and first["local_cpus"] is None
    assert partial["links"] == {} and partial["numa_nodes"] == []


def test_parse_query_gpu_header_units_and_not_available_values():
    text = (
        "index, uuid, name, pci.bus_id, memory.total [MiB], mig.mode.current\n"
        "0, GPU-1b2c, NVIDIA H100 80GB HBM3, 00000000:1B:00.0, 81559 MiB, Enabled\n"
        "1, GPU-3d4e, NVIDIA GeForce RTX 4090, 00000000:41:00.0, [N/A], [N/A]\n"
    )
    partial = parse_query_gpu(text)
    assert partial["warnings"] == []
    assert [g["memory_mb"] for g in partial["gpus"]] == [81559, None]
    assert [g["mig_mode"] for g in partial["gpus"]] == ["enabled", None]
    assert [g["pci_bus_id"] for g in partial["gpus"]] == ["0000:1b:00.0", "0000:41:00.0"]


def test_parse_query_gpu_bad_lines_warn_and_are_skipped():
    text = (
        "0, GPU-1b2c, NVIDIA H100, 00000000:1B:00.0, 81559, Disabled\n"
        "1, GPU-3d4e, NVIDIA H100\n"
        "x, GPU-5f6a, NVIDIA H100, 00000000:2B:00.0, 81559, Disabled\n"
        "3, GPU-7a8b, NVIDIA H100, not-a-bus, 81559, Disabled\n"
    )
    partial = parse_query_gpu(text)
    assert [g["index"] for g in partial["gpus"]] == [0, 3]
    assert partial["gpus"][1]["pci_bus_id"] is None
    assert len(partial["warnings"]) == 3
    assert any("line 2" in w for w in partial["warnings"])
    assert any("not-a-bus" in w for w in partial["warnings"])


@pytest.mark.parametrize(
    "text",
    ["", "Field \"mig.mode.current\" is not a valid field to query.\n", None],
    ids=["empty", "unknown-field", "none"],
)
def test_parse_query_gpu_failed_command_gives_empty_partial_with_warning(text):
    partial = parse_query_gpu(text)
    assert partial["gpus"] == []
    assert len(partial["warnings"]) == 1


def test_query_gpu_cuts_the_201st_warning():
    text = "".join("%d, GPU-x, H100, zz, 80, Disabled\n" % i for i in range(201))
    warnings = parse_query_gpu(text)["warnings"]
    assert warnings[200] == "nvidia-smi --query-gpu: 1 more warnings not shown"
    assert len(parse_query_gpu(text.replace("200, GPU", "x, GPU"))["warnings"]) == 201  # 200 bus ids, one index
