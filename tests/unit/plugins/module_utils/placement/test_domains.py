# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/domains.py: twin classes and candidate groups against their definitions."""

from __future__ import annotations

import itertools
import random

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import domains as placement_domains


# ---------------------------------------------------------------- the search's parts against their definitions


def _twins_by_definition(members, node, socket, score):
    classes = []
    for gpu in members:
        for cls in classes:
            rep = cls[0]
            if node[rep] == node[gpu] and socket[rep] == socket[gpu] and all(
                    score[rep][x] == score[gpu][x] for x in range(len(score)) if x not in (rep, gpu)):
                cls.append(gpu)
                break
        else:
            classes.append([gpu])
    return classes


def test_twin_classes_match_the_pairwise_definition():
    rng = random.Random(11)
    for _case in range(1500):
        n = rng.randint(1, 14)
        values = rng.sample([1, 2, 3, 5, 8, -1], rng.randint(1, 3))
        score = [[0] * n for _row in range(n)]
        for i, j in itertools.combinations(range(n), 2):
            score[i][j] = score[j][i] = values[(i // 2 != j // 2) % len(values)] if rng.random() < 0.5 \
                else rng.choice(values)
        node = [rng.randint(0, 1) for _gpu in range(n)]
        sock = [rng.choice([0, ("node", 0)]) for _gpu in range(n)]
        members = sorted(rng.sample(range(n), rng.randint(1, n)))
        assert placement_domains.twin_classes(members, node, sock, score) == _twins_by_definition(
            members, node, sock, score)


def test_group_vectors_are_every_bounded_composition_largest_first():
    rng = random.Random(5)
    for _case in range(1500):
        counts = [rng.randint(1, 4) for _class in range(rng.randint(1, 7))]
        tp = rng.randint(1, 9)
        dense = sorted((v for v in itertools.product(*(range(c + 1) for c in counts)) if sum(v) == tp), reverse=True)
        got = [tuple(dict(vec).get(c, 0) for c in range(len(counts))) for vec in placement_domains.group_vectors(counts, tp)]
        assert got == dense
        assert placement_domains.count_vectors(counts, tp, 10 ** 9) == len(dense)


def test_group_vectors_of_a_thousand_classes_need_no_recursion():
    assert len(placement_domains.group_vectors([1] * 1000, 1)) == 1000
    assert placement_domains.group_vectors([1] * 1000, 1000) == [tuple((c, 1) for c in range(1000))]
