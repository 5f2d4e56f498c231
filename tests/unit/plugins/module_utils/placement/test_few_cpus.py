# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""An instance that gets fewer CPUs than GPUs is warned about: recorded
DGX-2 (hwloc's test file keeps 2 CPUs per socket) against an H100 box."""

import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology


def plan(folder, **options):
    facts = topology.facts_from_capture(os.path.join(fixture_paths.MACHINES, folder, "capture.yml"))
    return api.plan_host(facts, folder, **options)


def few(result):
    return [w for w in result["warnings"] if "CPU of its own" in w]


def test_an_eight_gpu_instance_on_one_cpu_is_warned():
    result = plan("dgx2_v100_16gpu_nvswitch", tp_size=8, reserved_cpus_per_socket=1)
    assert few(result) == [
        "the instance on GPUs 0,1,2,3,4,5,6,7 gets 1 CPU for 8 GPUs (CPUs 1): each GPU's worker wants a CPU of its "
        "own (fewer reserved CPUs or smaller instances give it one)",
        "the instance on GPUs 8,9,10,11,12,13,14,15 gets 1 CPU for 8 GPUs (CPUs 25): each GPU's worker wants a CPU "
        "of its own (fewer reserved CPUs or smaller instances give it one)"]


def test_sharing_the_few_cpus_is_warned_per_instance():
    # 4 instances of 2 GPUs per node share its 2 CPUs: 1 CPU each
    assert len(few(plan("dgx2_v100_16gpu_nvswitch", tp_size=2, reserved_cpus_per_socket=0))) == 8
    # one GPU per instance: a CPU each is enough, even shared (the overlap has its own warning)
    assert few(plan("dgx2_v100_16gpu_nvswitch", tp_size=1, reserved_cpus_per_socket=1)) == []


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_full_socket_is_never_warned(tp):
    assert few(plan("h100_sxm_8gpu_nvswitch", tp_size=tp, reserved_cpus_per_socket=1)) == []
