# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/fleet_warnings.py: warnings carried as (host, text), formatted once at the fleet plan's edge."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import HostWarning, format_warnings
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import make_facts


def test_format_warnings_host_prefix_in_order():
    assert format_warnings([HostWarning("b", "x: y"), HostWarning("a", "z")]) == ["b: x: y", "a: z"]


def test_fleet_plan_warnings_name_their_host_once():
    facts = make_facts("m", {0: (0, "0-3")}, [None, 0], lambda i, j: "SYS")
    host_plan = placement.plan_host(facts, tp_size=1)
    assert host_plan["warnings"] and not any(w.startswith("m: ") for w in host_plan["warnings"])
    fleet = placement.plan_fleet({"m": facts}, tp_size=1)
    assert fleet["warnings"] == ["m: " + w for w in host_plan["warnings"]]
