# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of sysfs_common: list files, the node covering some CPUs."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_common
from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import files_reader as _reader


def test_node_for_cpus_needs_exactly_one_covering_node():
    nodes = [{"id": 0, "cpus": "0-3"}, {"id": 1, "cpus": "4-7"}, {"id": 2, "cpus": ""}]
    assert sysfs_common.node_for_cpus([1, 2], nodes) == 0
    assert sysfs_common.node_for_cpus([3, 4], nodes) is None
    assert sysfs_common.node_for_cpus([], nodes) is None


def test_list_file_with_nul_inside_is_still_refused():
    files = {"/sys/devices/system/node/node0/cpulist": "0-1\0,7\n"}
    warnings = []
    assert sysfs.numa_nodes(_reader(files), warnings)[0]["cpus"] is None
    assert any("node0/cpulist" in w for w in warnings) and sysfs_common.NUL_LISTS not in warnings


def test_bitmap_fallback_bad_mask_warns_naming_file():
    files = {"/sys/devices/system/node/node0/cpumap": "zz,00000003\n"}
    warnings = []
    assert sysfs.numa_nodes(_reader(files), warnings)[0]["cpus"] is None
    assert any("node0/cpumap" in w for w in warnings)
