# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The search's parts inside one domain (placement/search.py says the method).

A domain is a socket, or the whole host when groups span. Here: its GPUs
merged into classes of twins, every candidate group as a sparse count
vector over the classes, the packed state of what is left, and the table
of the best choice of exactly r groups per r (a memoised search on an
explicit stack). All of it counts its work against the host's budget and
raises SearchTooLarge when it is spent.
"""

from __future__ import annotations

from typing import NamedTuple

# Score of the "link" inside a one-GPU group: there is none, and it must not
# lower the min over groups (all groups have tp_size GPUs, so it is constant).
SINGLE_GPU_SCORE = 1000

# The additive part of the objective (search.py) of one group or a set of
# groups, summed over its groups: (inside one node, -(sockets - 1),
# -(nodes - 1), worst link, sum of the pair scores). Compared and added as a
# whole: a vector, never read by field.
ZERO = (0, 0, 0, 0, 0)


def add(a, b):
    """The sum of two objective vectors."""
    return tuple(x + y for x, y in zip(a, b))


def twin_classes(members, node, socket, score):
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


def group_vectors(counts, tp_size):
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


def count_vectors(counts, tp_size, limit):
    """How many groups group_vectors would produce (bounded compositions), counted up to limit + 1."""
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


class Budget(object):
    """The work one host's exact search may still do (search.STATE_BUDGET at the start)."""

    __slots__ = ("left",)

    def __init__(self, left):
        self.left = left

    def spend(self, amount):
        self.left -= amount
        if self.left < 0:
            raise SearchTooLarge()


class Candidate(NamedTuple):
    """One candidate group of a domain."""

    first: int  # its lowest class
    vector: tuple  # ((class, count), ...), classes ascending
    worst: int  # its worst link score
    value: tuple  # its objective vector (ZERO's layout)
    packed: int  # vector packed as Domain._layout says


