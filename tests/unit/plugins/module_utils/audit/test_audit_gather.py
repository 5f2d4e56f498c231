# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/gather.py on its own: gather_live() over a real tree below a root
(sysfs and /proc), nvidia-smi answered by a runner or absent.

The live/replay round trip: the capture gather_live(record=True) returns,
replayed by replay.gather_capture() (from its YAML text, as a file holds
it), gives the same facts and processes. The recorded machines laid out
as trees give the facts facts_from_capture() reads from their captures.
ProcFilter sits between the tree and the capture: no secret of a
process's argv, environment, status or stat reaches either."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import gather as audit_gather
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import processes as gpu_processes
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.common.secret_mask import MASK
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvidia_smi, nvidia_smi_topo
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture, load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES
from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import write_tree
from ansible_collections.gpufleet.numa.tests.fixtures.two_gpu_host import QUERY_TEXT, TOPO_TEXT, two_gpu_host

SECRET = "sk-VqXzJkWQvxzjKQ"
ENV_SECRET = "hf_ZJqXwVkzQjxKVwz"
# pid -> (argv words, status Name, GPU bus id as nvidia-smi prints it)
PROCESSES = {
    4242: (["vllm", "serve", "m", "--api-key", SECRET, "--port", "8000"], "vllm", "00000000:01:00.0"),
    4343: (["python", "-m", "worker", "--hf-token=" + SECRET], "HF_TOKEN=" + SECRET[:6], "00000000:81:00.0"),
}


def proc_tree(root, processes=None):
    processes = PROCESSES if processes is None else processes
    for pid, (argv, name, dummy_bus) in processes.items():
        proc = os.path.join(str(root), "proc", str(pid))
        os.makedirs(proc)
        files = {
            "status": "Name:\t%s\nState:\tS (sleeping)\nCpus_allowed_list:\t0-1,4-5\nMems_allowed_list:\t0\n" % name,
            "stat": "%d (%s) S 1 %d %d 0 -1" % (pid, name[:15], pid, pid),
            "cmdline": "".join(word + "\0" for word in argv),
            "environ": "PATH=/bin\0HF_TOKEN=%s\0CUDA_VISIBLE_DEVICES=0\0" % ENV_SECRET,
            "numa_maps": "7f0000000000 bind:0 anon=10 dirty=10 N0=10 kernelpagesize_kB=4\n",
        }
        for file_name, text in files.items():
            with open(os.path.join(proc, file_name), "w") as handle:
                handle.write(text)


def command_runner(commands):
    """runner(argv) answering nvidia-smi's recorded commands, rc 1 otherwise
    (a real nvidia-smi refuses what it does not know)."""
    def runner(argv):
        command = " ".join(["nvidia-smi"] + list(argv[1:]))
        if command in commands:
            return 0, commands[command], ""
        return 1, "", "unknown command"
    return runner


def which_nvidia_smi(name):
    return "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None


TWO_GPU_COMMANDS = {
    nvidia_smi.QUERY_COMMAND: QUERY_TEXT,
    nvidia_smi_topo.TOPO_COMMAND: TOPO_TEXT,
    gpu_processes.COMPUTE_APPS_COMMAND: "".join("%d, %s\n" % (pid, p[2]) for pid, p in sorted(PROCESSES.items())),
}


@pytest.fixture
def two_gpu_root(tmp_path):
    root = tmp_path / "root"
    write_tree(two_gpu_host().capture(), root)
    proc_tree(root)
    return str(root)


def replayed(capture):
    """gather_capture() of the capture as a file holds it (YAML text)."""
    return audit_replay.gather_capture(yaml.safe_dump(capture))


def assert_same_as_live(live_facts, live_processes, capture):
    facts, processes = replayed(capture)
    # A replay says where its facts came from; nothing else differs.
    assert facts.pop("sources") == live_facts["sources"] + ["capture"]
    assert facts == dict((k, v) for k, v in live_facts.items() if k != "sources")
    assert processes == live_processes


# ---------------------------------------------------------------- live / replay round trip


