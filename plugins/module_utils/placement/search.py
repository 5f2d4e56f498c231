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
  ("exhaustive": False; the caller warns).
"""

from __future__ import annotations

# Score of the "link" inside a one-GPU group: there is none, and it must not
# lower the min over groups (all groups have tp_size GPUs, so it is constant).
SINGLE_GPU_SCORE = 1000


def _twin_classes(members, node, socket, score):
    """Split domain members (positions, PCI order) into interchangeable classes, each by lowest GPU.

    Twins a, b: same node and socket, and score[a][x] == score[b][x] for
    every other GPU x. That is an equivalence, and a, b are twins exactly
    when their rows agree once each row's own (diagonal) entry is set to
    their mutual score v; so rows are hashed once per score v they hold
    (a few link classes) instead of compared pair by pair, which costs
    n^3 on a host of n GPUs that are all different.
    """
    lowest = dict((gpu, gpu) for gpu in members)

    def root(gpu):
        while lowest[gpu] != gpu:
            gpu = lowest[gpu]
        return gpu

    holders = {}  # score v -> members whose row holds v towards another member
    for gpu in members:
        row = score[gpu]
        for v in set(row[x] for x in members if x != gpu):
            holders.setdefault(v, []).append(gpu)
    for v, gpus in holders.items():
        seen = {}
        for gpu in gpus:
            row = list(score[gpu])
            row[gpu] = v
            key = (node[gpu], socket[gpu], tuple(row))
            other = seen.setdefault(key, gpu)
            if other != gpu:
                a, b = root(other), root(gpu)
                if a != b:
                    lowest[max(a, b)] = min(a, b)
    classes = {}
    for gpu in members:
        classes.setdefault(root(gpu), []).append(gpu)
    return [classes[r] for r in sorted(classes)]


def _group_vectors(counts, tp_size):
    """Every group as a sparse count vector ((class, count), ...): sum tp_size, count <= counts[class].

    In the order of the dense vectors, lexicographically largest first.
    Iterative: a host may have a thousand classes, and tp_size as many GPUs.
    """
    n = len(counts)
    suffix = [0] * (n + 1)
    for c in range(n - 1, -1, -1):
        suffix[c] = suffix[c + 1] + counts[c]
    out = []
    chosen = []  # [class, count] per class taken so far, classes ascending
    left = tp_size
    nxt = 0  # the next class that may join the group
    while True:
        if not left:
            out.append(tuple((c, t) for c, t in chosen))
        elif nxt < n and suffix[nxt] >= left:
            take = min(counts[nxt], left)
            chosen.append([nxt, take])
            left -= take
            nxt += 1
            continue
        # the last choice takes one GPU fewer, or gives way to the next class
        while chosen:
            last, take = chosen[-1]
            left += 1
            nxt = last + 1
            if take > 1:
                chosen[-1][1] = take - 1
                break
            chosen.pop()
            if suffix[nxt] >= left:
                break
        else:
            return out


def _count_vectors(counts, tp_size, limit):
    """How many groups _group_vectors would produce (bounded compositions), counted up to limit + 1."""
    ways = [1] + [0] * tp_size
    for count in counts:
        nxt = [0] * (tp_size + 1)
        for have, n in enumerate(ways):
            if n:
                for take in range(min(count, tp_size - have) + 1):
                    nxt[have + take] += n
        ways = [min(n, limit + 1) for n in nxt]
    return ways[tp_size]


# Candidate groups a domain may have before the exact search is not tried
# (e.g. 32 GPUs on one socket, no two alike, in groups of 8: 10 million).
VECTOR_BUDGET = 100000


class SearchTooLarge(Exception):
    """The exact search would take more work than the budget allows."""


class _Domain(object):
    """One domain: its classes and every candidate group as a sparse count vector."""

    def __init__(self, classes, node, socket, score, tp_size, budget):
        self.classes = classes
        self.node_of = node
        self.counts = tuple(len(c) for c in classes)
        self.vectors = []
        self._layout()
        if _count_vectors(self.counts, tp_size, VECTOR_BUDGET) > VECTOR_BUDGET:
            raise SearchTooLarge()
        reps = [c[0] for c in classes]
        for vec in _group_vectors(self.counts, tp_size):
            # each group costs its pairs of classes
            budget[0] -= 1 + len(vec) * (len(vec) - 1) // 2
            if budget[0] < 0:
                raise SearchTooLarge()
            worst = None
            pair_sum = 0
            for a_pos, (a, take_a) in enumerate(vec):
                if take_a >= 2:
                    intra = score[classes[a][0]][classes[a][1]]
                    worst = intra if worst is None or intra < worst else worst
                    pair_sum += intra * take_a * (take_a - 1) // 2
                for b, take_b in vec[a_pos + 1:]:
                    inter = score[reps[a]][reps[b]]
                    worst = inter if worst is None or inter < worst else worst
                    pair_sum += inter * take_a * take_b
            if worst is None:
                worst = SINGLE_GPU_SCORE
            nodes = set(node[reps[c]] for c, _take in vec)
            sockets = set(socket[reps[c]] for c, _take in vec)
            value = (
                1 if len(nodes) == 1 else 0,
                1 - len(sockets),
                1 - len(nodes),
                worst,
                pair_sum,
            )
            self.vectors.append((vec[0][0], vec, worst, value, self.encode(vec)))

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

    def encode(self, vec):
        """A sparse vector packed as _layout says, guard bits clear."""
        value = 0
        for c, count in vec:
            value |= count << self.offsets[c]
        return value

    def full(self):
        """The packed state of every GPU of the domain, guard bits set."""
        return self.encode(enumerate(self.counts)) | self.guards


_ZERO = (0, 0, 0, 0, 0)


def _add(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


# Work one host's exact search may do (candidate groups built, weighted by
# their pairs; candidate groups tried, weighted by whether they fit) before
# placement falls back to a node-by-node grouping. A count, not a clock, so
# the same facts always give the same plan; it bounds the search to about
# a second of CPU. Only hosts with many GPUs on one socket, no two alike,
# get near it.
STATE_BUDGET = 9000000
# What a candidate group that fits (a lookup, a sum, a comparison) and a
# search state (a frame on the stack, a memo entry) cost against a
# candidate that does not fit (one AND).
FIT_WEIGHT = 8
STATE_WEIGHT = 40

_MISSING = object()


def _domain_table(domain, threshold, tp_size, max_groups, budget):
    """best[r] = (value, (vector, ...)) choosing exactly r groups in the domain, or None.

    A memoised search over the packed state: the lowest class still present
    either gives GPUs to a group (candidates in order, largest first) or
    loses one GPU to "unused" (last); on ties the first found is kept. Run
    with an explicit stack: its depth grows with the GPUs of the domain.
    Results are linked (vector, rest) pairs until the end.
    """
    if len(domain.counts) == 1:
        return _one_class_table(domain, threshold, max_groups, budget)
    by_first = {}
    exact = {}
    for first, vec, worst, value, enc in domain.vectors:
        if worst >= threshold:
            by_first.setdefault(first, []).append((enc, value, vec))
            exact[enc] = (value, (vec, None))
    guards = domain.guards
    field_of_bit = domain.field_of_bit
    offsets = domain.offsets
    memo = [{} for _r in range(max_groups + 1)]
    done = (_ZERO, None)

    def lookup(state, total, r):
        if r == 0:
            return done
        if r == 1 and total == tp_size:
            # the last group must take exactly what is left
            return exact.get(state & ~guards)
        return memo[r].get(state, _MISSING)

    def frame(state, total, r):
        """[state, total, r, candidates that fit, next candidate, result, state after dropping one GPU or None]."""
        if total < r * tp_size:
            return [state, total, r, (), 0, None, None]
        bits = state & ~guards
        first = field_of_bit[(bits & -bits).bit_length() - 1]
        candidates = by_first.get(first, ())
        # a group that takes more GPUs of some class than are left borrows a guard bit
        fitting = [c for c in candidates if (state - c[0]) & guards == guards]
        budget[0] -= len(candidates) + STATE_WEIGHT + FIT_WEIGHT * len(fitting)
        if budget[0] < 0:
            raise SearchTooLarge()
        drop = state - (1 << offsets[first]) if total - 1 >= r * tp_size else None
        return [state, total, r, fitting, 0, None, drop]

    def run(root, total, root_r):
        found = lookup(root, total, root_r)
        if found is not _MISSING:
            return found
        stack = [frame(root, total, root_r)]
        while stack:
            top = stack[-1]
            state, total, r, candidates, i, result, drop = top
            child = None
            rest_total = total - tp_size
            if r == 1:
                rests = None  # every rest is the empty choice
            elif r == 2 and rest_total == tp_size:
                rests = exact
            else:
                rests = memo[r - 1]
            count = len(candidates)
            while i < count:
                enc, value, vec = candidates[i]
                i += 1
                rest_state = state - enc
                if rests is None:
                    rest = done
                elif rests is exact:
                    rest = exact.get(rest_state & ~guards)
                else:
                    rest = rests.get(rest_state, _MISSING)
                    if rest is _MISSING:
                        child = (rest_state, rest_total, r - 1)
                        i -= 1
                        break
                if rest is not None:
                    low = rest[0]
                    cand = (value[0] + low[0], value[1] + low[1], value[2] + low[2], value[3] + low[3],
                            value[4] + low[4])
                    if result is None or cand > result[0]:
                        result = (cand, (vec, rest[1]))
            if child is None and drop is not None:
                rest = lookup(drop, total - 1, r)
                if rest is _MISSING:
                    child = (drop, total - 1, r)
                elif rest is not None and (result is None or rest[0] > result[0]):
                    result = rest
            if child is not None:
                top[4] = i
                top[5] = result
                stack.append(frame(*child))
                continue
            memo[r][state] = result
            stack.pop()
        return memo[root_r][root]

    full = domain.full()
    total = sum(domain.counts)
    table = []
    for r in range(max_groups + 1):
        found = run(full, total, r)
        if found is not None:
            vectors = []
            link = found[1]
            while link is not None:
                vectors.append(link[0])
                link = link[1]
            found = (found[0], tuple(vectors))
        table.append(found)
    return table


def _one_class_table(domain, threshold, max_groups, budget):
    """_domain_table of a domain whose GPUs are all alike: r times its one group, no search.

    (A thousand GPUs behind one switch would otherwise be a thousand states per group count.)
    """
    budget[0] -= max_groups + 1
    if budget[0] < 0:
        raise SearchTooLarge()
    _first, vec, worst, value, _enc = domain.vectors[0]
    table = [(_ZERO, ())]
    for r in range(1, max_groups + 1):
        table.append(None if worst < threshold else (tuple(r * x for x in value), (vec,) * r))
    return table


def _combine(tables, k):
    """Knapsack over domains: exactly k groups in all, best summed value.

    Returns (value, ((domain, vectors), ...)) or None.
    """
    acc = {0: (_ZERO, None)}
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
                    nxt[total] = (cand, ((d, entry[1]), picks))
        acc = nxt
    found = acc.get(k)
    if found is None:
        return None
    picks = []
    link = found[1]
    while link is not None:
        picks.append(link[0])
        link = link[1]
    return found[0], tuple(reversed(picks))


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
    """Choose the groups for one host.

    node, socket: per GPU position (PCI order), hashable labels.
    score: square matrix (list of lists) of link scores, symmetric.
    span: groups may cross sockets (the caller checked rule 1).
    Returns {"groups": [tuple of positions, ...] sorted by first position,
    "objective": tuple, "domains": [[positions], ...], "exhaustive": bool};
    exhaustive is False when the work budget ran out and the groups are
    _fallback_groups'.
    """
    n = len(node)
    if span:
        domains = [list(range(n))] if n else []
    else:
        by_socket = {}
        for gpu in range(n):
            by_socket.setdefault(socket[gpu], []).append(gpu)
        domains = sorted(by_socket.values(), key=lambda members: members[0])
    placeable = [members for members in domains if len(members) >= tp_size]
    max_groups = sum(len(members) // tp_size for members in placeable)
    instances = max_groups // pp_size
    if max_instances is not None:
        instances = min(instances, max_instances)
    k = instances * pp_size
    result = {"groups": [], "objective": _true_objective([], node, socket, score, 0), "domains": domains,
              "exhaustive": True}
    if k == 0:
        return result
    budget = [STATE_BUDGET]
    try:
        groups = _exact_groups(placeable, node, socket, score, tp_size, k, budget)
    except SearchTooLarge:
        groups = _fallback_groups(placeable, node, k, tp_size)
        result["exhaustive"] = False
    result["groups"] = groups
    result["objective"] = _true_objective(groups, node, socket, score, instances)
    return result


def _exact_groups(placeable, node, socket, score, tp_size, k, budget):
    """The optimal groups (sorted), or SearchTooLarge once budget is spent."""
    built = [_Domain(_twin_classes(members, node, socket, score), node, socket, score, tp_size, budget)
             for members in placeable]
    thresholds = sorted(set(v[2] for d in built for v in d.vectors))

    def solve(threshold):
        tables = [_domain_table(d, threshold, tp_size, min(k, sum(d.counts) // tp_size), budget) for d in built]
        combined = _combine(tables, k)
        if combined is None:
            return None
        groups = []
        for d, vectors in combined[1]:
            queues = [list(c) for c in built[d].classes]
            for vec in vectors:
                group = []
                for c, take in vec:
                    group.extend(queues[c][:take])
                    del queues[c][:take]
                groups.append(tuple(sorted(group)))
        groups.sort()
        return combined[0], groups

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
    return best[1]