class Domain(object):
    """One domain: its classes and every candidate group as a Candidate."""

    def __init__(self, classes, node, socket, score, tp_size, budget):
        self.classes = classes
        self.node_of = node
        self.counts = tuple(len(c) for c in classes)
        self.vectors = []
        self._layout()
        if count_vectors(self.counts, tp_size, VECTOR_BUDGET) > VECTOR_BUDGET:
            raise SearchTooLarge()
        reps = [c[0] for c in classes]
        for vec in group_vectors(self.counts, tp_size):
            # each group costs its pairs of classes
            budget.spend(1 + len(vec) * (len(vec) - 1) // 2)
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
            ((first, _count), *_rest) = vec
            self.vectors.append(Candidate(first, vec, worst, value, self.encode(vec)))

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


# What a candidate group that fits (a lookup, a sum, a comparison) and a
# search state (a frame on the stack, a memo entry) cost against a
# candidate that does not fit (one AND).
FIT_WEIGHT = 8
STATE_WEIGHT = 40

_MISSING = object()


class Best(NamedTuple):
    """The best choice of some groups: its objective vector and the groups' vectors."""

    value: tuple
    vectors: tuple


def domain_table(domain, threshold, tp_size, max_groups, budget):
    """table[r]: the Best choice of exactly r groups in the domain, or None where none exists.

    Groups whose worst link is below threshold are forbidden.
    """
    if len(domain.counts) == 1:
        return _one_class_table(domain, threshold, max_groups, budget)
    return _TableSearch(domain, threshold, tp_size, max_groups, budget).table()


class _Frame(object):
    """One state on the search's stack: what is left, the candidates that fit, how far it got."""

    __slots__ = ("state", "total", "r", "candidates", "next", "best_value", "best_link", "drop")

    def __init__(self, state, total, r, candidates, drop):
        self.state, self.total, self.r = state, total, r
        self.candidates = candidates  # the Candidates that fit
        self.next = 0  # the next candidate to try
        self.best_value = None  # the best objective vector so far (None: no choice yet)
        self.best_link = None  # its groups: (vector, rest's link), None at the end
        self.drop = drop  # the state after the lowest class loses one GPU to "unused", or None


class _TableSearch(object):
    """A memoised search over the packed state of one domain under one threshold.

    The lowest class still present either gives GPUs to a group (candidates
    in order, largest first) or loses one GPU to "unused" (last); on ties
    the first found is kept. Run with an explicit stack: its depth grows
    with the GPUs of the domain. Results are linked (vector, rest) pairs
    until the end.
    """

    def __init__(self, domain, threshold, tp_size, max_groups, budget):
        self.domain = domain
        self.tp_size = tp_size
        self.max_groups = max_groups
        self.budget = budget
        self.by_first = {}
        self.exact = {}  # the packed state of a group -> its (value, link): the last group takes what is left
        for cand in domain.vectors:
            if cand.worst >= threshold:
                self.by_first.setdefault(cand.first, []).append(cand)
                self.exact[cand.packed] = (cand.value, (cand.vector, None))
        self.memo = [{} for _r in range(max_groups + 1)]
        self.done = (ZERO, None)

    def lookup(self, state, total, r):
        if r == 0:
            return self.done
        if r == 1 and total == self.tp_size:
            # the last group must take exactly what is left
            return self.exact.get(state & ~self.domain.guards)
        return self.memo[r].get(state, _MISSING)

    def frame(self, state, total, r):
        tp_size = self.tp_size
        if total < r * tp_size:
            return _Frame(state, total, r, (), None)
        guards = self.domain.guards
        bits = state & ~guards
        first = self.domain.field_of_bit[(bits & -bits).bit_length() - 1]
        candidates = self.by_first.get(first, ())
        # a group that takes more GPUs of some class than are left borrows a guard bit
        fitting = [c for c in candidates if (state - c.packed) & guards == guards]
        self.budget.spend(len(candidates) + STATE_WEIGHT + FIT_WEIGHT * len(fitting))
        drop = state - (1 << self.domain.offsets[first]) if total - 1 >= r * tp_size else None
        return _Frame(state, total, r, fitting, drop)

    def run(self, root, total, root_r):
        """The best (value, link) of exactly root_r groups from state root, or None."""
        found = self.lookup(root, total, root_r)
        if found is not _MISSING:
            return found
        memo, exact, done, guards, tp_size = self.memo, self.exact, self.done, self.domain.guards, self.tp_size
        stack = [self.frame(root, total, root_r)]
        while stack:
            top = stack[-1]
            state, r, candidates, i = top.state, top.r, top.candidates, top.next
            best_value, best_link = top.best_value, top.best_link
            child = None
            rest_total = top.total - tp_size
            if r == 1:
                rests = None  # every rest is the empty choice
            elif r == 2 and rest_total == tp_size:
                rests = exact
            else:
                rests = memo[r - 1]
            count = len(candidates)
            while i < count:
                _first, vec, _worst, value, enc = candidates[i]
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
                    low, link = rest
                    cand = (value[0] + low[0], value[1] + low[1], value[2] + low[2], value[3] + low[3],
                            value[4] + low[4])  # add(value, low), inlined: the innermost loop
                    if best_value is None or cand > best_value:
                        best_value, best_link = cand, (vec, link)
            if child is None and top.drop is not None:
                rest = self.lookup(top.drop, top.total - 1, r)
                if rest is _MISSING:
                    child = (top.drop, top.total - 1, r)
                elif rest is not None:
                    value, link = rest
                    if best_value is None or value > best_value:
                        best_value, best_link = value, link
            if child is not None:
                top.next = i
                top.best_value, top.best_link = best_value, best_link
                stack.append(self.frame(*child))
                continue
            memo[r][state] = None if best_value is None else (best_value, best_link)
            stack.pop()
        return memo[root_r][root]

    def table(self):
        full = self.domain.full()
        total = sum(self.domain.counts)
        out = []
        for r in range(self.max_groups + 1):
            found = self.run(full, total, r)
            if found is not None:
                value, link = found
                vectors = []
                while link is not None:
                    # a link is a (vector, next link) pair; pylint infers the chain's end (None) only
                    vec, link = link  # pylint: disable=unpacking-non-sequence
                    vectors.append(vec)
                found = Best(value, tuple(vectors))
            out.append(found)
        return out


def _one_class_table(domain, threshold, max_groups, budget):
    """domain_table of a domain whose GPUs are all alike: r times its one group, no search.

    (A thousand GPUs behind one switch would otherwise be a thousand states per group count.)
    """
    budget.spend(max_groups + 1)
    cand = domain.vectors[0]
    table = [Best(ZERO, ())]
    for r in range(1, max_groups + 1):
        table.append(None if cand.worst < threshold else Best(tuple(r * x for x in cand.value), (cand.vector,) * r))
    return table