def test_gather_live_reads_the_tree_and_its_gpu_processes(two_gpu_root):
    facts, processes, capture = audit_gather.gather_live(
        root=two_gpu_root, runner=command_runner(TWO_GPU_COMMANDS), which=which_nvidia_smi, use_nvml=False,
        hostname="gpu-a")
    assert capture is None
    assert facts["hostname"] == "gpu-a" and facts["warnings"] == []
    assert [(g["pci_bus_id"], g["numa_node"], g["local_cpus"]) for g in facts["gpus"]] == [
        ("0000:01:00.0", 0, "0-1,4-5"), ("0000:81:00.0", 1, "2-3,6-7")]
    assert facts["links"]["0000:01:00.0"]["0000:81:00.0"] == "NV4"
    assert processes["source"] == "nvidia-smi" and processes["warnings"] == []
    by_pid = dict((p["pid"], p) for p in processes["processes"])
    assert sorted(by_pid) == [4242, 4343]
    assert by_pid[4242]["gpus"] == ["0000:01:00.0"] and by_pid[4343]["gpus"] == ["0000:81:00.0"]
    assert by_pid[4242]["memory_policy"] == "bind:0" and by_pid[4242]["memory_kb"] == {"0": 40}
    assert by_pid[4242]["cpus_allowed"] == "0-1,4-5" and by_pid[4242]["mems_allowed"] == "0"


def test_gather_live_record_replays_as_the_same_facts_and_processes(two_gpu_root):
    facts, processes, capture = audit_gather.gather_live(
        root=two_gpu_root, runner=command_runner(TWO_GPU_COMMANDS), which=which_nvidia_smi, use_nvml=False,
        record=True, hostname="gpu-a")
    assert capture["hostname"] == "gpu-a"
    assert capture["commands"][gpu_processes.COMPUTE_APPS_COMMAND] == TWO_GPU_COMMANDS[gpu_processes.COMPUTE_APPS_COMMAND]
    assert "/proc/4242/numa_maps" in capture["files"]
    assert_same_as_live(facts, processes, capture)


def test_gather_live_without_nvidia_smi_replays_as_unknown_processes(two_gpu_root):
    facts, processes, capture = audit_gather.gather_live(root=two_gpu_root, which=lambda name: None, use_nvml=False,
                                                         record=True, hostname="gpu-a")
    # No tool says who holds a GPU: unknown, which is not "no processes".
    assert processes == {"source": None, "processes": [], "warnings": []}
    assert capture["commands"] == {}
    assert [g["pci_bus_id"] for g in facts["gpus"]] == ["0000:01:00.0", "0000:81:00.0"]
    assert_same_as_live(facts, processes, capture)


# ---------------------------------------------------------------- recorded machines as trees


def _lay_out(capture, root):
    """A recorded capture as a tree: symlinks first (targets made), then the
    files through them, then the listed names without content as empty
    directories (net/ and infiniband/ entries). Under the CPU and node
    folders such names are attribute files the capture did not keep; they
    are left out rather than made directories."""
    for path, link in sorted((capture.get("symlinks") or {}).items()):
        where = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(where), exist_ok=True)
        os.makedirs(os.path.normpath(os.path.join(os.path.dirname(where), link)), exist_ok=True)
        os.symlink(link, where)
    for path, content in capture["files"].items():
        where = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(where, "w") as handle:
            handle.write(str(content))
    for path, names in (capture.get("directories") or {}).items():
        if path in ("/sys/devices/system/cpu", "/sys/devices/system/node"):
            continue
        for name in names or []:
            where = os.path.join(root, path.lstrip("/"), name)
            if not os.path.lexists(where):
                os.makedirs(where)


def _sysfs_machines():
    """Recorded machines with sysfs and no NVML record (gather_live reads
    NVML only through a pynvml binding, which no test here stands in for)."""
    out = []
    for path in sorted(glob.glob(os.path.join(MACHINES, "*", "capture.yml"))):
        data = load_capture(path)
        if data.get("files") and not data.get("nvml"):
            out.append(pytest.param(path, id=os.path.basename(os.path.dirname(path))))
    return out


SYSFS_MACHINES = _sysfs_machines()


def test_some_recorded_machines_have_sysfs():
    assert len(SYSFS_MACHINES) >= 6


