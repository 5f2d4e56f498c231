# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of nvidia_smi_topo: `nvidia-smi topo -m` as recorded on real machines and as pasted into bug reports."""

from __future__ import absolute_import, division, print_function

import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi_topo import TOPO_COMMAND, parse_topo_matrix

__metaclass__ = type

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
PARTIAL_KEYS = {"gpus", "links", "numa_nodes", "warnings", "error"}
GPU_KEYS = {
    "index", "pci_bus_id", "uuid", "name", "memory_mb", "numa_node",
    "local_cpus", "mig_mode", "pcie", "vendor", "memory_numa_node",
}


def _machines_with(command):
    found = []
    for name in sorted(os.listdir(MACHINES)):
        path = os.path.join(MACHINES, name, "capture.yml")
        if not os.path.isfile(path):
            continue
        with open(path) as handle:
            capture = yaml.safe_load(handle)
        if command in (capture.get("commands") or {}):
            found.append(pytest.param(name, id=name))
    return found


def _capture(name):
    with open(os.path.join(MACHINES, name, "capture.yml")) as handle:
        return yaml.safe_load(handle)


def _expected(name):
    with open(os.path.join(MACHINES, name, "expected.yml")) as handle:
        return yaml.safe_load(handle)


def _topo(name):
    return _capture(name)["commands"][TOPO_COMMAND]


def _expected_by_index(name):
    """expected.yml re-keyed by GPU<index>, the only id a topo matrix knows."""
    expected = _expected(name)
    label = {key: "GPU%d" % gpu["index"] for key, gpu in expected["gpus"].items()}
    gpus = {
        label[key]: {"numa_node": gpu["numa_node"], "local_cpus": gpu["local_cpus"]}
        for key, gpu in expected["gpus"].items()
    }
    links = {
        label[a]: {label[b]: value for b, value in row.items()}
        for a, row in expected["links"].items()
    }
    return gpus, links


def _gpus_of(partial):
    return {
        "GPU%d" % gpu["index"]: {"numa_node": gpu["numa_node"], "local_cpus": gpu["local_cpus"]}
        for gpu in partial["gpus"]
    }


@pytest.mark.parametrize("name", _machines_with(TOPO_COMMAND))
def test_parse_topo_matrix_recorded_machine_matches_expected(name):
    partial = parse_topo_matrix(_topo(name))
    gpus, links = _expected_by_index(name)
    assert set(partial) >= PARTIAL_KEYS
    assert _gpus_of(partial) == gpus
    assert partial["links"] == links
    for gpu in partial["gpus"]:
        assert set(gpu) == GPU_KEYS
        assert gpu["pci_bus_id"] is None and gpu["vendor"] == "nvidia"


def test_parse_topo_matrix_h100_numa_nodes_from_affinity_columns():
    partial = parse_topo_matrix(_topo("h100_sxm_8gpu_nvswitch"))
    assert partial["numa_nodes"] == [
        {"id": 0, "cpus": "0-47,96-143"},
        {"id": 1, "cpus": "48-95,144-191"},
    ]
    assert partial["warnings"] == []


def test_parse_topo_matrix_nic_columns_are_not_gpus():
    partial = parse_topo_matrix(_topo("rtx4090_8gpu_pcie_switch_quads"))
    assert [g["index"] for g in partial["gpus"]] == list(range(8))
    assert all(not key.startswith("NIC") for key in partial["links"])
    assert all(not other.startswith("NIC") for row in partial["links"].values() for other in row)
    assert partial["nics"] == [
        {
            "name": "NIC0",
            "device": "mlx5_bond_0",
            "links": {"GPU%d" % i: ("PIX" if i < 4 else "SYS") for i in range(8)},
        }
    ]


def test_parse_topo_matrix_numa_na_keeps_cpu_affinity_and_warns():
    partial = parse_topo_matrix(_topo("rtx3090_2gpu_threadripper_numa_na"))
    gpu0 = partial["gpus"][0]
    assert gpu0["numa_node"] is None
    assert gpu0["local_cpus"] == "0-7,16-23"
    assert any("GPU0" in w and "N/A" in w for w in partial["warnings"])
    # Node 0 is not named by any GPU, so this source cannot describe it.
    assert partial["numa_nodes"] == [{"id": 1, "cpus": "8-15,24-31"}]


def test_parse_topo_matrix_old_format_without_gpu_numa_id_column():
    partial = parse_topo_matrix(_topo("rtxa6000_8gpu_nvlink_pairs"))
    assert partial["warnings"] == []
    assert partial["links"]["GPU0"]["GPU1"] == "NV4"
    assert partial["gpus"][7]["local_cpus"] == "64-127,192-254"


def test_parse_topo_matrix_merged_link_tokens():
    text = _topo("rtxa6000_8gpu_nvlink_pairs")
    damaged = text.replace("GPU0     X      NV4     NODE    NODE    SYS", "GPU0     X      NV4     NODENODE    SYSSYS")
    damaged = damaged.replace("SYS     SYS     0-63,128-191", "SYS     SYS0-63,128-191", 1)
    assert damaged != text
    partial = parse_topo_matrix(damaged)
    gpus, links = _expected_by_index("rtxa6000_8gpu_nvlink_pairs")
    assert _gpus_of(partial) == gpus
    assert partial["links"] == links


