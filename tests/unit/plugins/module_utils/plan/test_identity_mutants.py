# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plan/identity at its edges: MEMORY_DRIFT's boundary on both sides and
memory known on one side only (scripts/mutation.py plan/identity found
these untested)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import identity


@pytest.mark.parametrize("recorded, today, stands", [
    (1000, 1000, True), (1100, 1000, True), (900, 1000, True),     # within 10% of today's, both ways
    (1101, 1000, False), (899, 1000, False),                       # one MB past it
    (2000, 1000, False), (0, 1000, False), (1000, 0, False),
])
def test_a_rank_stands_while_its_node_is_within_memory_drift(recorded, today, stands):
    assert identity.MEMORY_DRIFT == 0.10
    assert identity.same_memory(recorded, today) is stands


def test_memory_known_on_one_side_only_does_not_stand():
    assert identity.same_memory(None, 1000) is False
    assert identity.same_memory(1000, None) is False
    assert identity.same_memory(None, None) is True
    assert identity.same_memory(0, None) is False and identity.same_memory(None, 0) is False
