# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plan/check_device.py (and the shared rules of contract.check_instance_fields):
the kept plan's device field and CPU instances.

A kept plan written by a real run over a CPU host (mi50_8gpu_nps4 replayed
as one, two ranks per instance) and a GPU host loads; each damage a
tampered file could hold is refused naming the field and the rule."""

from __future__ import annotations

import copy
import json
import os
import re

import pytest

from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host, merge_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES

NAME = "/srv/plan.json"
FLEET = ["cpu-a", "gpu-a"]


def machine(name):
    return facts_from_capture(os.path.join(MACHINES, name, "capture.yml"))


@pytest.fixture(scope="module")
def kept():
    host_vars = {
        "cpu-a": {"gpufleet_device_class": "cpu", "gpufleet_tp_size": 2,
                  "ansible_facts": {"numa_topology": machine("mi50_8gpu_nps4")}},
        "gpu-a": {"gpufleet_tp_size": 4, "ansible_facts": {"numa_topology": machine("mi300x_8gpu_xgmi")}},
    }
    merged = merge_plan(fleet_plan_by_host(host_vars), previous="", replanned=FLEET, fleet_hosts=FLEET)
    return json.loads(plan_artifact.dump_artifact(merged["plan"]))


def cpu_entry(plan):
    return next(i for i in plan["instances"] if i["device"] == "cpu")


def test_a_kept_plan_with_cpu_instances_loads(kept):
    devices = [(i["host"], i["device"]) for i in kept["instances"]]
    assert devices == [("cpu-a", "cpu")] * 4 + [("gpu-a", "amd")] * 2
    assert plan_artifact.load_artifact(plan_artifact.dump_artifact(kept), NAME) == kept
    assert kept["hosts"]["cpu-a"]["options"]["device_class"] == "cpu"


def test_an_entry_without_device_reads_as_nvidia(kept):
    plan = copy.deepcopy(kept)
    gpu = plan["instances"][-1]
    del gpu["device"]
    assert plan_artifact.load_artifact(plan, NAME)["instances"][-1] == gpu
    assert contract.device(gpu) == "nvidia"


def damaged(kept, change):
    plan = copy.deepcopy(kept)
    change(cpu_entry(plan))
    return plan


def _set(path, value):
    def change(entry):
        *parents, last = path
        for key in parents:
            entry = entry[key]
        entry[last] = value
    return change


@pytest.mark.parametrize("change, field, rule", [
    (_set(["device"], "tpu"), "device", "must be one of nvidia, amd, cpu"),
    (_set(["device"], None), "device", "must be one of"),
    (_set(["binding", "ranks", 0, "cpus"], "64-65"), "binding.ranks[0].cpus", "must be CPUs of binding.cpus"),
    (_set(["binding", "ranks", 1, "node"], 3), "binding.ranks[1].node", "must be a node of binding.mems"),
    (_set(["binding", "ranks", 1, "cpus"], "15-16"), "binding.ranks[1].cpus", "must not share CPUs with another rank"),
    (_set(["binding", "ranks", 0, "memory_mb"], "lots"), "binding.ranks[0].memory_mb", "must be an integer"),
    (_set(["binding", "ranks", 0, "memory_mb"], 0), "binding.ranks[0].memory_mb", "must be at least 1 (got 0)"),
    (_set(["binding", "ranks", 0, "gpu"], 0), "binding.ranks[0]", "must be a mapping {node, cpus, memory_mb}"),
    (_set(["binding", "ranks"], []), "binding.ranks", "must hold tp_size (2) ranks, one per NUMA node (got '0 ranks')"),
    (_set(["tp_size"], 3), "binding.ranks", "must hold tp_size (3) ranks"),
    (_set(["pp_size"], 2), "pp_size", "must be 1 on a CPU instance"),
    (_set(["gpu_indices"], [0]), "gpu_indices", "must be [] on a CPU instance"),
    (_set(["numa_nodes"], [0, 2]), "numa_nodes", "must be binding.mems 0,1"),
    (_set(["binding", "mode"], "per_worker"), "binding.mode", "must be process"),
    (lambda e: e["binding"]["ranks"].reverse(), "binding.ranks", "must hold one rank per node of binding.mems 0,1, in node order"),
])
def test_a_damaged_cpu_instance_is_refused(kept, change, field, rule):
    with pytest.raises(ValueError, match=r"^plan file %s: instances\[0\]\.%s: %s" % (NAME, re.escape(field), re.escape(rule))):
        plan_artifact.load_artifact(damaged(kept, change), NAME)


def test_two_cpu_instances_on_one_node_are_refused(kept):
    plan = copy.deepcopy(kept)
    first, second = plan["instances"][0], plan["instances"][1]
    for field in ("numa_nodes", "cpus", "binding"):
        second[field] = copy.deepcopy(first[field])
    with pytest.raises(ValueError, match=r"instances\[1\]: must not share CPU instance's NUMA node 0 with instances\[0\]"):
        plan_artifact.load_artifact(plan, NAME)


def test_a_gpu_instance_with_ranks_is_refused(kept):
    plan = copy.deepcopy(kept)
    plan["instances"][-1]["binding"]["ranks"] = []
    with pytest.raises(ValueError, match=r"instances\[5\]\.binding\.ranks: is a CPU instance's field \(this "
                                         r"instance's device is amd\)"):
        plan_artifact.load_artifact(plan, NAME)


def test_a_cpu_rank_outside_the_hosts_record_is_refused(kept):
    plan = copy.deepcopy(kept)
    entry = cpu_entry(plan)
    entry["binding"]["cpus"] = entry["cpus"] = "0-31,4000"
    entry["binding"]["ranks"][1]["cpus"] = "16-31,4000"
    with pytest.raises(ValueError, match=r"instances\[0\]\.binding\.cpus: must be CPUs this host has \(0-127\)"):
        plan_artifact.load_artifact(plan, NAME)
