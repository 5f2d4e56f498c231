# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/search.py: the group search, its work budget and the node-by-node fallback."""

from __future__ import annotations

import random

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import domains as placement_domains
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import search as placement_search
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement import test_search_reference as reference
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import (
    a6000_nvlink_pairs,
    make_facts,
)


def indices(plan):
    return [g["gpu_indices"] for g in plan["groups"]]


# ---------------------------------------------------------------- search limits


def test_plan_host_16_distinct_gpus_on_one_socket_searched_exactly():
    # no two GPUs alike: the search cannot merge any, and still finishes exactly
    rng = random.Random(3)
    table = {}
    palette = ["NV4", "NV8", "PIX", "PXB", "NODE", "SYS", "PHB"]
    facts = make_facts(
        "x", {0: (0, "0-63")}, [0] * 16, lambda i, j: table.setdefault((min(i, j), max(i, j)), rng.choice(palette)),
        smt=[[c] for c in range(64)],
    )
    placement.clear_cache()
    plan = placement.plan_host(facts, tp_size=4)
    assert len(plan["groups"]) == 4
    assert plan["warnings"] == []


def test_plan_host_search_too_large_falls_back_node_by_node_with_warning(monkeypatch):
    monkeypatch.setattr(placement_search, "STATE_BUDGET", 10)
    placement.clear_cache()
    try:
        plan = placement.plan_host(a6000_nvlink_pairs(), tp_size=2)
    finally:
        placement.clear_cache()
    assert indices(plan) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert any("exact search" in w for w in plan["warnings"])


# ---------------------------------------------------------------- the VECTOR_BUDGET fallback


def test_search_vector_budget_fallback_keeps_every_rule_but_the_links(monkeypatch):
    # Every domain over VECTOR_BUDGET: the node-by-node fallback plans each host. It must keep the
    # invariants (socket-local unless spanning, disjoint groups, every GPU accounted for) and form as
    # many instances as the exhaustive reference, and say the plan may not be optimal.
    monkeypatch.setattr(placement_domains, "VECTOR_BUDGET", 0)
    placement.clear_cache()
    planned = 0
    try:
        for facts, tp, pp, allow_span, cap, exclude in reference._random_cases()[:300]:
            best = reference.reference_best(facts, tp, pp, allow_span, cap, exclude)
            options = dict(tp_size=tp, pp_size=pp, allow_span=allow_span, max_instances_per_host=cap,
                           exclude_gpus=exclude)
            if best is None:
                with pytest.raises(placement.PlacementError, match=facts["hostname"]):
                    placement.plan_host(facts, **options)
                continue
            plan = placement.plan_host(facts, **options)
            reference.check_plan_shape(plan, facts, tp, pp, allow_span)
            assert len(plan["groups"]) == best[0], (facts["hostname"], tp, pp, allow_span, cap)
            assert any("may not be optimal" in w for w in plan["warnings"]), plan["warnings"]
            planned += 1
    finally:
        placement.clear_cache()
    assert planned >= 100


def test_search_over_vector_budget_returns_a_fallback_result():
    # 32 distinct GPUs on one socket in groups of 8: 10.5 million candidate groups
    rng = random.Random(1)
    score = [[0] * 32 for _row in range(32)]
    for i in range(32):
        for j in range(i + 1, 32):
            score[i][j] = score[j][i] = rng.randint(1, 1000)
    assert placement_domains.count_vectors((1,) * 32, 8, placement_domains.VECTOR_BUDGET) > placement_domains.VECTOR_BUDGET
    result = placement_search.search([i // 16 for i in range(32)], [0] * 32, score, 8)
    assert result.exhaustive is False
    assert result.groups == [tuple(range(i, i + 8)) for i in range(0, 32, 8)]
    assert result.domains == [list(range(32))] and result.max_groups(8) == 4


def test_search_nothing_to_place_is_an_empty_exhaustive_result():
    result = placement_search.search([0, 0], [0, 0], [[0, 5], [5, 0]], 4)
    assert result == placement_search.SearchResult([], [[0, 1]], True)
