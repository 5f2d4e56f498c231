# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of live: LiveReader on a real tree below a root, commands with the C locale and a timeout."""

from __future__ import annotations

import os
import sys

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.tests.fixtures.two_gpu_host import hanging_binary


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


def test_live_reader_run_kills_command_after_timeout_and_notes_it(tmp_path):
    reader = LiveReader(binaries={"nvidia-smi": hanging_binary(tmp_path)}, timeout=1)
    assert reader.run("nvidia-smi topo -m") is None
    assert reader.errors == ["nvidia-smi topo -m: no answer within 1 s (nvidia_smi_timeout); killed"]
    # Once it hung, the binary is not started again in this run.
    assert reader.run("nvidia-smi --query-gpu=index --format=csv") is None
    assert reader.errors[1].endswith("not run, %s did not answer before" % hanging_binary(tmp_path))
