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
- the min-worst-link term is not additive: the DP runs once per threshold
  (groups whose worst link is below it are forbidden) and the best true
  objective over all thresholds wins.
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


class _Domain(object):
    """One domain: its classes and every candidate group as a count vector."""

    def __init__(self, classes, node, socket, score, tp_size):
        self.classes = classes
        self.counts = tuple(len(c) for c in classes)
        reps = [c[0] for c in classes]
        self.vectors = []
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
            self.vectors.append((first, vec, worst, value))


_ZERO = (0, 0, 0, 0, 0)


def _add(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


def _domain_table(domain, threshold, tp_size, max_groups):
    """best[r] = (value, [vectors]) choosing exactly r groups in the domain, or None."""
    by_first = {}
    for first, vec, worst, value in domain.vectors:
        if worst >= threshold:
            by_first.setdefault(first, []).append((vec, value))
    memo = {}

    def best(state, r):
        key = (state, r)
        if key in memo:
            return memo[key]
        total = sum(state)
        if r == 0:
            result = (_ZERO, ())
        elif total < r * tp_size:
            result = None
        else:
            first = 0
            while state[first] == 0:
                first += 1
            result = None
            for vec, value in by_first.get(first, ()):
                if any(v > s for v, s in zip(vec, state)):
                    continue
                rest = best(tuple(s - v for s, v in zip(state, vec)), r - 1)
                if rest is None:
                    continue
                cand = _add(value, rest[0])
                if result is None or cand > result[0]:
                    result = (cand, (vec,) + rest[1])
            if total - 1 >= r * tp_size:
                reduced = list(state)
                reduced[first] -= 1
                rest = best(tuple(reduced), r)
                if rest is not None and (result is None or rest[0] > result[0]):
                    result = rest
        memo[key] = result
        return result

    return [best(domain.counts, r) for r in range(max_groups + 1)]


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
    result = {"groups": [], "objective": _true_objective([], node, socket, score, 0), "domains": domains}
    if k == 0:
        return result
    thresholds = sorted(set(w for d in built for _f, _v, w, _val in d.vectors), reverse=True)
    best = None
    for threshold in thresholds:
        tables = [_domain_table(d, threshold, tp_size, min(k, sum(d.counts) // tp_size)) for d in built]
        combined = _combine(tables, k)
        if combined is None:
            continue
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
        objective = _true_objective(groups, node, socket, score, instances)
        if best is None or objective > best[0]:
            best = (objective, groups)
    result["groups"] = best[1]
    result["objective"] = best[0]
    return result
