# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Tests of summary: the facts as lines for a human."""

from __future__ import annotations

import os

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.summary import summary

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
GH200 = os.path.join(MACHINES, "gh200_grace_hopper", "capture.yml")


def test_summary_names_gpu_memory_nodes_and_usable_cpus():
    lines = summary(facts_from_capture(GH200))
    assert "NUMA node 1: CPUs none (a GPU's memory); memory 97280 MB" in lines
    assert "NUMA node 2: CPUs none (memory only); memory 0 MB" in lines
    lines = summary(facts_from_capture(os.path.join(MACHINES, "mi300x_8gpu_lxc_cpuset",
                                                    "capture.yml")))
    assert "NUMA node 0 (socket 0): CPUs 0-55,112-167 (usable by services: 0-14,112-126); memory unknown" in lines