@pytest.mark.parametrize("path", SYSFS_MACHINES)
def test_gather_live_on_a_recorded_machine_gives_its_recorded_facts(tmp_path, path):
    data = load_capture(path)
    root = str(tmp_path / "root")
    _lay_out(data, root)
    commands = dict((c, t) for c, t in (data.get("commands") or {}).items() if c.startswith("nvidia-smi "))
    # Where the recording ran nvidia-smi (and shows a GPU), it also says a vLLM process
    # holds the first GPU; elsewhere there is no nvidia-smi: who holds a GPU is unknown.
    expected = facts_from_capture(data)
    gpu = expected["gpus"][0]["pci_bus_id"] if expected["gpus"] else "0000:00:01.0"
    proc_tree(root, {4242: (["vllm", "serve", "m", "--api-key", SECRET], "vllm", gpu)})
    if commands:
        commands[gpu_processes.COMPUTE_APPS_COMMAND] = "4242, %s\n" % gpu
    facts, processes, capture = audit_gather.gather_live(
        root=root, runner=command_runner(commands), which=which_nvidia_smi if commands else (lambda name: None),
        use_nvml=False, record=True, hostname=data["hostname"])
    assert facts["sources"] + ["capture"] == expected["sources"]
    assert dict(facts, sources=None) == dict(expected, sources=None)
    if commands:
        assert [(p["pid"], p["gpus"]) for p in processes["processes"]] == [(4242, [gpu])]
    else:
        assert processes == {"source": None, "processes": [], "warnings": []}
    assert_same_as_live(facts, processes, capture)
    assert SECRET[:6] not in yaml.safe_dump(capture) and SECRET[:6] not in repr(processes)


# ---------------------------------------------------------------- ProcFilter on the tree's /proc


@pytest.mark.parametrize("argv, shown", [
    (["vllm", "serve", "m", "--api-key", SECRET, "--port", "8000"], ["vllm", "serve", "m", "--api-key", MASK, "--port", "8000"]),
    (["vllm", "serve", "m", "--hf-token=" + SECRET], ["vllm", "serve", "m", "--hf-token=" + MASK]),
    (["env", "HF_TOKEN=" + SECRET, "vllm"], ["env", "HF_TOKEN=" + MASK, "vllm"]),
    (["git", "clone", "https://user:%s@example.org/repo" % SECRET], None),
    (["curl", "-H", "Authorization: Bearer " + SECRET, "http://127.0.0.1/"], None),
], ids=["api_key", "hf_token_equals", "env_pair", "url_userinfo", "bearer_header"])
def test_proc_filter_masks_argv_secrets_read_from_the_tree(tmp_path, argv, shown):
    proc_tree(tmp_path, {7: (argv, "vllm", "00000000:01:00.0")})
    reader = gpu_processes.ProcFilter(LiveReader(root=str(tmp_path)))
    cmdline = reader.read("/proc/7/cmdline")
    assert SECRET[:6] not in cmdline and MASK in cmdline
    if shown is not None:
        assert cmdline.split("\0")[:-1] == shown
    # What is not /proc/PID/ passes unchanged.
    assert LiveReader(root=str(tmp_path)).read("/proc/7/cmdline") == "".join(w + "\0" for w in argv)


def test_proc_filter_keeps_only_device_variables_of_the_environment(tmp_path):
    proc_tree(tmp_path, {7: (["vllm"], "vllm", "00000000:01:00.0")})
    reader = gpu_processes.ProcFilter(LiveReader(root=str(tmp_path)))
    assert reader.read("/proc/7/environ") == "CUDA_VISIBLE_DEVICES=0\0"
    assert ENV_SECRET in LiveReader(root=str(tmp_path)).read("/proc/7/environ")


def test_proc_filter_masks_a_secret_process_name_in_status_and_stat(tmp_path):
    proc_tree(tmp_path, {7: (["x"], "HF_TOKEN=" + SECRET[:6], "00000000:01:00.0")})
    reader = gpu_processes.ProcFilter(LiveReader(root=str(tmp_path)))
    assert reader.read("/proc/7/status").startswith("Name:\tHF_TOKEN=%s\n" % MASK)
    assert reader.read("/proc/7/stat") == "7 (HF_TOKEN=%s) S 1 7 7 0 -1" % MASK


def test_gather_live_result_and_capture_hold_no_secret(two_gpu_root):
    facts, processes, capture = audit_gather.gather_live(
        root=two_gpu_root, runner=command_runner(TWO_GPU_COMMANDS), which=which_nvidia_smi, use_nvml=False,
        record=True, hostname="gpu-a")
    shown = repr((facts, processes)) + yaml.safe_dump(capture)
    for value in (SECRET, ENV_SECRET):
        assert not [value[i:i + 6] for i in range(len(value) - 5) if value[i:i + 6] in shown]
    by_pid = dict((p["pid"], p) for p in processes["processes"])
    assert by_pid[4242]["argv"] == ["vllm", "serve", "m", "--api-key", MASK, "--port", "8000"]
    assert by_pid[4343]["name"] == "HF_TOKEN=" + MASK
    assert by_pid[4242]["environment"] == {"CUDA_VISIBLE_DEVICES": "0"}
    assert capture["files"]["/proc/4242/environ"] == "CUDA_VISIBLE_DEVICES=0\0"
