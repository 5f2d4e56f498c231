# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The sysfs layouts hwloc reads and numa_facts once did not: one recorded
tree per layout (tests/fixtures/sysfs_layouts/<name>/capture.yml),
the facts it must give (expected.yml) and the warning that names the odd
layout."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader, RecordingReader
from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import files_reader as _reader

LAYOUTS = os.path.join(fixture_paths.FIXTURES, "sysfs_layouts")
LAYOUT_DIRS = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(LAYOUTS, "*", "capture.yml")))


def _expected(folder):
    with open(os.path.join(folder, "expected.yml")) as handle:
        return yaml.safe_load(handle)


def _check_by_id(got, want, what):
    by_id = dict((item["id"], item) for item in got)
    assert sorted(by_id) == sorted(want), "%s ids" % what
    for item_id, fields in want.items():
        for key, value in fields.items():
            assert by_id[item_id][key] == value, "%s %s %s" % (what, item_id, key)


@pytest.mark.parametrize("folder", LAYOUT_DIRS, ids=os.path.basename)
def test_sysfs_layout_fixture_gives_expected_facts(folder):
    expected = _expected(folder)
    facts = facts_from_capture(os.path.join(folder, "capture.yml"))
    for section in ("numa_nodes", "sockets", "nics"):
        if section in expected:
            _check_by_id(facts[section], expected[section], section)
    if "smt_siblings" in expected:
        assert facts["smt_siblings"] == expected["smt_siblings"]
    if "offline_cpus" in expected:
        raw = sysfs.collect(CaptureReader(load_capture(os.path.join(folder, "capture.yml"))))
        assert raw["offline_cpus"] == expected["offline_cpus"]
    for part in expected.get("warnings_contain") or []:
        assert any(part in line for line in facts["warnings"]), (part, facts["warnings"])


def test_layout_fixtures_exist():
    assert len(LAYOUT_DIRS) >= 8


def test_recorded_mountinfo_keeps_cgroup_lines_only():
    text = ("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
            "35 22 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    recorder = RecordingReader(_reader({"/proc/self/mountinfo": text}))
    recorder.read("/proc/self/mountinfo")
    assert recorder.capture["files"]["/proc/self/mountinfo"] == "35 22 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
