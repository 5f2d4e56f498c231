# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of sysfs_limits: what limits the services' CPUs (cgroup cpusets, Cpus_allowed_list, isolcpus=) and usable_cpus."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_limits
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader

from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import two_socket_host, files_reader as _reader


CGROUP_ROOT = "/sys/fs/cgroup/cpuset.cpus.effective"
CGROUP_SLICE = "/sys/fs/cgroup/system.slice/cpuset.cpus.effective"
STATUS = "Name:\tpython3\nUid:\t0\t0\t0\t0\nCpus_allowed:\tff\nCpus_allowed_list:\t%s\nMems_allowed_list:\t0-1\n"


def test_collect_usable_cpus_unknown_without_any_limit_file():
    assert _usable(two_socket_host()) == ([None, None], [])


def test_collect_usable_cpus_slice_cpuset_before_the_root_one():
    b = two_socket_host()
    b.files[CGROUP_ROOT] = "0-7\n"
    b.files[CGROUP_SLICE] = "0,2-3,6\n"
    usable, warnings = _usable(b)
    assert usable == ["0", "2-3,6"]
    assert warnings == ["CPUs 1,4-5,7 are not usable by services: outside %s (cgroup cpuset); they are left out "
                        "of usable_cpus" % CGROUP_SLICE]
    # another slice (the option cgroup_slice) that has no cpuset of its own: the root's applies
    assert _usable(b, cgroup_slice="vllm.slice")[0] == ["0-1,4-5", "2-3,6-7"]
    assert _usable(b, cgroup_slice="/system.slice/")[0] == ["0", "2-3,6"]


def test_collect_usable_cpus_process_allowed_list_and_isolated_cpus():
    b = two_socket_host()
    b.files["/proc/self/status"] = STATUS % "0-5"
    b.files["/sys/devices/system/cpu/isolated"] = "1,5\n"
    usable, warnings = _usable(b)
    assert usable == ["0,4", "2-3"]
    assert warnings == [
        "CPUs 6-7 are not usable by services: outside Cpus_allowed_list of /proc/self/status; they are left out of "
        "usable_cpus",
        "CPUs 1,5 are not usable by services: isolated (/sys/devices/system/cpu/isolated, isolcpus=); they are "
        "left out of usable_cpus",
    ]


def test_collect_usable_cpus_empty_isolated_list_means_every_cpu():
    b = two_socket_host()
    b.files["/sys/devices/system/cpu/isolated"] = "\n"
    assert _usable(b) == (["0-1,4-5", "2-3,6-7"], [])


@pytest.mark.parametrize("path, text, problem", [
    (CGROUP_ROOT, "0-x\n", "/sys/fs/cgroup/cpuset.cpus.effective: bad element '0-x'"),
    ("/proc/self/status", "Name:\tx\n", "/proc/self/status: no Cpus_allowed_list line"),
    ("/proc/self/status", STATUS % "0-99999999", "/proc/self/status: CPU 99999999"),
    ("/sys/devices/system/cpu/isolated", "junk\n", "/sys/devices/system/cpu/isolated: bad element 'junk'"),
])
def test_collect_usable_cpus_unreadable_limit_warns_and_limits_nothing(path, text, problem):
    b = two_socket_host()
    b.files[path] = text
    usable, warnings = _usable(b)
    assert usable in ([None, None], ["0-1,4-5", "2-3,6-7"])
    assert any(w.startswith(problem) for w in warnings), warnings


def test_collect_usable_cpus_never_below_a_memory_only_node():
    b = two_socket_host()
    b.node(2, "", memory_kb=1024)
    b.files[CGROUP_ROOT] = "0-3\n"
    assert _usable(b)[0] == ["0-1", "2-3", ""]


@pytest.mark.parametrize("value", ["../../etc", "a b", "x\n", "/sys/../x", 5])
def test_check_cgroup_slice_refuses_what_is_no_cgroup_path(value):
    with pytest.raises(ValueError, match="cgroup_slice"):
        sysfs_limits.check_cgroup_slice(value)


def test_cgroup_mounts_default_without_mountinfo():
    assert sysfs_limits.cgroup_mounts(_reader({}), []) == ("/sys/fs/cgroup", "/sys/fs/cgroup/cpuset")


def test_cgroup_mounts_escaped_and_refused_points():
    text = ("35 22 0:30 / /run/my\\040cg rw - cgroup2 cgroup2 rw\n"
            "36 22 0:31 / /x/../etc rw - cgroup cgroup rw,cpuset\n")
    warnings = []
    assert sysfs_limits.cgroup_mounts(_reader({"/proc/self/mountinfo": text}), warnings) == ("/run/my cg", None)
    assert any("not a plain absolute path" in w for w in warnings)


def _usable(b, **kwargs):
    facts = sysfs.collect(CaptureReader(b.capture()), **kwargs)
    return [n["usable_cpus"] for n in facts["numa_nodes"]], facts["warnings"]
