# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of gather: every source read through the seam, on a capture and on a live tree."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.gather import gather, gather_live
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi import QUERY_COMMAND
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi_topo import TOPO_COMMAND
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader
from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import SysfsBuilder, write_tree
from ansible_collections.gpufleet.numa.tests.fixtures.two_gpu_host import QUERY_TEXT, TOPO_TEXT, hanging_binary, two_gpu_host

FACT_KEYS = {"schema_version", "hostname", "sources", "sockets", "numa_nodes", "smt_siblings",
             "gpus", "nics", "links", "warnings"}
NVIDIA = "0x10de"


def test_gather_live_hung_nvidia_smi_warns_and_sysfs_still_answers(tmp_path):
    from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import SysfsBuilder, write_tree

    b = SysfsBuilder().node(0, "0-3", memory_kb=1 << 20).online("0-3")
    b.device("0000:01:00.0", ["pci0000:00", "0000:00:01.0"], "0x030200", "0x10de", numa_node="0", local_cpus="0-3")
    write_tree(b.capture(), tmp_path / "root")
    facts = gather_live(root=str(tmp_path / "root"), nvidia_smi_binary=hanging_binary(tmp_path),
                        use_nvml=False, timeout=1)[0]
    assert [(g["id"], g["numa_node"]) for g in facts["gpus"]] == [("0000:01:00.0", 0)]
    assert facts["sources"] == ["sysfs"]
    assert any(w.startswith("nvidia-smi --query-gpu") and "no answer within 1 s" in w for w in facts["warnings"])


def test_gather_skips_nvidia_smi_when_sysfs_shows_no_nvidia_gpu():
    b = SysfsBuilder().node(0, "0-3").online("0-3")
    b.device("0000:c1:00.0", ["pci0000:c0", "0000:c0:01.1"], "0x120000", "0x1002", device="0x74a1")
    capture = b.capture(commands={TOPO_COMMAND: TOPO_TEXT})
    facts, raw = gather(CaptureReader(capture))
    assert raw is None
    assert [g["vendor"] for g in facts["gpus"]] == ["amd"]
    assert facts["gpus"][0]["index"] is None
    assert "nvidia-smi" not in facts["sources"]


def test_gather_live_this_machine_and_record_roundtrip():
    facts, capture = gather_live(record=True, hostname="ci")
    assert set(facts) == FACT_KEYS
    assert facts["sources"][0] == "sysfs"
    replayed = facts_from_capture(capture)
    assert replayed["numa_nodes"] == facts["numa_nodes"]
    assert replayed["gpus"] == facts["gpus"]
    assert replayed["nics"] == facts["nics"]
    assert replayed["sources"] == facts["sources"] + ["capture"]


def test_gather_live_root_prefix_reads_copied_tree(tmp_path):
    write_tree(two_gpu_host().capture(), tmp_path)
    facts = gather(LiveReader(root=str(tmp_path), which=lambda name: None), hostname="copy")[0]
    assert [g["id"] for g in facts["gpus"]] == ["0000:01:00.0", "0000:81:00.0"]
    assert facts["links"]["0000:01:00.0"]["0000:81:00.0"] == "SYS"


def test_gather_live_runs_configured_nvidia_smi_and_records_canonical_commands(tmp_path):
    # No NVIDIA driver here: a stand-in binary prints recorded output, so the
    # live command path (binary override, C locale runner, recording) runs.
    tree = tmp_path / "root"
    write_tree(two_gpu_host().capture(), tree)
    (tmp_path / "topo.txt").write_text(TOPO_TEXT)
    (tmp_path / "query.txt").write_text(QUERY_TEXT)
    binary = tmp_path / "nvidia-smi-recorded"
    binary.write_text('#!/bin/sh\ncase "$1" in\n  topo) cat %s/topo.txt ;;\n  --query-gpu=*) cat %s/query.txt ;;\n'
                      '  *) exit 9 ;;\nesac\n' % (tmp_path, tmp_path))
    binary.chmod(0o755)
    facts, recorded = gather_live(root=str(tree), nvidia_smi_binary=str(binary), record=True,
                                  hostname="gpu-b")
    assert facts["sources"] == ["sysfs", "nvidia-smi"]
    assert facts["gpus"][0]["name"] == "NVIDIA RTX A6000"
    assert facts["links"]["0000:01:00.0"]["0000:81:00.0"] == "NV4"
    assert recorded["commands"] == {TOPO_COMMAND: TOPO_TEXT, QUERY_COMMAND: QUERY_TEXT}
    replayed = facts_from_capture(recorded)
    assert replayed["gpus"] == facts["gpus"] and replayed["links"] == facts["links"]


# ---------------------------------------------------------------- memory-only NUMA nodes (Grace Hopper, CXL)


def test_record_keeps_only_the_cpu_lines_of_proc_self_status(tmp_path):
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import RecordingReader

    tree = tmp_path / "root"
    write_tree(two_gpu_host().capture(), tree)
    (tree / "proc" / "self").mkdir(parents=True)
    (tree / "proc" / "self" / "status").write_text(
        "Name:\tansible\nUid:\t1000\t1000\t1000\t1000\nGroups:\t27 1000\nCpus_allowed:\t0f\n"
        "Cpus_allowed_list:\t0-3\nMems_allowed_list:\t0-1\n")
    recorder = RecordingReader(LiveReader(root=str(tree), which=lambda name: None))
    facts = gather(recorder)[0]
    assert recorder.capture["files"]["/proc/self/status"] == "Cpus_allowed:\t0f\nCpus_allowed_list:\t0-3\n"
    assert [n["usable_cpus"] for n in facts["numa_nodes"]] == ["0-1", "2-3"]
    assert [n["usable_cpus"] for n in facts_from_capture(recorder.capture)["numa_nodes"]] == ["0-1", "2-3"]


def test_gather_returns_the_facts_and_the_nvml_record_by_name():
    got = gather(CaptureReader(two_gpu_host().capture(commands={TOPO_COMMAND: TOPO_TEXT})))
    assert got.facts["links"]["0000:01:00.0"]["0000:81:00.0"] == "NV4"
    assert got.nvml is None