def test_parse_topo_matrix_link_cell_merged_with_cpu_affinity():
    text = _topo("rtx4090_8gpu_pcie_switch_quads")
    damaged = text.replace("SYS\tSYS\tPIX\t0-35,72-107", "SYS\tSYS\tPIX0-35,72-107", 1)
    assert damaged != text
    partial = parse_topo_matrix(damaged)
    assert partial["gpus"][0]["local_cpus"] == "0-35,72-107"
    assert partial["gpus"][0]["numa_node"] == 0
    assert _gpus_of(partial) == _expected_by_index("rtx4090_8gpu_pcie_switch_quads")[0]


def test_parse_topo_matrix_nvlink_cell_merged_with_cpu_affinity():
    text = _topo("h100_sxm_8gpu_nvswitch")
    # Row GPU0 ends "... NV18    0-47,96-143 ..."; the paste lost the gap.
    damaged = text.replace("NV18    NV18    0-47,96-143", "NV18    NV180-47,96-143", 1)
    assert "NV180-47" in damaged
    partial = parse_topo_matrix(damaged)
    gpus, links = _expected_by_index("h100_sxm_8gpu_nvswitch")
    assert _gpus_of(partial) == gpus
    assert partial["links"] == links
    assert partial["warnings"] == []


def test_parse_topo_matrix_merged_nic_header_names():
    text = _capture("azure_ndv4_like")["commands"][TOPO_COMMAND]
    damaged = text.replace("NIC6\tNIC7", "NIC6NIC7", 1)
    assert damaged != text
    partial = parse_topo_matrix(damaged)
    assert partial["warnings"] == []
    assert partial["links"]["GPU0"]["GPU7"] == "NV12"
    assert [n["name"] for n in partial["nics"]] == ["NIC%d" % i for i in range(8)]


def test_parse_topo_matrix_spaces_instead_of_tabs():
    text = _topo("rtx4090_8gpu_pcie_switch_quads").replace("\t", "   ")
    partial = parse_topo_matrix(text)
    gpus, links = _expected_by_index("rtx4090_8gpu_pcie_switch_quads")
    assert _gpus_of(partial) == gpus
    assert partial["links"] == links


def test_parse_topo_matrix_truncated_row_uses_the_other_direction():
    text = _topo("h100_sxm_8gpu_nvswitch")
    lines = text.split("\n")
    row = [i for i, line in enumerate(lines) if line.strip().startswith("GPU3")][0]
    lines[row] = lines[row][:30]
    partial = parse_topo_matrix("\n".join(lines))
    assert any("row GPU3" in w for w in partial["warnings"])
    # Row GPU3 is cut, but every other row still says how it reaches GPU3.
    assert partial["links"]["GPU3"]["GPU0"] == "NV18"
    assert partial["links"]["GPU0"]["GPU3"] == "NV18"


def test_parse_topo_matrix_several_numa_nodes_in_affinity_is_unknown_with_warning():
    text = (
        "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \t0-71\t0,3-9\t\t2\n"
    )
    partial = parse_topo_matrix(text)
    assert partial["gpus"][0]["numa_node"] is None
    assert partial["gpus"][0]["local_cpus"] == "0-71"
    assert any("GPU0" in w and "several nodes" in w for w in partial["warnings"])
    assert partial["numa_nodes"] == []


def test_parse_topo_matrix_gpu_numa_id_is_not_cpu_locality():
    text = (
        "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \t0-71\t0\t\t4\n"
    )
    partial = parse_topo_matrix(text)
    assert partial["gpus"][0]["numa_node"] == 0


def test_parse_topo_matrix_empty_numa_affinity_cell():
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tSYS\t0-7\t\t\tN/A\n"
        "GPU1\tSYS\t X \t8-15\t1\t\tN/A\n"
    )
    partial = parse_topo_matrix(text)
    assert partial["gpus"][0]["local_cpus"] == "0-7"
    assert partial["gpus"][0]["numa_node"] is None
    assert partial["gpus"][1]["numa_node"] == 1
    assert any("row GPU0" in w and "affinity cells" in w for w in partial["warnings"])


def test_parse_topo_matrix_old_soc_name_reads_as_sys():
    text = (
        "        GPU0    GPU1    CPU Affinity\n"
        "GPU0     X      SOC     0-11\n"
        "GPU1    SOC      X      12-23\n"
    )
    partial = parse_topo_matrix(text)
    assert partial["links"] == {"GPU0": {"GPU1": "SYS"}, "GPU1": {"GPU0": "SYS"}}
    assert [g["numa_node"] for g in partial["gpus"]] == [None, None]
    assert [g["local_cpus"] for g in partial["gpus"]] == ["0-11", "12-23"]


