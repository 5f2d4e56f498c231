# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The preflight on this machine for real (read_live): what it reads, and
that its capture replays (replay) to the same readings; a capture that is
not one is refused by name."""

from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import gather, replay

NUMACTL = shutil.which("numactl")
UNIT = {"name": "vllm-0", "device": "cpu", "gpus": [], "mems": "0", "cpus": "0", "policy": "bind",
        "prefix": [NUMACTL or "/usr/bin/numactl", "--cpunodebind=0", "--membind=0"],
        "properties": [["ProtectSystem", "strict"]], "user": "nobody-gpufleet", "group": ""}


def test_read_live_this_machine_and_replay_its_capture():
    readings, facts, capture = gather.read_live([UNIT], record=True)
    assert facts["numa_nodes"][0]["id"] == 0
    if NUMACTL:
        assert readings["numactl"].startswith("policy:")
    if os.path.exists("/proc/sys/kernel/numa_balancing"):
        assert readings["numa_balancing"] in ("0", "1", "2")
    assert readings["nvswitches"] == []
    assert [p["instance"] for p in readings["probes"]] == ["vllm-0"]
    if not os.path.isdir("/run/systemd/system"):
        assert readings["systemd"] is False and readings["probes"][0]["skipped"].startswith("systemd is not PID 1")
    # getent found no such account (no warning for it), the probe runs without User=
    assert "User=" not in readings["probes"][0]["command"]
    assert not [w for w in readings["warnings"] if w.startswith("getent")]
    replayed, replayed_facts = replay.replay(capture, [UNIT])
    if readings["systemd"] is False:
        # /run/systemd/system does not exist: nothing to record, so the replay cannot tell
        assert replayed["systemd"] is False or replayed["probes"][0]["output"] is None
    for key in ("numactl", "numa_balancing", "cpuset", "persistence", "nvswitches"):
        assert replayed[key] == readings[key], key
    assert replayed_facts["numa_nodes"] == facts["numa_nodes"]


def test_replay_refuses_what_is_no_capture():
    with pytest.raises(ValueError, match="capture_version"):
        replay.replay({"files": {}}, [])


def test_probe_python_is_the_system_python_where_there_is_one():
    expected = gather.SYSTEM_PYTHON if os.access(gather.SYSTEM_PYTHON, os.X_OK) else None
    assert gather.probe_python() == (expected or __import__("sys").executable)
