# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""contract.check_binding: a plan instance's binding is checked the one way
by the kept plan's check (plan/check.py) and by the role's
(deploy/vllm/instance.py): the same bad binding is refused by both, with
the same rule, each naming the field where it sits."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import instance as vllm_instance
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact, check
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES

H100 = facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))


def kept_plan():
    fresh = placement.plan_fleet({"gpu-a": H100}, tp_size=4)
    return artifact.merge_plans(fresh, None, ["gpu-a"], ["gpu-a"])["plan"]


@pytest.mark.parametrize("change, field, rule", [
    (lambda b: b.pop("by_node"), "", "lacks by_node (needs cpus, mems, policy, by_node)"),
    (lambda b: b.update(cpus="0-"), ".cpus", "must be a cpulist such as 0-47,96-143"),
    (lambda b: b.update(cpus="9-3"), ".cpus", ""),
    (lambda b: b.update(policy="spread"), ".policy", "must be one of"),
    (lambda b: b.update(by_node="yes"), ".by_node", "must be a boolean"),
    (lambda b: b.update(mode="per_gpu"), ".mode", "must be one of"),
    (lambda b: b.update(mems=[1, 0]), ".mems", "must be a sorted list of distinct NUMA nodes"),
    (lambda b: b.update(mems=[1024]), ".mems[0]", "must be at most 1023"),
], ids=["lacks-field", "cpulist", "reversed-range", "policy", "by_node", "mode", "mems-order", "mems-bound"])
def test_the_kept_plan_and_the_role_refuse_the_same_binding(change, field, rule):
    plan = kept_plan()
    bad = copy.deepcopy(plan)
    change(bad["instances"][0]["binding"])
    with pytest.raises(ValueError) as kept_error:
        check.check_artifact(bad, "kept plan")
    with pytest.raises(ValueError) as role_error:
        vllm_instance.check_instance(0, bad["instances"][0])
    kept_message, role_message = str(kept_error.value), str(role_error.value)
    assert kept_message.startswith("kept plan: instances[0].binding%s: %s" % (field, rule))
    assert role_message.startswith("vllm_instances[0] (vllm-0).binding%s: %s" % (field, rule))
    assert kept_message.split(".binding", 1)[1] == role_message.split(".binding", 1)[1]
    # the good plan passes both
    check.check_artifact(plan, "kept plan")
    vllm_instance.check_instance(0, plan["instances"][0])


def test_check_binding_returns_what_both_callers_read():
    binding = kept_plan()["instances"][0]["binding"]
    checked = contract.check_binding("b", binding, lambda name, value: list(value))
    assert checked == {"cpus": binding["cpus"], "cpu_set": set(range(0, 48)) | set(range(96, 144)),
                       "mems": binding["mems"], "policy": "bind", "mode": binding.get("mode", "process")}
    del binding["mode"]  # a plan kept from before per-worker binding binds by process
    assert contract.check_binding("b", binding, lambda name, value: value)["mode"] == "process"
    with pytest.raises(ValueError, match=r"^b: must be a mapping"):
        contract.check_binding("b", [binding], lambda name, value: value)
