# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/fleet.py: the plan of a fleet, names, ports and totals."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import (
    dgx2_like,
    h100_nvswitch,
    mi50_nps4,
    ndv4_like,
    rtx4090_pix_quads,
)


# ---------------------------------------------------------------- fleet


def test_plan_fleet_ports_names_and_totals():
    fleet = placement.plan_fleet({"gpu-b": h100_nvswitch(), "gpu-a": rtx4090_pix_quads()}, tp_size=2)
    assert [(i["host"], i["name"], i["port"], i["dist_port"]) for i in fleet["instances"]][:5] == [
        ("gpu-a", "vllm-0", 8000, 29000),
        ("gpu-a", "vllm-1", 8001, 29100),
        ("gpu-a", "vllm-2", 8002, 29200),
        ("gpu-a", "vllm-3", 8003, 29300),
        ("gpu-b", "vllm-0", 8000, 29000),
    ]
    assert fleet["instances"][0]["dist_port_range"] == [29000, 29099]
    assert fleet["totals"] == {"hosts": 2, "instances": 8, "gpus": 16, "gpus_used": 16, "gpus_unused": 0}


def test_plan_fleet_adding_a_host_does_not_move_other_instances():
    small = {"gpu-a": h100_nvswitch(), "gpu-c": ndv4_like()}
    bigger = dict(small, **{"gpu-b": rtx4090_pix_quads(), "gpu-0": mi50_nps4()})
    before = placement.plan_fleet(small, tp_size=2)["instances"]
    after = [i for i in placement.plan_fleet(bigger, tp_size=2)["instances"] if i["host"] in small]
    assert after == before


def test_plan_fleet_port_collisions_impossible():
    fleet = placement.plan_fleet({"h": dgx2_like()}, tp_size=1, base_port=29050, dist_port_base=30000)
    api = [i["port"] for i in fleet["instances"]]
    ranges = [range(i["dist_port_range"][0], i["dist_port_range"][1] + 1) for i in fleet["instances"]]
    assert len(set(api)) == len(api)
    assert not any(p in r for p in api for r in ranges)
    taken = [p for r in ranges for p in r]
    assert len(set(taken)) == len(taken)


def test_plan_fleet_api_port_inside_dist_range_is_an_error():
    with pytest.raises(placement.PlacementError, match="host h: API port 29000 of instance 0 falls inside the VLLM_PORT range of instance 0"):
        placement.plan_fleet({"h": h100_nvswitch()}, tp_size=2, base_port=29000)


def test_plan_fleet_ports_past_65535_are_an_error():
    with pytest.raises(placement.PlacementError, match="ports end at 65535"):
        placement.plan_fleet({"h": h100_nvswitch()}, tp_size=1, dist_port_base=65000)


def test_plan_fleet_hosts_option_orders_and_restricts():
    fleet = placement.plan_fleet({"a": h100_nvswitch(), "b": ndv4_like(), "c": {}}, tp_size=2, hosts=["b", "a"])
    assert [i["host"] for i in fleet["instances"]] == ["b"] * 4 + ["a"] * 4


def test_plan_fleet_host_without_facts_is_named():
    with pytest.raises(placement.PlacementError, match="host c: no topology facts"):
        placement.plan_fleet({"a": h100_nvswitch(), "c": {"ansible_host": "10.0.0.3"}}, tp_size=2)


def test_plan_fleet_reads_hostvars_layouts():
    hostvars = {
        "a": {"ansible_facts": {"numa_topology": h100_nvswitch()}},
        "b": {"numa_topology": ndv4_like()},
    }
    fleet = placement.plan_fleet(hostvars, tp_size=4)
    assert fleet["totals"]["instances"] == 4


def test_plan_fleet_exclude_gpus_per_host_mapping():
    facts = h100_nvswitch()
    fleet = placement.plan_fleet(
        {"a": facts, "b": copy.deepcopy(facts)}, tp_size=4, exclude_gpus={"b": [facts["gpus"][0]["uuid"]]}
    )
    assert [(i["host"], i["gpu_indices"]) for i in fleet["instances"]] == [
        ("a", [0, 1, 2, 3]), ("a", [4, 5, 6, 7]), ("b", [4, 5, 6, 7])]
    assert [u["host"] for u in fleet["unused"]] == ["b"] * 4
    with pytest.raises(placement.PlacementError, match="not planned: z"):
        placement.plan_fleet({"a": facts}, tp_size=4, exclude_gpus={"z": []})


def test_plan_fleet_name_prefix_and_strides():
    fleet = placement.plan_fleet({"a": h100_nvswitch()}, tp_size=4, name_prefix="llama-", port_stride=10,
                                 dist_port_stride=1000)
    assert [(i["name"], i["port"], i["dist_port_range"]) for i in fleet["instances"]] == [
        ("llama-0", 8000, [29000, 29999]), ("llama-1", 8010, [30000, 30999])]


def test_plan_fleet_identical_hosts_share_one_template_and_search():
    placement.clear_cache()
    hosts = dict(("h%03d" % i, h100_nvswitch("h%03d" % i)) for i in range(50))
    placement.plan_fleet(hosts, tp_size=2)
    assert placement.cache_size() == 1
