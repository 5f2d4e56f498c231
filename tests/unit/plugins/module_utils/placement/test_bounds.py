# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Hostile hosts through the planner: bounded work, a named host, never a traceback.

The big shapes are synthetic facts from make_facts: a thousand GPUs (what
the parsers still accept), and the search's worst case, many GPUs on one
socket with no two alike.
"""

from __future__ import annotations

import random

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.placement import fleet_plan, socket_local_groups
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import domains as placement_domains
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import search as placement_search
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import make_facts

PALETTE = ["NV18", "NV12", "NV8", "NV4", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]


def big_host(name, count, nodes, nodes_per_socket, distinct, seed=7):
    """count GPUs spread evenly over nodes; links all NV18, or seeded random classes (no two GPUs alike)."""
    rng = random.Random(seed)
    table = {}

    def link(i, j):
        if not distinct:
            return "NV18"
        return table.setdefault((min(i, j), max(i, j)), rng.choice(PALETTE))

    layout = dict((n, (n // nodes_per_socket, "%d-%d" % (8 * n, 8 * n + 7))) for n in range(nodes))
    return make_facts(name, layout, [i * nodes // count for i in range(count)], link, smt=[[c] for c in range(8 * nodes)])


@pytest.fixture(autouse=True)
def cold_cache():
    placement.clear_cache()
    yield
    placement.clear_cache()


def fallback_warned(plan):
    return any("exact search" in w and "may not be optimal" in w for w in plan["warnings"])


def socket_of(facts, gpu_id):
    node = next(g["numa_node"] for g in facts["gpus"] if g["id"] == gpu_id)
    return next(n["socket"] for n in facts["numa_nodes"] if n["id"] == node)


# ---------------------------------------------------------------- a thousand GPUs


def test_plan_host_1000_gpus_alike_is_planned_exactly():
    # Was RecursionError (the search recursed once per GPU): the deploy stopped, no host named.
    facts = big_host("wide", 1000, 1, 1, distinct=False)
    plan = placement.plan_host(facts, tp_size=2)
    assert len(plan["groups"]) == 500
    assert not fallback_warned(plan)
    assert sorted(i for g in plan["groups"] for i in g["gpu_indices"]) == list(range(1000))


def test_fleet_plan_1000_distinct_gpus_falls_back_socket_local_with_warning_naming_the_host():
    facts = big_host("wide", 1000, 2, 1, distinct=True)
    plan = fleet_plan({"wide": {"numa_topology": facts}}, tp_size=2, dist_port_stride=1, base_port=10000,
                      dist_port_base=20000)
    assert len(plan["instances"]) == 500
    assert any(w["host"] == "wide" and w["text"].startswith("too many distinct GPUs") and "may not be optimal" in w["text"]
               for w in plan["warnings"])
    for inst in plan["instances"]:
        assert len(set(socket_of(facts, g["id"]) for g in inst["gpus"])) == 1


# ---------------------------------------------------------------- the search's worst shapes


@pytest.mark.parametrize("count, nodes, per_socket, tp", [
    (64, 2, 1, 2),  # the reported shape: 14-18 s of planning per host
    (32, 1, 1, 4),
    (16, 2, 2, 7),  # few candidate groups fit, very many are tried
])
def test_plan_host_distinct_gpus_search_stops_at_its_budget(count, nodes, per_socket, tp):
    facts = big_host("odd", count, nodes, per_socket, distinct=True)
    # The bound is a work count, not a clock (its cost in seconds is printed by
    # benchmarks/bench_hostile_input.py): the search must give up and say so.
    plan = placement.plan_host(facts, tp_size=tp)
    assert fallback_warned(plan)
    assert len(plan["groups"]) == sum(count // nodes * per_socket // tp for _s in range(nodes // per_socket))
    placement.clear_cache()
    assert placement.plan_host(facts, tp_size=tp) == plan  # the same facts, the same plan


def test_plan_host_vector_budget_fallback_runs_and_is_socket_local():
    # 32 distinct GPUs on one socket in groups of 8: 10.5 million candidate groups, more than VECTOR_BUDGET
    facts = big_host("odd", 32, 2, 2, distinct=True)
    assert placement_domains.count_vectors((1,) * 32, 8, placement_domains.VECTOR_BUDGET) > placement_domains.VECTOR_BUDGET
    plan = placement.plan_host(facts, tp_size=8)
    assert fallback_warned(plan)
    # node by node in PCI order
    assert [g["gpu_indices"] for g in plan["groups"]] == [list(range(i, i + 8)) for i in range(0, 32, 8)]
    assert [g["numa_nodes"] for g in plan["groups"]] == [[0], [0], [1], [1]]


def test_plan_host_vector_budget_fallback_through_the_filter_with_spanning_groups():
    facts = big_host("odd", 40, 2, 1, distinct=True)
    plan = socket_local_groups(facts, tp_size=24, allow_span=True)
    assert fallback_warned(plan)
    assert len(plan["groups"]) == 1 and plan["groups"][0]["memory_policy"] == "interleave"


# ---------------------------------------------------------------- a host that cannot be planned


def test_plan_fleet_unplannable_host_is_a_placement_error_carrying_the_host():
    fleet = {"good": big_host("good", 8, 1, 1, distinct=False), "bad": big_host("bad", 4, 1, 1, distinct=False)}
    with pytest.raises(placement.PlacementError, match="host bad: tp_size 8 does not fit") as caught:
        placement.plan_fleet(fleet, tp_size=8)
    assert caught.value.host == "bad"


def test_filters_unexpected_recursion_error_is_a_filter_error_naming_the_host(monkeypatch):
    def deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(placement_search, "search", deep)
    facts = big_host("deep", 8, 1, 1, distinct=False)
    with pytest.raises(AnsibleFilterError, match="fleet_plan: host deep: the plan is too deep to compute"):
        fleet_plan({"deep": {"numa_topology": facts}}, tp_size=2)
    with pytest.raises(AnsibleFilterError, match="socket_local_groups: host deep:"):
        socket_local_groups(facts, tp_size=2)
