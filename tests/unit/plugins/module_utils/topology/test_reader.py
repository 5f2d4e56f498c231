# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The reader seam: live reads, replay, recording, capture validation."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader, RecordingReader


def test_live_reader_read_missing_file_is_none(tmp_path):
    assert LiveReader(root=str(tmp_path)).read("/sys/nothing/here") is None


def test_live_reader_read_empty_file_is_empty_string(tmp_path):
    (tmp_path / "empty").write_text("")
    assert LiveReader(root=str(tmp_path)).read("/empty") == ""


def test_live_reader_listdir_and_readlink_on_root_prefix(tmp_path):
    (tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:01.0").mkdir(parents=True)
    (tmp_path / "sys" / "bus").mkdir()
    os.symlink("../devices/pci0000:00/0000:00:01.0", str(tmp_path / "sys" / "bus" / "dev"))
    reader = LiveReader(root=str(tmp_path))
    assert reader.listdir("/sys") == ["bus", "devices"]
    assert reader.listdir("/sys/missing") is None
    assert reader.readlink("/sys/bus/dev") == "../devices/pci0000:00/0000:00:01.0"
    assert reader.readlink("/sys/devices") is None
    assert reader.realpath("/sys/bus/dev") == "/sys/devices/pci0000:00/0000:00:01.0"


def test_live_reader_run_missing_binary_is_none():
    reader = LiveReader()
    assert reader.run("gpufleet-no-such-binary --version") is None
    assert reader.errors == []  # a missing tool is normal, not an error


def test_live_reader_run_failing_command_is_none_and_noted():
    reader = LiveReader()
    assert reader.run("false") is None
    assert reader.errors and reader.errors[0].startswith("false exited 1")


def test_live_reader_run_uses_c_locale():
    reader = LiveReader(binaries={"show-locale": sys.executable})
    out = reader.run("show-locale -c 'import os; print(os.environ[\"LC_ALL\"], os.environ[\"LANG\"])'")
    assert out == "C C\n"


def test_live_reader_run_with_binary_path_override():
    reader = LiveReader(binaries={"nvidia-smi": "/bin/echo"})
    # The command keeps its canonical name (the capture key) while the
    # configured binary runs.
    assert reader.run("nvidia-smi topo -m") == "topo -m\n"


def test_live_reader_run_runner_exception_is_none():
    def runner(argv):
        raise RuntimeError("boom")

    reader = LiveReader(runner=runner, which=lambda name: "/bin/" + name)
    assert reader.run("ls") is None
    assert "boom" in reader.errors[0]


def test_capture_reader_replays_files_links_commands_listings():
    capture = {
        "capture_version": 1,
        "files": {"/sys/devices/pci0000:00/0000:00:01.0/class": "0x030200\n", "/etc/x": ""},
        "symlinks": {"/sys/bus/pci/devices/0000:00:01.0": "../../../devices/pci0000:00/0000:00:01.0"},
        "commands": {"nvidia-smi topo -m": "matrix"},
    }
    reader = CaptureReader(capture)
    # Files are found under the name read and through symlinks.
    assert reader.read("/sys/bus/pci/devices/0000:00:01.0/class") == "0x030200\n"
    assert reader.read("/etc/x") == ""
    assert reader.read("/etc/y") is None
    assert reader.listdir("/sys/bus/pci/devices") == ["0000:00:01.0"]
    assert reader.listdir("/sys/bus/pci/devices/0000:00:01.0") == ["class"]
    assert reader.listdir("/nothing") is None
    assert reader.run("nvidia-smi topo -m") == "matrix"
    assert reader.run("nvidia-smi -q") is None
    assert reader.realpath("/sys/bus/pci/devices/0000:00:01.0") == "/sys/devices/pci0000:00/0000:00:01.0"


def test_capture_reader_symlink_loop_is_none():
    reader = CaptureReader({"capture_version": 1, "symlinks": {"/a": "b", "/b": "a"}})
    assert reader.realpath("/a") is None


def test_recording_reader_replays_to_same_sysfs_facts_on_this_machine():
    recorder = RecordingReader(LiveReader(), hostname="here")
    live = sysfs.collect(recorder)
    capture = json.loads(json.dumps(recorder.capture))  # what a module result carries
    assert load_capture(capture) is capture
    assert sysfs.collect(CaptureReader(capture)) == live
    assert capture["files"]["/sys/devices/system/cpu/online"]


def test_recording_reader_records_commands_only_when_answered():
    recorder = RecordingReader(LiveReader(binaries={"nvidia-smi": "/bin/echo"}))
    recorder.run("nvidia-smi topo -m")
    recorder.run("gpufleet-no-such-binary")
    assert recorder.capture["commands"] == {"nvidia-smi topo -m": "topo -m\n"}


@pytest.mark.parametrize("text, problem", [
    ("", "is empty"),
    ("[1, 2]\n", "must be a mapping"),
    ("capture_version: 2\n", "capture_version 2"),
    ("hostname: a\n", "has no capture_version"),
    ("capture_version: 1\nfilez: {}\n", "unknown keys filez"),
    ("capture_version: 1\nfiles: [a]\n", "files must be a mapping"),
    ("capture_version: 1\ndirectories: {/sys: x}\n", "must be a list of names"),
    ("capture_version: 1\nnvml: 3\n", "nvml must be a mapping"),
    ("capture_version: 1\nfiles: {a: [1]}\n", "must map a string to text"),
    ("capture_version: 1\n  bad: [\n", "not valid YAML"),
])
def test_load_capture_rejects_bad_file_naming_it(tmp_path, text, problem):
    path = tmp_path / "gpu-a.yml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_capture(str(path))
    assert str(path) in str(err.value)
    assert problem in str(err.value)


def test_load_capture_unreadable_file_names_it(tmp_path):
    with pytest.raises(ValueError, match="gone.yml cannot be read"):
        load_capture(str(tmp_path / "gone.yml"))
    with pytest.raises(ValueError, match="cannot be read"):
        load_capture(str(tmp_path))  # a directory


def test_load_capture_accepts_json_text_and_dict():
    assert load_capture('{"capture_version": 1, "hostname": "a"}')["hostname"] == "a"
    assert load_capture({"capture_version": 1}) == {"capture_version": 1}


def hanging_binary(tmp_path):
    """A stand-in nvidia-smi that never answers: the shell waits on a
    child, so only killing the whole process group ends it."""
    binary = tmp_path / "nvidia-smi-hangs"
    binary.write_text("#!/bin/sh\nsleep 3600\n")
    binary.chmod(0o755)
    return str(binary)


def test_live_reader_run_kills_command_after_timeout_and_notes_it(tmp_path):
    reader = LiveReader(binaries={"nvidia-smi": hanging_binary(tmp_path)}, timeout=1)
    assert reader.run("nvidia-smi topo -m") is None
    assert reader.errors == ["nvidia-smi topo -m: no answer within 1 s (nvidia_smi_timeout); killed"]
    # Once it hung, the binary is not started again in this run.
    assert reader.run("nvidia-smi --query-gpu=index --format=csv") is None
    assert reader.errors[1].endswith("not run, %s did not answer before" % hanging_binary(tmp_path))


def test_gather_live_hung_nvidia_smi_warns_and_sysfs_still_answers(tmp_path):
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology import gather as topology

    from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import SysfsBuilder, write_tree

    b = SysfsBuilder().node(0, "0-3", memory_kb=1 << 20).online("0-3")
    b.device("0000:01:00.0", ["pci0000:00", "0000:00:01.0"], "0x030200", "0x10de", numa_node="0", local_cpus="0-3")
    write_tree(b.capture(), tmp_path / "root")
    facts = topology.gather_live(root=str(tmp_path / "root"), nvidia_smi_binary=hanging_binary(tmp_path),
                                 use_nvml=False, timeout=1)[0]
    assert [(g["id"], g["numa_node"]) for g in facts["gpus"]] == [("0000:01:00.0", 0)]
    assert facts["sources"] == ["sysfs"]
    assert any(w.startswith("nvidia-smi --query-gpu") and "no answer within 1 s" in w for w in facts["warnings"])
