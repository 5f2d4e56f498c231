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
        "b: critical cpuset_mems /sys/fs/cgroup/cpuset.mems.effective: vllm-1 binds node 1 (fix: allow it)",
        "b: warning numa_balancing kernel.numa_balancing: on (fix: turn it off)",
        "b: info sub_numa socket 0: SNC",
        "b: refused, keeps its recorded instances"]
    assert policy.report_lines({}) == ["no finding"]
