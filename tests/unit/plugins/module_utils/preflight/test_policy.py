# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""gpufleet_preflight: fail refuses a host with a critical finding, warn and
off refuse nothing, anything else is an error naming the variable; the
report prints every finding once."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import policy
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.findings import finding

CRITICAL = finding("cpuset_mems", "critical", "/sys/fs/cgroup/cpuset.mems.effective", "vllm-1 binds node 1", "allow it")
WARNING = finding("numa_balancing", "warning", "kernel.numa_balancing", "on", "turn it off")
INFO = finding("sub_numa", "info", "socket 0", "SNC")


def test_refusals_by_policy():
    found = {"a": [WARNING, CRITICAL], "b": [WARNING], "c": [CRITICAL], "d": [CRITICAL]}
    refused = policy.refusals(found, {"a": None, "b": "fail", "c": "warn", "d": "off"})
    assert refused == {"a": "refused by the host preflight (gpufleet_preflight: fail): cpuset_mems "
                            "/sys/fs/cgroup/cpuset.mems.effective: vllm-1 binds node 1"}


@pytest.mark.parametrize("value", ["maybe", True, 1, ""])
def test_check_policy_refuses_other_values(value):
    with pytest.raises(ValueError, match="gpufleet_preflight: must be one of fail, warn, off"):
        policy.check_policy(value)


def test_report_lines_critical_first_then_refused():
    lines = policy.report_lines({"b": [INFO, WARNING, CRITICAL], "a": []}, {"b": "why"})
    assert lines == [
        "a: all passed",
        "b: critical cpuset_mems /sys/fs/cgroup/cpuset.mems.effective: vllm-1 binds node 1 (fix: allow it)",
        "b: warning numa_balancing kernel.numa_balancing: on (fix: turn it off)",
        "b: info sub_numa socket 0: SNC",
        "b: refused, keeps its recorded instances"]
    assert policy.report_lines({}) == ["no finding"]
    assert policy.report_lines({"a": [], "b": []}) == ["a: all passed", "b: all passed"]


def test_summary_lines_worst_first_and_all_passed_when_clean():
    assert policy.summary_lines([INFO, WARNING, CRITICAL]) == [
        "critical cpuset_mems /sys/fs/cgroup/cpuset.mems.effective: vllm-1 binds node 1 (fix: allow it)",
        "warning numa_balancing kernel.numa_balancing: on (fix: turn it off)",
        "info sub_numa socket 0: SNC"]
    assert policy.summary_lines([]) == ["all passed"]


def test_report_lines_say_once_per_host_what_a_capture_cannot_answer():
    """A recorded host without the preflight's inputs: one line naming every
    check it cannot answer; other findings keep their own lines."""
    from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.findings import RECORDED
    numactl = finding("numactl", "info", "/usr/bin/numactl", RECORDED + "the capture holds no `numactl --show`")
    balancing = finding("numa_balancing", "info", "/proc/sys/kernel/numa_balancing",
                        RECORDED + "the capture holds no /proc/sys/kernel/numa_balancing")
    switches = finding("fabric_manager", "info", "nvidia-fabricmanager.service",
                       RECORDED + "the capture shows 6 NVSwitch(es) but not the fabric manager's state")
    assert policy.report_lines({"gpu-a": [numactl, WARNING, switches, INFO, balancing]}) == [
        "gpu-a: warning numa_balancing kernel.numa_balancing: on (fix: turn it off)",
        "gpu-a: info sub_numa socket 0: SNC",
        "gpu-a: info not checked (recorded capture): its capture cannot answer numactl /usr/bin/numactl, "
        "fabric_manager nvidia-fabricmanager.service, numa_balancing /proc/sys/kernel/numa_balancing (record "
        "the host with its preflight inputs, or set numa_preflight_capture: '' to check it live)"]


def test_report_lines_print_a_hosts_control_characters_escaped():
    """The probe: a host's preflight result whose text holds a terminal
    escape and a newline reached the printed line as it was."""
    hostile = finding("numactl", "critical", "/usr/bin/numactl\x1b[2J", "said\nroot: ok\x9b31m", "fix\ttab")
    assert policy.report_lines({"gpu-a\x07": [hostile]}) == [
        "gpu-a\\x07: critical numactl /usr/bin/numactl\\x1b[2J: said\\x0aroot: ok\\x9b31m (fix: fix\\x09tab)"]
