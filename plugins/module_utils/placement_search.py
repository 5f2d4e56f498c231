# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The group search behind placement: which GPUs form tensor-parallel groups.

Works on an abstract host: GPUs by position (PCI order), each with a NUMA
node and a socket label, and a symmetric matrix of link scores. It knows
nothing about facts, CPUs or plans; placement.py builds its input and turns
its answer into a plan.

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
order.

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
- past a fixed amount of work (STATE_BUDGET, VECTOR_BUDGET) the search gives
  up and groups GPUs node by node in PCI order ("exhaustive": False).
"""

from __future__ import annotations

# Score of the "link" inside a one-GPU group: there is none, and it must not
# lower the min over groups (all groups have tp_size GPUs, so it is constant).
SINGLE_GPU_SCORE = 1000


def _twin_classes(members, node, socket, score):
    """Split domain members (positions, PCI order) into interchangeable classes."""
    classes = []
    for gpu in members:
        for cls in classes:
            rep = cls[0]
            if node[rep] != node[gpu] or socket[rep] != socket[gpu]:
                continue
            row_rep = score[rep]
            row_gpu = score[gpu]
            if all(row_rep[x] == row_gpu[x] for x in range(len(row_rep)) if x != rep and x != gpu):
                cls.append(gpu)
                break
        else:
            classes.append([gpu])
    return classes


def _group_vectors(counts, tp_size):
    """Every count vector v with sum tp_size and v[c] <= counts[c], lexicographically largest first."""
    out = []
    vec = [0] * len(counts)
    suffix = [0] * (len(counts) + 1)
    for c in range(len(counts) - 1, -1, -1):
        suffix[c] = suffix[c + 1] + counts[c]

    def rec(c, left):
        if left == 0:
            out.append(tuple(vec))
            return
        if c == len(counts) or suffix[c] < left:
            return
        for take in range(min(counts[c], left), -1, -1):
            vec[c] = take
            rec(c + 1, left - take)
        vec[c] = 0

    rec(0, tp_size)
    return out


def _count_vectors(counts, tp_size):
    """How many count vectors _group_vectors would produce (bounded compositions)."""
    ways = [1] + [0] * tp_size
    for count in counts:
        nxt = [0] * (tp_size + 1)
        for have, n in enumerate(ways):
            if n:
                for take in range(min(count, tp_size - have) + 1):
                    nxt[have + take] += n
        ways = nxt
    return ways[tp_size]


# Candidate groups a domain may have before the exact search is not tried
# (e.g. 32 GPUs on one socket, no two alike, in groups of 8: 10 million).
VECTOR_BUDGET = 100000


class _Domain(object):
    """One domain: its classes and every candidate group as a count vector."""

    def __init__(self, classes, node, socket, score, tp_size):
        self.classes = classes
        self.node_of = node
        self.counts = tuple(len(c) for c in classes)
        self.vectors = []
        if _count_vectors(self.counts, tp_size) > VECTOR_BUDGET:
            self.too_large = True
            return
        self.too_large = False
        reps = [c[0] for c in classes]
        for vec in _group_vectors(self.counts, tp_size):
            used = [i for i, v in enumerate(vec) if v]
            worst = None
            pair_sum = 0
            for a_pos, a in enumerate(used):
                if vec[a] >= 2:
                    intra = score[classes[a][0]][classes[a][1]]
                    worst = intra if worst is None or intra < worst else worst
                    pair_sum += intra * vec[a] * (vec[a] - 1) // 2
                for b in used[a_pos + 1:]:
                    inter = score[reps[a]][reps[b]]
                    worst = inter if worst is None or inter < worst else worst
                    pair_sum += inter * vec[a] * vec[b]
            if worst is None:
                worst = SINGLE_GPU_SCORE
            nodes = set(node[reps[i]] for i in used)
            sockets = set(socket[reps[i]] for i in used)
            first = used[0]
            value = (
                1 if len(nodes) == 1 else 0,
                1 - len(sockets),
                1 - len(nodes),
                worst,
                pair_sum,
            )
            self.vectors.append((first, vec, worst, value, self.encode(vec, guard=False)))

    def _layout(self):
        # Counts per class packed into one integer, each field with a guard bit
        # above it: a subtraction that would take more GPUs of a class than
        # are left borrows the guard, so one AND tells whether a group fits.
        offsets = []
        guards = 0
        offset = 0
        field_of_bit = {}
        for count in self.counts:
            width = count.bit_length() + 1
            offsets.append(offset)
            for bit in range(offset, offset + width):
                field_of_bit[bit] = len(offsets) - 1
            guards |= 1 << (offset + width - 1)
            offset += width
        self.offsets = offsets
        self.guards = guards
        self.field_of_bit = field_of_bit

    def encode(self, counts, guard=True):
        if not hasattr(self, "offsets"):
            self._layout()
        value = 0
        for count, offset in zip(counts, self.offsets):
            value |= count << offset
        return value | self.guards if guard else value


_ZERO = (0, 0, 0, 0, 0)


def _add(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


class SearchTooLarge(Exception):
    """The exact search would visit more states than the budget allows."""


# Candidate groups one exact search may try (all thresholds together) before
# placement falls back to a node-by-node grouping; one to three seconds of CPU. Only
# hosts with many GPUs on one socket, no two alike, get near it.
STATE_BUDGET = 5000000


def _domain_table(domain, threshold, tp_size, max_groups, budget):
    """best[r] = (value, [vectors]) choosing exactly r groups in the domain, or None."""
    by_first = {}
    exact = {}
    for first, vec, worst, value, enc in domain.vectors:
        if worst >= threshold:
            by_first.setdefault(first, []).append((enc, value, vec))
            exact[enc] = (value, (vec,))
    guards = domain.guards
    field_of_bit = domain.field_of_bit
    offsets = domain.offsets
    memo = {}

    def best(state, total, r):
        key = (state, r)
        if key in memo:
            return memo[key]
        if r == 0:
            return (_ZERO, ())
        if r == 1 and total == tp_size:
            # the last group must take exactly what is left
            return exact.get(state & ~guards)
        result = None
        if total >= r * tp_size:
            bits = state & ~guards
            first = field_of_bit[(bits & -bits).bit_length() - 1]
            candidates = by_first.get(first, ())
            budget[0] -= len(candidates) + 1
            if budget[0] < 0:
                raise SearchTooLarge()
            for enc, value, vec in candidates:
                rest_state = state - enc
                if rest_state & guards != guards:
                    continue  # takes more GPUs of some class than are left
                rest = best(rest_state, total - tp_size, r - 1)
                if rest is None:
                    continue
                cand = _add(value, rest[0])
                if result is None or cand > result[0]:
                    result = (cand, (vec,) + rest[1])
            if total - 1 >= r * tp_size:
                rest = best(state - (1 << offsets[first]), total - 1, r)
                if rest is not None and (result is None or rest[0] > result[0]):
                    result = rest
        memo[key] = result
        return result

    full = domain.encode(domain.counts)
    total = sum(domain.counts)
    return [best(full, total, r) for r in range(max_groups + 1)]


def _combine(tables, k):
    """Knapsack over domains: exactly k groups in all, best summed value."""
    acc = {0: (_ZERO, ())}
    for d, table in enumerate(tables):
        nxt = {}
        # earlier domains' larger counts first, strict improvement only: on ties the
        # lower GPUs in PCI order get the groups
        for have, (val, picks) in sorted(acc.items(), reverse=True):
            for r, entry in enumerate(table):
                if entry is None or have + r > k:
                    continue
                total = have + r
                cand = _add(val, entry[0])
                if total not in nxt or cand > nxt[total][0]:
                    nxt[total] = (cand, picks + ((d, entry[1]),))
        acc = nxt
    return acc.get(k)


def _true_objective(groups, node, socket, score, instances):
    """The objective tuple of a concrete set of groups (positions)."""
    node_local = 0
    socket_spread = 0
    node_spread = 0
    worsts = []
    pair_sum = 0
    for group in groups:
        nodes = set(node[g] for g in group)
        sockets = set(socket[g] for g in group)
        node_local += 1 if len(nodes) == 1 else 0
        socket_spread += len(sockets) - 1
        node_spread += len(nodes) - 1
        worst = SINGLE_GPU_SCORE
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                worst = min(worst, score[a][b])
                pair_sum += score[a][b]
        worsts.append(worst)
    return (
        instances,
        node_local,
        -socket_spread,
        -node_spread,
        min(worsts) if worsts else 0,
        sum(worsts),
        pair_sum,
    )


def _fallback_groups(built, k, tp_size):
    """Groups without the exact search: node by node in PCI order, then the rest of each domain."""
    groups = []
    for domain in built:
        members = sorted(g for c in domain.classes for g in c)
        by_node = {}
        for g in members:
            by_node.setdefault(domain.node_of[g], []).append(g)
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
    groups.sort(key=lambda g: (len(set(built[0].node_of[x] for x in g)) > 1, g))
    return sorted(groups[:k])


def _fallback(result, built, k, tp_size, node, socket, score, instances):
    result["groups"] = _fallback_groups(built, k, tp_size)
    result["objective"] = _true_objective(result["groups"], node, socket, score, instances)
    result["exhaustive"] = False
    return result


def search(node, socket, score, tp_size, pp_size=1, span=False, max_instances=None):
    """Choose the groups for one host.

    node, socket: per GPU position (PCI order), hashable labels.
    score: square matrix (list of lists) of link scores, symmetric.
    span: groups may cross sockets (the caller checked rule 1).
    Returns {"groups": [tuple of positions, ...] sorted by first position,
    "objective": tuple, "domains": [[positions], ...]}.
    """
    n = len(node)
    if span:
        domains = [list(range(n))] if n else []
    else:
        by_socket = {}
        for gpu in range(n):
            by_socket.setdefault(socket[gpu], []).append(gpu)
        domains = sorted(by_socket.values(), key=lambda members: members[0])
    built = []
    for members in domains:
        if len(members) < tp_size:
            continue
        built.append(_Domain(_twin_classes(members, node, socket, score), node, socket, score, tp_size))
    max_groups = sum(sum(d.counts) // tp_size for d in built)
    instances = max_groups // pp_size
    if max_instances is not None:
        instances = min(instances, max_instances)
    k = instances * pp_size
    result = {"groups": [], "objective": _true_objective([], node, socket, score, 0), "domains": domains,
              "exhaustive": True}
    if k == 0:
        return result
    if any(d.too_large for d in built):
        return _fallback(result, built, k, tp_size, node, socket, score, instances)
    thresholds = sorted(set(v[2] for d in built for v in d.vectors))
    budget = [STATE_BUDGET]

    def solve(threshold):
        tables = [_domain_table(d, threshold, tp_size, min(k, sum(d.counts) // tp_size), budget) for d in built]
        combined = _combine(tables, k)
        if combined is None:
            return None
        groups = []
        for d, vectors in combined[1]:
            domain = built[d]
            queues = [list(c) for c in domain.classes]
            for vec in vectors:
                group = []
                for c, take in enumerate(vec):
                    group.extend(queues[c][:take])
                    del queues[c][:take]
                groups.append(tuple(sorted(group)))
        groups.sort()
        return combined[0], groups

    try:
        # The best (node-local, spans) prefix only falls as the threshold on the
        # worst link rises: binary-search the highest threshold that keeps it.
        # There the DP's answer is optimal for the whole objective.
        base = solve(thresholds[0])
        lo, hi, best = 0, len(thresholds) - 1, base
        while lo < hi:
            mid = (lo + hi + 1) // 2
            found = solve(thresholds[mid])
            if found is not None and found[0][:3] == base[0][:3]:
                lo, best = mid, found
            else:
                hi = mid - 1
    except SearchTooLarge:
        return _fallback(result, built, k, tp_size, node, socket, score, instances)
    best = (_true_objective(best[1], node, socket, score, instances), best[1])
    result["groups"] = best[1]
    result["objective"] = best[0]
    return result