def test_parse_topo_matrix_old_nic_names_as_columns():
    text = (
        "\tGPU0\tGPU1\tmlx5_0\tmlx5_1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV12\tPXB\tSYS\t0-47\t0\n"
        "GPU1\tNV12\t X \tSYS\tPXB\t48-95\t1\n"
        "mlx5_0\tPXB\tSYS\t X \tSYS\n"
        "mlx5_1\tSYS\tPXB\tSYS\t X \n"
    )
    partial = parse_topo_matrix(text)
    assert partial["warnings"] == []
    assert partial["links"] == {"GPU0": {"GPU1": "NV12"}, "GPU1": {"GPU0": "NV12"}}
    assert [n["device"] for n in partial["nics"]] == ["mlx5_0", "mlx5_1"]


def test_parse_topo_matrix_asymmetric_cells_take_the_worse_with_warning():
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tPIX\t0-7\t0\n"
        "GPU1\tSYS\t X \t0-7\t0\n"
    )
    partial = parse_topo_matrix(text)
    assert partial["links"]["GPU0"]["GPU1"] == "SYS"
    assert partial["links"]["GPU1"]["GPU0"] == "SYS"
    assert any("one way" in w for w in partial["warnings"])


def test_parse_topo_matrix_missing_row_gives_unknown_gpu():
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPIX\t0-7\t0\n"
    partial = parse_topo_matrix(text)
    assert [g["index"] for g in partial["gpus"]] == [0, 1]
    assert partial["gpus"][1]["numa_node"] is None
    assert any("no row for GPU1" in w for w in partial["warnings"])
    assert partial["links"] == {"GPU0": {"GPU1": "PIX"}, "GPU1": {"GPU0": "PIX"}}


def test_parse_topo_matrix_row_without_diagonal_x_is_not_trusted():
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\tPIX\tPIX\t0-7\t0\n"
        "GPU1\tPIX\t X \t0-7\t0\n"
    )
    partial = parse_topo_matrix(text)
    assert any("row GPU0" in w and "diagonal" in w for w in partial["warnings"])
    assert partial["links"] == {"GPU0": {"GPU1": "PIX"}, "GPU1": {"GPU0": "PIX"}}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "No devices were found\n",
        "Legend:\n  X = Self\n",
        None,
        b"\tGPU0\n",
        12,
    ],
    ids=["empty", "driver-failure", "no-devices", "legend-only", "none", "bytes", "int"],
)
def test_parse_topo_matrix_unreadable_input_gives_empty_partial_with_warning(text):
    partial = parse_topo_matrix(text)
    assert partial["gpus"] == [] and partial["links"] == {} and partial["numa_nodes"] == []
    assert len(partial["warnings"]) == 1


def test_parse_topo_matrix_windows_line_endings():
    text = _topo("h100_sxm_8gpu_nvswitch").replace("\n", "\r\n")
    gpus, links = _expected_by_index("h100_sxm_8gpu_nvswitch")
    partial = parse_topo_matrix(text)
    assert _gpus_of(partial) == gpus and partial["links"] == links


def test_parse_topo_matrix_zero_padded_label_is_the_same_gpu():
    # found by the damaged-matrix fuzz test: a header "GPU00" keyed links by a
    # label that no GPU had
    text = ("\tGPU00\tGPU1\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tSYS\t0-7\t0\n"
            "GPU1\tSYS\t X \t8-15\t1\n")
    partial = parse_topo_matrix(text)
    assert [g["index"] for g in partial["gpus"]] == [0, 1]
    assert partial["links"] == {"GPU0": {"GPU1": "SYS"}, "GPU1": {"GPU0": "SYS"}}


# Limits pinned one step either side (a limit moved by one fails here).


def _header_only(gpus):
    return "\t" + "\t".join("GPU%d" % i for i in range(gpus)) + "\tCPU Affinity\tNUMA Affinity\n"


def test_topo_matrix_reads_a_header_of_1024_gpus():
    partial = parse_topo_matrix(_header_only(1024))
    assert len(partial["gpus"]) == 1024
    assert not any("names more than" in w for w in partial["warnings"])


def test_topo_matrix_refuses_a_header_of_1025_gpus():
    partial = parse_topo_matrix(_header_only(1025))
    assert partial["gpus"] == []
    assert partial["warnings"] == ["nvidia-smi topo -m: the header names more than 1024 GPUs; not read"]


def test_topo_matrix_keeps_200_warnings():
    # A header without rows: one "no row" warning per GPU.
    warnings = parse_topo_matrix(_header_only(200))["warnings"]
    assert len(warnings) == 200 and warnings[-1] == "nvidia-smi topo -m: no row for GPU199"


def test_topo_matrix_cuts_the_201st_warning():
    warnings = parse_topo_matrix(_header_only(201))["warnings"]
    assert len(warnings) == 201
    assert warnings[199] == "nvidia-smi topo -m: no row for GPU199"
    assert warnings[200] == "nvidia-smi topo -m: 1 more warnings not shown"
