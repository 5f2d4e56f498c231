# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/reasons.py: the words of a plan."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import reasons
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import h100_nvswitch


@pytest.mark.parametrize("nodes, sockets, text", [
    ([0], [0], "NUMA node 0 (socket 0)"),
    ([0, 1], [0, 1], "NUMA nodes 0,1 (sockets 0,1)"),
    ([3], [], "NUMA node 3 (socket unknown)"),
])
def test_where(nodes, sockets, text):
    assert reasons.where(nodes, sockets) == text


def test_group_reason_of_a_spanning_group():
    plan = placement.plan_host(h100_nvswitch(), tp_size=8, allow_span=True)
    assert plan["groups"][0]["reason"] == (
        "8 GPUs on NUMA nodes 0,1 (sockets 0,1), worst link NV18; tp_size exceeds the GPUs of every socket and "
        "gpufleet_allow_span is true, so the group spans sockets; memory interleaved over its NUMA nodes")


def test_unused_reason_of_a_capped_host():
    plan = placement.plan_host(h100_nvswitch(), tp_size=4, max_instances_per_host=1)
    assert set(u["reason"] for u in plan["unused"]) == {"max_instances_per_host (1) reached"}
