# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""gpu_processes: the process list (nvidia-smi, NVML), the /proc parsers on
files recorded from real numactl-bound processes, and the filter that keeps
secrets out of results and captures (checked on a live process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import processes as gp
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader, RecordingReader

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes, pid_of, recorded_processes


def files_of(name):
    return recorded_processes()[name]["files"]


def test_parse_compute_apps_normalises_bus_ids():
    entries, warnings = gp.parse_compute_apps("4242, 00000000:9A:00.0\n4243, 00000000:1B:00.0\n")
    assert entries == [{"pid": 4242, "pci_bus_id": "0000:9a:00.0"}, {"pid": 4243, "pci_bus_id": "0000:1b:00.0"}]
    assert warnings == []


def test_parse_compute_apps_no_processes_and_empty():
    assert gp.parse_compute_apps("No running processes found\n") == ([], [])
    assert gp.parse_compute_apps("") == ([], [])


def test_parse_compute_apps_bad_lines_warn_not_raise():
    entries, warnings = gp.parse_compute_apps("4242\nabc, 00000000:9A:00.0\n7, [N/A]\n8, 00000000:9A:00.0\n")
    assert entries == [{"pid": 8, "pci_bus_id": "0000:9a:00.0"}]
    assert len(warnings) == 3 and "line 1" in warnings[0]


def test_parse_status_recorded_bound_process():
    status = gp.parse_status(files_of("bound_cpu0_mem0")["/proc/%d/status" % pid_of("bound_cpu0_mem0")])
    assert status == {"name": "python3", "cpus_allowed": "0", "mems_allowed": "0"}


def test_parse_status_empty_file():
    assert gp.parse_status("") == {"name": None, "cpus_allowed": None, "mems_allowed": None}


def test_parse_stat_recorded_worker_shares_the_servers_session():
    server, worker = pid_of("tp_server"), pid_of("tp_server_worker")
    stat = gp.parse_stat(files_of("tp_server_worker")["/proc/%d/stat" % worker])
    assert stat == {"ppid": server, "session": server}


def test_parse_stat_command_name_with_parentheses_and_spaces():
    assert gp.parse_stat("77 (a) b (c) S 5 77 70 0 -1") == {"ppid": 5, "session": 70}
    assert gp.parse_stat("garbage") == {"ppid": None, "session": None}


@pytest.mark.parametrize("name, policy", [
    ("bound_cpu0_mem0", "bind:0"),
    ("bound_node0", "bind:0"),
    ("unbound", "default"),
    ("interleave_all", "interleave:0"),
])
def test_parse_numa_maps_recorded_policies(name, policy):
    maps = gp.parse_numa_maps(files_of(name)["/proc/%d/numa_maps" % pid_of(name)])
    assert gp.dominant_policy(maps["policies"]) == policy
    # 32 MiB were touched; everything is on the recording machine's node 0
    assert list(maps["memory_kb"]) == ["0"] and maps["memory_kb"]["0"] > 32 * 1024


def test_parse_numa_maps_huge_pages_and_several_nodes():
    text = ("7f0000000000 interleave:0-1 anon=4 dirty=4 N0=2 N1=2 kernelpagesize_kB=2048\n"
            "7f1000000000 prefer:1 heap anon=10 N1=10 kernelpagesize_kB=4\n"
            "7f2000000000 default file=/usr/lib/libc.so.6\n")
    maps = gp.parse_numa_maps(text)
    assert maps["memory_kb"] == {"0": 4096, "1": 4096 + 40}
    assert maps["policies"] == {"interleave:0-1": 8192, "prefer:1": 40}
    assert gp.policy_nodes("interleave:0-1") == [0, 1] and gp.policy_nodes("default") is None


def test_redact_cmdline_masks_secret_values():
    argv = "vllm\0serve\0m\0--api-key\0sk-123\0--hf-token=hf_abc\0--port\08000\0"
    assert gp.parse_cmdline(argv) == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***", "--port", "8000"]


def test_filter_environ_keeps_only_device_variables():
    text = "PATH=/bin\0VLLM_API_KEY=sk-1\0CUDA_VISIBLE_DEVICES=4,5\0CUDA_DEVICE_ORDER=PCI_BUS_ID\0"
    assert gp.filter_environ(text) == "CUDA_VISIBLE_DEVICES=4,5\0CUDA_DEVICE_ORDER=PCI_BUS_ID\0"
    assert gp.parse_environ(text) == {"CUDA_VISIBLE_DEVICES": "4,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_recording_a_live_process_keeps_its_secrets_out_of_the_capture():
    env = dict(os.environ, VLLM_API_KEY="sk-live-secret", CUDA_VISIBLE_DEVICES="3")
    proc = subprocess.Popen(["numactl", "--physcpubind=0", "--membind=0", sys.executable, "-c",
                             "import time; time.sleep(30)", "--api-key", "sk-live-secret"], env=env)
    try:
        path = "/proc/%d/cmdline" % proc.pid
        deadline = time.time() + 10
        # numactl's own command line holds the same words: wait until it has exec'd Python
        while open(path).read().split("\0")[0] != sys.executable and time.time() < deadline:
            time.sleep(0.02)
        recorder = RecordingReader(gp.ProcFilter(LiveReader()))
        record = gp.read_process(recorder, proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert record["cpus_allowed"] == "0" and record["memory_policy"] == "bind:0"
    assert record["environment"] == {"CUDA_VISIBLE_DEVICES": "3"}
    assert "sk-live-secret" not in repr(record)
    assert "sk-live-secret" not in repr(recorder.capture)
    assert recorder.capture["files"]["/proc/%d/environ" % proc.pid] == "CUDA_VISIBLE_DEVICES=3\0"


def test_read_processes_trap_capture_groups_by_pid():
    reader = CaptureReader(capture_with_processes(DGX2, TRAP_HOLDS))
    result = gp.read_processes(reader)
    assert result["source"] == "nvidia-smi" and result["warnings"] == []
    by_pid = dict((p["pid"], p) for p in result["processes"])
    worker = by_pid[pid_of("tp_server_worker")]
    assert worker["gpus"] == ["0000:bc:00.0", "0000:be:00.0"]
    assert worker["session"] == pid_of("tp_server")
    assert by_pid[pid_of("unbound")]["environment"] == {"CUDA_VISIBLE_DEVICES": "9"}


def test_read_processes_unreadable_pid_is_a_warning():
    capture = {"capture_version": 1, "commands": {gp.COMPUTE_APPS_COMMAND: "99999, 00000000:1A:00.0\n"}}
    result = gp.read_processes(CaptureReader(capture))
    assert result["processes"][0]["readable"] is False
    assert result["processes"][0]["memory_kb"] is None
    assert "pid 99999" in result["warnings"][0] and "become" in result["warnings"][0]


def test_read_processes_without_any_source_is_unknown_not_empty():
    result = gp.read_processes(CaptureReader({"capture_version": 1}))
    assert result == {"source": None, "processes": [], "warnings": []}


def test_read_processes_nvml_record_wins_over_nvidia_smi():
    capture = {"capture_version": 1,
               "nvml": {"compute_processes": [{"pid": 5, "bus_id": "00000000:1A:00.0", "used_memory": 1}]},
               "commands": {gp.COMPUTE_APPS_COMMAND: "6, 00000000:1B:00.0\n"}}
    result = gp.read_processes(CaptureReader(capture))
    assert result["source"] == "nvml"
    assert [p["pid"] for p in result["processes"]] == [5]


class _Proc(object):
    def __init__(self, pid, used):
        self.pid = pid
        self.usedGpuMemory = used


class _PciInfo(object):
    busId = b"00000000:1A:00.0"


class FakeNvml(object):
    """The few pynvml calls collect_nvml_processes makes (no NVML here)."""

    def __init__(self, fail=None):
        self.fail = fail

    def nvmlInit(self):
        if self.fail == "init":
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetPciInfo(self, handle):
        return _PciInfo()

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        if self.fail == "procs":
            raise RuntimeError("Not Supported")
        return [_Proc(4242, 1024)]


def test_collect_nvml_processes_reads_bus_ids_and_pids():
    assert gp.collect_nvml_processes(FakeNvml()) == [{"pid": 4242, "bus_id": "00000000:1A:00.0", "used_memory": 1024}]


@pytest.mark.parametrize("fail", ["init", "procs"])
def test_collect_nvml_processes_failure_is_none_so_nvidia_smi_is_asked(fail):
    assert gp.collect_nvml_processes(FakeNvml(fail)) is None
