# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The reader seam: live reads, replay, recording, capture validation."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader, RecordingReader


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
