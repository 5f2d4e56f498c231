# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of capture: loading and checking a recorded capture, and its facts."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture, load_capture
from ansible_collections.gpufleet.numa.tests.fixtures.two_gpu_host import two_gpu_host


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


def test_facts_from_capture_hostname_override_and_errors(tmp_path):
    capture = two_gpu_host().capture(hostname="recorded")
    assert facts_from_capture(capture)["hostname"] == "recorded"
    assert facts_from_capture(capture, hostname="inventory-name")["hostname"] == "inventory-name"
    bad = tmp_path / "bad.yml"
    bad.write_text("capture_version: 7\n")
    with pytest.raises(ValueError, match="bad.yml has capture_version 7"):
        facts_from_capture(str(bad))
