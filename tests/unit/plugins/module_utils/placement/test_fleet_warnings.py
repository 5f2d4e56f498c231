# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/fleet_warnings.py: a plan's warnings as records {host, text, gpus, nodes}; "HOST: text" only for people."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import (
    Note,
    by_host,
    format_warnings,
    host_warning,
    host_warnings,
    texts,
)
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import make_facts


def test_format_warnings_host_prefix_in_order():
    records = host_warnings("b", ["x: y"]) + [host_warning("a", Note("z", gpus=("g",), nodes=(1,)))]
    assert format_warnings(records) == ["b: x: y", "a: z"]


def test_a_record_holds_the_host_the_text_the_gpus_and_the_nodes():
    assert host_warning("h", "plain") == {"host": "h", "text": "plain", "gpus": [], "nodes": []}
    assert host_warning("h", Note("t", gpus=("b", "a"), nodes=(3, 1, 3))) == {
        "host": "h", "text": "t", "gpus": ["b", "a"], "nodes": [1, 3]}
    assert texts([Note("t", nodes=(1,)), "u"]) == ["t", "u"]


def test_by_host_keeps_each_hosts_order():
    records = [host_warning("b", "1"), host_warning("a", "2"), host_warning("b", "0")]
    assert [w["text"] for w in by_host(records)] == ["2", "1", "0"]


def test_fleet_plan_warnings_name_their_host_once():
    facts = make_facts("m", {0: (0, "0-3")}, [None, 0], lambda i, j: "SYS")
    host_plan = placement.plan_host(facts, tp_size=1)
    assert host_plan["warnings"] and not any(w.startswith("m: ") for w in host_plan["warnings"])
    fleet = placement.plan_fleet({"m": facts}, tp_size=1)
    assert [w["text"] for w in fleet["warnings"]] == host_plan["warnings"]
    assert [w["host"] for w in fleet["warnings"]] == ["m"] * len(host_plan["warnings"])
    assert format_warnings(fleet["warnings"]) == ["m: " + w for w in host_plan["warnings"]]


def test_a_gpu_without_numa_node_is_named_in_the_gpus_field():
    facts = make_facts("m", {0: (0, "0-3")}, [None, 0], lambda i, j: "SYS")
    fleet = placement.plan_fleet({"m": facts}, tp_size=1)
    unknown = [w for w in fleet["warnings"] if "no known NUMA node" in w["text"]]
    (gpu,) = [g["id"] for g in facts["gpus"] if g["numa_node"] is None]
    assert unknown == [{"host": "m", "text": "GPU %s (index 0) has no known NUMA node; left unused" % gpu,
                        "gpus": [gpu], "nodes": []}]
