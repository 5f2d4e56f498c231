# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""benchmarks/gpu_check.sh and its helper benchmarks/gpu_check.py, on a
machine without a GPU: the script says so and exits 0 (no nvidia-smi, or
one that lists no GPU); the helper's source comparison on a recorded
machine's facts; its bandwidth part imports torch from the engine venv,
parses its arguments and reports that torch sees no CUDA device."""

import copy
import importlib.util
import os
import pathlib
import shutil
import subprocess

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology

REPO = pathlib.Path(fixture_paths.REPO)
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
SPEC = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gpu_check)


def run_script(path):
    return subprocess.run([str(SCRIPT)], env={"PATH": path, "LANG": "C"}, capture_output=True, text=True,
                          check=False, timeout=120)


def tool_dir(tmp_path, tools):
    """A PATH folder with only these tools (links to the real ones)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in tools:
        (folder / tool).symlink_to(shutil.which(tool))
    return folder


def test_without_nvidia_smi_it_measures_nothing_and_exits_0(tmp_path):
    result = run_script(str(tool_dir(tmp_path, ["bash", "dirname"])))
    assert (result.returncode, result.stdout, result.stderr) == (
        0, "gpu_check: no NVIDIA GPU here (nvidia-smi not found): nothing measured\n", "")


def test_with_an_nvidia_smi_that_lists_no_gpu_it_measures_nothing_and_exits_0(tmp_path):
    folder = tool_dir(tmp_path, ["bash", "dirname", "timeout", "grep"])
    # What nvidia-smi prints on a machine whose driver sees no GPU.
    (folder / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    (folder / "nvidia-smi").chmod(0o755)
    result = run_script(str(folder))
    assert (result.returncode, result.stdout) == (
        0, "gpu_check: no NVIDIA GPU here (nvidia-smi -L: No devices were found): nothing measured\n")


def recorded_facts():
    facts = topology.facts_from_capture(os.path.join(fixture_paths.FIXTURES, "machines", "h100_sxm_8gpu_nvswitch",
                                                     "capture.yml"))
    for index, gpu in enumerate(facts["gpus"]):
        gpu.update(vendor="nvidia", pci_bus_id="0000:%02x:00.0" % (0x18 + index), numa_node=index // 4)
    return facts


def test_the_sources_are_compared_gpu_by_gpu_and_node_by_node():
    facts = recorded_facts()
    smi = [(g["index"], g["pci_bus_id"]) for g in facts["gpus"]]
    gpu_nodes = dict((g["pci_bus_id"], g["numa_node"]) for g in facts["gpus"])
    nodes = dict((n["id"], n["cpus"]) for n in facts["numa_nodes"])
    sources = dict((s, copy.deepcopy(facts)) for s in gpu_check.SOURCES)
    lines, agree = gpu_check.compare_sources(sources, smi, gpu_nodes, nodes)
    assert agree and lines[-1] == "sysfs       agrees (8 GPUs, bus ids, NUMA nodes)"
    sources["nvidia-smi"]["gpus"][5]["numa_node"] = 0
    del sources["sysfs"]["numa_nodes"][1]
    lines, agree = gpu_check.compare_sources(sources, smi, gpu_nodes, nodes)
    assert not agree
    assert lines[2].startswith("nvml        agrees")
    assert "5=0000:1d:00.0@node0" in lines[3] and lines[3].startswith("nvidia-smi  GPUs ")
    assert lines[4] == "sysfs       NUMA nodes 0:%s" % nodes[0]
    assert gpu_check.bus_id("00000000:1A:00.0") == "0000:1a:00.0"


def test_bandwidth_arguments_are_checked():
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(["bandwidth", "--node", "0", "--reps", "0"])
    assert exit_.value.code == 2


def test_bandwidth_runs_on_the_engine_venvs_torch_and_says_there_is_no_cuda_device():
    check = subprocess.run([str(REPO / "scripts" / "engine-cache"), "--check"], capture_output=True, text=True,
                           check=False, timeout=60)
    assert check.returncode == 0, "run scripts/setup (scripts/engine-cache): " + check.stderr
    venv = dict(line.split("=", 1) for line in check.stdout.splitlines())["venv"]
    result = subprocess.run([venv + "/bin/python", str(REPO / "benchmarks" / "gpu_check.py"), "bandwidth", "--node",
                             "0", "--header"], env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 3, result.stderr
    assert result.stdout.split() == ["node", "gpu", "name", "H2D", "GB/s", "D2H", "GB/s"]
    assert "sees no CUDA device" in result.stderr
