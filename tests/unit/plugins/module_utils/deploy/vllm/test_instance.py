# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/instance.py: this host's plan instances, checked; every probe
names vllm_instances[i] and the field. (Multi-node instances:
test_instance_multinode.py.)
"""

import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import INSTANCE, MACHINES, VARIABLES, with_binding


def test_gpu_without_a_device_index_is_refused():
    # amd_4gpu_pcie_4numa's capture has no device indices: no CUDA_VISIBLE_DEVICES can be written.
    facts = topology.facts_from_capture(os.path.join(MACHINES, "amd_4gpu_pcie_4numa", "capture.yml"))
    plan = placement.plan_fleet({"amd": facts}, tp_size=1)
    with pytest.raises(ValueError, match=r"^vllm_instances\[0\] \(vllm-0\)\.gpu_indices\[0\]: must be an integer"):
        host_state.host_units(plan["instances"], VARIABLES)


BAD_INSTANCES = [
    ([{k: v for k, v in INSTANCE.items() if k != "binding"}], "vllm_instances[0] (vllm-0): lacks binding"),
    ([dict(INSTANCE, name="vllm 0")], "vllm_instances[0].name: must be [A-Za-z0-9_.-]"),
    ([dict(INSTANCE, name="-vllm")], "vllm_instances[0].name: must be [A-Za-z0-9_.-]"),
    ([dict(INSTANCE, tp_size=4)], "vllm_instances[0] (vllm-0).gpu_indices: must list tp_size * pp_size = 4"),
    ([dict(INSTANCE, gpu_indices=[0, 0])], "vllm_instances[0] (vllm-0).gpu_indices: must list"),
    ([with_binding(cpus="0-7\n")], "vllm_instances[0] (vllm-0).binding.cpus: must not contain control"),
    ([with_binding(cpus="7-0")], "vllm_instances[0] (vllm-0).binding.cpus: bad range"),
    ([with_binding(cpus="0-7 --all")], "vllm_instances[0] (vllm-0).binding.cpus: must be a cpulist"),
    ([with_binding(mems=[])], "vllm_instances[0] (vllm-0).binding.mems: must hold at least 1 entries (got [])"),
    ([with_binding(policy="preferred")], "vllm_instances[0] (vllm-0).binding.policy: must be one of bind"),
    ([with_binding(by_node="yes")], "vllm_instances[0] (vllm-0).binding.by_node: must be a boolean"),
    ([dict(INSTANCE, port=70000)], "vllm_instances[0] (vllm-0).port: must be at most 65535"),
    ([INSTANCE, dict(INSTANCE, name="vllm-1", dist_port=29100)], "vllm_instances: vllm-0 and vllm-1 collide on port"),
    ([INSTANCE, dict(INSTANCE, port=8001, dist_port=29100)], "vllm_instances: vllm-0 and vllm-0 collide on name"),
    ([INSTANCE, dict(INSTANCE, name="vllm-1", port=29000, dist_port=29100)], "vllm_instances: vllm-0 and vllm-1 collide on port 29000"),
    ("vllm-0", "vllm_instances: must be a list"),
]


@pytest.mark.parametrize("instances,message", BAD_INSTANCES, ids=[str(i) for i in range(len(BAD_INSTANCES))])
def test_bad_instance_is_refused_naming_the_field(instances, message):
    with pytest.raises(ValueError) as info:
        host_state.host_units(instances, VARIABLES)
    assert str(info.value).startswith(message), str(info.value)
