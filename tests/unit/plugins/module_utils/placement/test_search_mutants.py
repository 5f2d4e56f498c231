# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/search at its edges: the fallback's order (node-local groups
first), the defaults of search(), a domain of exactly tp_size GPUs, and
the work budget where it runs out (scripts/mutation.py placement/search
found these untested)."""

from __future__ import annotations

import random

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import domains as placement_domains
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import search as placement_search


def test_fallback_takes_node_local_groups_before_earlier_cross_node_ones():
    # Domain one: six GPUs, each on a node of its own (only cross-node groups);
    # domain two: two GPUs on one node. Asked for one group, the node-local
    # one wins though the cross-node groups come first in PCI order.
    node = [0, 1, 2, 3, 4, 5, 6, 6]
    domains = [[0, 1, 2, 3, 4, 5], [6, 7]]
    assert placement_search._fallback_groups(domains, node, 1, 2) == [(6, 7)]
    assert placement_search._fallback_groups(domains, node, 2, 2) == [(0, 1), (6, 7)]
    assert placement_search._fallback_groups(domains, node, 4, 2) == [(0, 1), (2, 3), (4, 5), (6, 7)]


def test_fallback_groups_a_node_of_exactly_tp_size_gpus_on_its_node():
    # Nodes interleaved in PCI order: 0 and 2 on node 0, 1 and 3 on node 1.
    assert placement_search._fallback_groups([[0, 1, 2, 3]], [0, 1, 0, 1], 2, 2) == [(0, 2), (1, 3)]
    # one GPU more than tp_size on a node: the rest joins the leftovers
    assert placement_search._fallback_groups([[0, 1, 2, 3, 4, 5]], [0, 1, 0, 1, 0, 1], 3, 2) == [
        (0, 2), (1, 3), (4, 5)]


def test_search_defaults_to_one_stage_and_sockets_kept():
    score = [[0, 5, 5], [5, 0, 5], [5, 5, 0]]
    # pp_size 1: three GPUs give three groups of one (two stages would give two)
    assert placement_search.search([0, 0, 0], [0, 0, 0], score, 1).groups == [(0,), (1,), (2,)]
    # span False: four GPUs on two sockets give no group of four
    score4 = [[0 if i == j else 5 for j in range(4)] for i in range(4)]
    assert placement_search.search([0, 0, 1, 1], [0, 0, 1, 1], score4, 4).groups == []
    assert placement_search.search([0, 0, 1, 1], [0, 0, 1, 1], score4, 4, span=True).groups == [(0, 1, 2, 3)]


def test_max_groups_counts_a_domain_of_exactly_tp_size():
    result = placement_search.SearchResult([], [[0, 1], [2, 3, 4], [5]], True)
    assert result.max_groups(2) == 2
    assert result.max_groups(3) == 1
    assert result.max_groups(1) == 6


def _distinct_host(n, seed):
    rng = random.Random(seed)
    score = [[0] * n for _row in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            score[i][j] = score[j][i] = rng.randint(1, 1000)
    return [i // (n // 2) for i in range(n)], [0] * n, score


def test_the_work_budget_runs_out_at_exactly_state_budget(monkeypatch):
    """A search that needs W units of work is exact with a budget of W and
    falls back with W - 1 (Budget.spend refuses only below zero)."""
    spent = []

    class Counting(placement_domains.Budget):
        __slots__ = ()

        def spend(self, amount):
            spent.append(amount)
            placement_domains.Budget.spend(self, amount)

    node, socket, score = _distinct_host(12, 3)
    monkeypatch.setattr(placement_search, "Budget", Counting)
    exact = placement_search.search(node, socket, score, 4)
    work = sum(spent)
    assert exact.exhaustive and 0 < work < placement_search.STATE_BUDGET
    monkeypatch.setattr(placement_search, "STATE_BUDGET", work)
    assert placement_search.search(node, socket, score, 4) == exact
    monkeypatch.setattr(placement_search, "STATE_BUDGET", work - 1)
    assert placement_search.search(node, socket, score, 4).exhaustive is False


def test_state_budget_is_the_documented_bound():
    # about a second of CPU (search.py's comment); the boundary itself is
    # held above, the value here
    assert placement_search.STATE_BUDGET == 9000000
