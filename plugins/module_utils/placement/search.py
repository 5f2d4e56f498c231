# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The group search behind placement: which GPUs form tensor-parallel groups.

Works on an abstract host: GPUs by position (PCI order), each with a NUMA
node and a socket label, and a symmetric matrix of link scores. It knows
nothing about facts, CPUs or plans; placement/template.py builds its input
and turns its answer into a plan. The parts inside one domain (twin
classes, candidate groups, the per-domain table) are placement/domains.py.

Objective, compared lexicographically (bigger is better):

    (instances,
     groups inside one NUMA node,
     -(sum over groups of sockets spanned - 1),
     -(sum over groups of NUMA nodes spanned - 1),
     min over groups of the group's worst link score,
     sum over groups of the group's worst link score,
     sum over groups of the scores of every GPU pair inside the group)

where instances = min(groups // pp_size, max_instances) and exactly
instances * pp_size groups are chosen. Ties go to the lowest GPUs in PCI
order (docs/placement.md, "Ties", says exactly how; the reference test
checks it).

Method (no enumeration of partitions):
- candidate groups never leave a "domain": a socket, or the whole host when
  spanning is allowed and needed;
- GPUs that are interchangeable (same node and socket, same link score to
  every other GPU: the GPUs on one NVSwitch, one PCIe switch, ...) are
  merged into classes, so the state of a domain is a vector of counts per
  class (a bit mask when no two GPUs are alike);
- a memoised DP over that state chooses exactly r groups: the lowest class
  still present either loses one GPU to "unused" or gives at least one GPU
  to the next group;
- per-domain tables are combined by a knapsack over the group counts;
- the min-worst-link term is not additive: the DP runs with a threshold
  (groups whose worst link is below it are forbidden); the best value of
  the terms before it can only fall as the threshold rises, so a binary
  search finds the highest threshold that keeps them, where the DP's answer
  is optimal for the whole objective;
- the search runs on explicit stacks: no recursion grows with the GPUs;
- past a fixed amount of work per host (STATE_BUDGET, a weighted count of
  what the search does, not a clock; VECTOR_BUDGET per domain) the search
  gives up and groups GPUs node by node in PCI order, inside each domain
  (exhaustive False; the caller warns).
"""

from __future__ import annotations

from typing import NamedTuple

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import domains as _domains
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.domains import ZERO, Budget, SearchTooLarge, add

# Work one host's exact search may do (candidate groups built, weighted by
# their pairs; candidate groups tried, weighted by whether they fit) before
# placement falls back to a node-by-node grouping. A count, not a clock, so
# the same facts always give the same plan; it bounds the search to about
# a second of CPU. Only hosts with many GPUs on one socket, no two alike,
# get near it.
STATE_BUDGET = 9000000


class SearchResult(NamedTuple):
    groups: list  # tuples of positions, sorted
    domains: list  # [positions] per domain (sockets, or the host when groups span), by lowest GPU
    exhaustive: bool  # False: the work budget ran out and the groups are _fallback_groups'

    def max_groups(self, tp_size):
        """How many groups of tp_size the domains hold at most."""
        return sum(len(d) // tp_size for d in self.domains if len(d) >= tp_size)


class _Solved(NamedTuple):
    value: tuple  # the objective vector (domains.ZERO's layout)
    groups: list  # tuples of positions, sorted


# The terms of the objective vector the worst-link threshold must not lower:
# groups inside one node, sockets spanned, nodes spanned.
_KEPT_TERMS = slice(0, 3)


class _Partial(NamedTuple):
    """A knapsack entry: the summed objective vector and the picks so far, linked ((domain, vectors), rest)."""

    value: tuple
    link: object


def _combine(tables, k):
    """Knapsack over domains: exactly k groups in all, best summed value.

    Returns (value, ((domain, vectors), ...)) or None.
    """
    acc = {0: _Partial(ZERO, None)}
    for d, table in enumerate(tables):
        nxt = {}
        # earlier domains' larger counts first, strict improvement only: on ties the
        # lower GPUs in PCI order get the groups
        for have, partial in sorted(acc.items(), reverse=True):
            for r, entry in enumerate(table):
                if entry is None or have + r > k:
                    continue
                total = have + r
                cand = add(partial.value, entry.value)
                if total not in nxt or cand > nxt[total].value:
                    nxt[total] = _Partial(cand, ((d, entry.vectors), partial.link))
        acc = nxt
    found = acc.get(k)
    if found is None:
        return None
    picks = []
    link = found.link
    while link is not None:
        pick, link = link
        picks.append(pick)
    return found.value, tuple(reversed(picks))


def _fallback_groups(domains, node, k, tp_size):
    """Groups without the exact search: node by node in PCI order, then the rest of each domain."""
    groups = []
    for members in domains:
        by_node = {}
        for g in sorted(members):
            by_node.setdefault(node[g], []).append(g)
        left = []
        for gpus in sorted(by_node.values()):
            while len(gpus) >= tp_size:
                groups.append(tuple(gpus[:tp_size]))
                gpus = gpus[tp_size:]
            left.extend(gpus)
        left.sort()
        while len(left) >= tp_size:
            groups.append(tuple(left[:tp_size]))
            left = left[tp_size:]
    # keep the node-local groups first, then PCI order
    groups.sort(key=lambda g: (len(set(node[x] for x in g)) > 1, g))
    return sorted(groups[:k])


def search(node, socket, score, tp_size, pp_size=1, span=False, max_instances=None):
    """Choose the groups for one host: a SearchResult.

    node, socket: per GPU position (PCI order), hashable labels.
    score: square matrix (list of lists) of link scores, symmetric.
    span: groups may cross sockets (the caller checked rule 1).
    """
    n = len(node)
    if span:
        domains = [list(range(n))] if n else []
    else:
        by_socket = {}
        for gpu in range(n):
            by_socket.setdefault(socket[gpu], []).append(gpu)
        domains = sorted(by_socket.values(), key=min)
    placeable = [members for members in domains if len(members) >= tp_size]
    max_groups = sum(len(members) // tp_size for members in placeable)
    instances = max_groups // pp_size
    if max_instances is not None:
        instances = min(instances, max_instances)
    k = instances * pp_size
    if k == 0:
        return SearchResult([], domains, True)
    try:
        return SearchResult(_exact_groups(placeable, node, socket, score, tp_size, k, Budget(STATE_BUDGET)),
                            domains, True)
    except SearchTooLarge:
        return SearchResult(_fallback_groups(placeable, node, k, tp_size), domains, False)


def _exact_groups(placeable, node, socket, score, tp_size, k, budget):
    """The optimal groups (sorted), or SearchTooLarge once budget is spent."""
    built = [_domains.Domain(_domains.twin_classes(members, node, socket, score), node, socket, score, tp_size, budget)
             for members in placeable]
    thresholds = sorted(set(cand.worst for d in built for cand in d.vectors))

    def solve(threshold):
        """(objective vector, groups) of the best choice with no group's worst link below threshold, or None."""
        tables = [_domains.domain_table(d, threshold, tp_size, min(k, sum(d.counts) // tp_size), budget)
                  for d in built]
        combined = _combine(tables, k)
        if combined is None:
            return None
        value, picks = combined
        groups = []
        for d, vectors in picks:
            queues = [list(c) for c in built[d].classes]
            for vec in vectors:
                group = []
                for c, take in vec:
                    group.extend(queues[c][:take])
                    del queues[c][:take]
                groups.append(tuple(sorted(group)))
        groups.sort()
        return _Solved(value, groups)

    # The best (node-local, spans) prefix only falls as the threshold on the
    # worst link rises: binary-search the highest threshold that keeps it.
    # There the DP's answer is optimal for the whole objective.
    base = solve(thresholds[0])
    lo, hi, best = 0, len(thresholds) - 1, base
    while lo < hi:
        mid = (lo + hi + 1) // 2
        found = solve(thresholds[mid])
        if found is not None and found.value[_KEPT_TERMS] == base.value[_KEPT_TERMS]:
            lo, best = mid, found
        else:
            hi = mid - 1
    return best.groups
