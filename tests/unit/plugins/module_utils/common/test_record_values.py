# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""common/record_values.py: the kept plan's value checks name the field and the rule."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.common import record_values


def test_numa_nodes_sorted_distinct_and_in_range():
    assert record_values.nodes("mems", [0, 3]) == [0, 3]
    with pytest.raises(ValueError, match=r"^mems: must be a sorted list of distinct NUMA nodes \(got \[1, 0\]\)"):
        record_values.nodes("mems", [1, 0])
    with pytest.raises(ValueError, match=r"^mems\[0\]: must be at most 1023"):
        record_values.nodes("mems", [4095])
    with pytest.raises(ValueError, match=r"^mems: must hold at least 1 entries"):
        record_values.nodes("mems", [], minimum=1)


def test_integers_are_json_integers():
    for bad in (True, "3", 3.0):
        with pytest.raises(ValueError, match=r"^n: must be an integer"):
            record_values.integer("n", bad, 0, 10)
    assert record_values.index("i", None) is None and record_values.port("p", 8000) == 8000


def test_cpulists_and_texts():
    assert record_values.cpus("cpus", "0-2,8") == {0, 1, 2, 8}
    assert record_values.cpus("cpus", "", allow_empty=True) == set()
    with pytest.raises(ValueError, match=r"^cpus: must be a cpulist"):
        record_values.cpus("cpus", "0-2;8")
    with pytest.raises(ValueError, match=r"^reason: must be at most 4096 characters"):
        record_values.short_text("reason", "x" * 4097)
    with pytest.raises(ValueError, match=r"^h: must be a host of the plan's hosts"):
        record_values.host("h", "gpu-z", {"gpu-a": {}})
