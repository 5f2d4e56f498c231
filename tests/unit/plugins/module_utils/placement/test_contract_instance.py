# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""contract.check_instance_fields: a plan instance's own fields are checked
the one way by the kept plan's check (plan/check.py) and by role vllm's
(deploy/vllm/instance.py). Each bad instance below, inside a kept plan a
real run writes (a one-host GPU instance, a two-host one, a CPU one), is
refused by both with the same field, rule and value; the good plan passes
both."""

from __future__ import annotations

import copy
import json
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host, merge_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import instance as vllm_instance
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact, check
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES

FLEET = ["cpu-a", "gpu-a", "gpu-m1", "gpu-m2"]


def machine(name):
    return facts_from_capture(os.path.join(MACHINES, name, "capture.yml"))


@pytest.fixture(scope="module")
def kept():
    """gpu-a: TP 4 on an H100 host; gpu-m1 and gpu-m2: one TP 4 x PP 2
    instance over both; cpu-a: CPU instances of two ranks."""
    h100 = machine("h100_sxm_8gpu_nvswitch")
    pair = {"gpufleet_tp_size": 4, "gpufleet_pp_size": 2, "gpufleet_nodes_per_instance": 2}
    host_vars = {
        "cpu-a": {"gpufleet_device_class": "cpu", "gpufleet_tp_size": 2,
                  "ansible_facts": {"numa_topology": machine("mi50_8gpu_nps4")}},
        "gpu-a": {"gpufleet_tp_size": 4, "ansible_facts": {"numa_topology": h100}},
        "gpu-m1": dict(pair, ansible_facts={"numa_topology": h100}),
        "gpu-m2": dict(pair, ansible_facts={"numa_topology": h100}),
    }
    merged = merge_plan(fleet_plan_by_host(host_vars), previous="", replanned=FLEET, fleet_hosts=FLEET)
    return json.loads(artifact.dump_artifact(merged["plan"]))


def at(plan, host):
    """The index of HOST's first instance entry."""
    return next(i for i, entry in enumerate(plan["instances"]) if entry["host"] == host)


def _set(*path_and_value):
    *path, last, value = path_and_value

    def change(entry):
        for key in path:
            entry = entry[key]
        entry[last] = value
    return change


def _pop(*path):
    def change(entry):
        for key in path[:-1]:
            entry = entry[key]
        del entry[path[-1]]
    return change


def _multinode_hosts(entry):
    entry["multinode"].update(nnodes=3, hosts=entry["multinode"]["hosts"] + ["gpu-c"])


MULTINODE = {"nnodes": 2, "node_rank": 0, "head": "gpu-a", "hosts": ["gpu-a", "gpu-b"], "master_port": 29501}
# (host, change, field, rule): the same refusal from both checks.
BAD = [
    ("gpu-a", _pop("binding"), "", "lacks binding (fleet_plan instances carry them; docs/plan.md)"),
    ("gpu-a", _set("name", "vllm 0"), ".name", "must be [A-Za-z0-9_.-], starting with a letter or digit"),
    ("gpu-a", _set("host", "all"), ".host", "must be a host, not Ansible's group 'all'"),
    ("gpu-a", _set("device", "tpu"), ".device", "must be one of nvidia, amd, cpu"),
    ("gpu-a", _set("tp_size", "4"), ".tp_size", "must be an integer (got '4')"),
    ("gpu-a", _set("tp_size", True), ".tp_size", "must be an integer (got True)"),
    ("gpu-a", _set("tp_size", 2048), ".tp_size", "must be at most 1024"),
    ("gpu-a", _set("pp_size", 0), ".pp_size", "must be at least 1"),
    ("gpu-a", _set("gpu_indices", [0]), ".gpu_indices", "must list tp_size * pp_size = 4 distinct GPUs "
     "(got 1 for tp 4, pp 1) (got [0])"),
    ("gpu-a", _set("gpu_indices", [0, 0, 1, 2]), ".gpu_indices", "must list tp_size * pp_size = 4 distinct GPUs "
     "(got 3 for tp 4, pp 1)"),
    ("gpu-a", _set("gpu_indices", [0, 1, 2, 4096]), ".gpu_indices[3]", "must be at most 4095"),
    ("gpu-a", _set("gpu_indices", "0,1,2,3"), ".gpu_indices", "must be a list"),
    ("gpu-a", _set("binding", "mems", [4095]), ".binding.mems[0]", "must be at most 1023 (got 4095)"),
    ("gpu-a", _set("binding", "mems", []), ".binding.mems", "must hold at least 1 entries"),
    ("gpu-a", _set("binding", "ranks", []), ".binding.ranks", "is a CPU instance's field (this instance's device "
     "is nvidia)"),
    ("gpu-a", _set("port", 0), ".port", "must be at least 1 (got 0)"),
    ("gpu-a", _set("dist_port", "29000"), ".dist_port", "must be an integer"),
    ("gpu-a", _set("multinode", MULTINODE), ".multinode.nnodes", "must divide pp_size 1 (each host runs "
     "pp_size / nnodes stages) (got 2)"),
    ("gpu-m1", _set("multinode", "nnodes", 1), ".multinode.nnodes", "must be at least 2 (got 1)"),
    ("gpu-m1", _pop("multinode", "master_port"), ".multinode", "lacks master_port (fleet_plan's multi-node "
     "instances carry nnodes, node_rank, head, hosts, master_port)"),
    ("gpu-m1", _set("multinode", "hosts", ["gpu-m1", "gpu-m1"]), ".multinode.hosts", "must name nnodes (2) "
     "distinct hosts in rank order"),
    ("gpu-m1", _set("multinode", "hosts", ["gpu-m1", "all"]), ".multinode.hosts[1]", "must be a host, not "
     "Ansible's group 'all'"),
    ("gpu-m1", _set("multinode", "node_rank", 1), ".multinode.node_rank", "must be this entry's host's place "
     "in hosts (gpu-m1 is rank 0) (got 1)"),
    ("gpu-m2", _set("multinode", "head", "gpu-m2"), ".multinode.head", "must be the first of hosts (gpu-m1)"),
    ("gpu-m2", _multinode_hosts, ".multinode.nnodes", "must divide pp_size 2"),
    ("gpu-m2", _set("multinode", "master_port", 70000), ".multinode.master_port", "must be at most 65535"),
    ("gpu-m2", _set("multinode", "nics", [{"interfaces": "ib0"}]), ".multinode.nics[0].interfaces",
     "must be a list"),
    ("gpu-m2", _set("gpu_indices", [0, 1, 2, 3, 4, 5, 6, 7]), ".gpu_indices", "must list tp_size * pp_size / "
     "multinode.nnodes = 4 distinct GPUs (got 8 for tp 4, pp 2)"),
    ("cpu-a", _set("pp_size", 2), ".pp_size", "must be 1 on a CPU instance (device cpu: tensor parallel over "
     "ranks only) (got 2)"),
    ("cpu-a", _set("multinode", MULTINODE), ".multinode", "must be absent on a CPU instance (device cpu never "
     "spans hosts)"),
    ("cpu-a", _set("gpu_indices", [0]), ".gpu_indices", "must be [] on a CPU instance (device cpu) (got [0])"),
    ("cpu-a", _set("tp_size", 3), ".binding.ranks", "must hold tp_size (3) ranks, one per NUMA node "
     "(got '2 ranks')"),
    ("cpu-a", _set("binding", "mode", "per_worker"), ".binding.mode", "must be process, without workers, on a "
     "CPU instance (its ranks are bound by VLLM_CPU_OMP_THREADS_BIND) (got 'per_worker')"),
    ("cpu-a", _set("binding", "workers", [{"gpu_index": 0, "node": 0, "cpus": "0"}]), ".binding.mode",
     "must be process, without workers, on a CPU instance"),
    ("cpu-a", _set("binding", "ranks", 1, "node", 3), ".binding.ranks[1].node", "must be a node of "
     "binding.mems (0,1) (got 3)"),
    ("cpu-a", _set("binding", "ranks", 0, "cpus", "64-65"), ".binding.ranks[0].cpus", "must be CPUs of "
     "binding.cpus"),
    ("cpu-a", _set("binding", "ranks", 1, "cpus", "15-16"), ".binding.ranks[1].cpus", "must not share CPUs "
     "with another rank"),
    ("cpu-a", _pop("binding", "ranks", 0, "memory_mb"), ".binding.ranks[0]", "lacks memory_mb (memory_mb: the "
     "node's memory in MB, null when unknown)"),
    ("cpu-a", _set("binding", "ranks", 0, "gpu", 0), ".binding.ranks[0]", "must be a mapping {node, cpus, "
     "memory_mb}"),
    ("cpu-a", _set("binding", "ranks", 0, "memory_mb", 0), ".binding.ranks[0].memory_mb", "must be at least 1"),
    ("cpu-a", lambda e: e["binding"]["ranks"].reverse(), ".binding.ranks", "must hold one rank per node of "
     "binding.mems 0,1, in node order (got [1, 0])"),
]


def _id(case):
    host, dummy, field, rule = case
    return "%s%s-%s" % (host, field, rule.split(" (")[0].replace(" ", "_"))


@pytest.mark.parametrize("host, change, field, rule", BAD, ids=[_id(case) for case in BAD])
def test_the_kept_plan_and_the_role_refuse_the_same_instance(kept, host, change, field, rule):
    index = at(kept, host)
    bad = copy.deepcopy(kept)
    entry = bad["instances"][index]
    change(entry)
    with pytest.raises(ValueError) as kept_error:
        check.check_artifact(bad, "kept plan")
    with pytest.raises(ValueError) as role_error:
        vllm_instance.check_instance(0, entry)
    kept_where = "kept plan: instances[%d]" % index
    role_where = "vllm_instances[0]" if field == ".name" else "vllm_instances[0] (%s)" % entry["name"]
    kept_message, role_message = str(kept_error.value), str(role_error.value)
    assert kept_message.startswith(kept_where + field + ": " + rule), kept_message
    assert role_message.startswith(role_where + field + ": " + rule), role_message
    assert kept_message[len(kept_where):] == role_message[len(role_where):]


def test_the_good_plan_passes_both(kept):
    assert check.check_artifact(copy.deepcopy(kept), "kept plan") == kept
    for entry in kept["instances"]:
        unit = vllm_instance.check_instance(0, entry)
        fields = contract.check_instance_fields("e", entry)
        for key in ("name", "device", "tp_size", "pp_size", "gpu_indices", "multinode", "ranks", "port", "dist_port"):
            assert unit[key] == fields[key], key


def test_the_fields_come_back_read(kept):
    head = kept["instances"][at(kept, "gpu-m1")]
    fields = contract.check_instance_fields("e", head, hosts=kept["hosts"])
    assert fields["host"] == "gpu-m1" and fields["device"] == "nvidia" and (fields["tp_size"], fields["pp_size"]) == (4, 2)
    assert fields["multinode"] == {"nnodes": 2, "node_rank": 0, "head": "gpu-m1", "hosts": ["gpu-m1", "gpu-m2"],
                                   "master_port": head["multinode"]["master_port"]}
    assert fields["gpu_indices"] == head["gpu_indices"] and len(head["gpu_indices"]) == 4 and fields["ranks"] == []
    assert fields["binding"] == dict(contract.check_binding("b", head["binding"], lambda name, value: value),
                                     by_node=head["binding"]["by_node"])
    cpu = kept["instances"][at(kept, "cpu-a")]
    fields = contract.check_instance_fields("e", cpu)
    assert fields["device"] == "cpu" and fields["gpu_indices"] == [] and fields["multinode"] is None
    assert fields["ranks"] == cpu["binding"]["ranks"] and [r["node"] for r in fields["ranks"]] == cpu["binding"]["mems"]


def test_what_differs_by_caller(kept):
    entry = copy.deepcopy(kept["instances"][at(kept, "gpu-a")])
    # The role needs no host or gpus (its README: the unit's fields); the kept plan does.
    role_only = dict((key, entry[key]) for key in contract.UNIT_FIELDS)
    assert contract.check_instance_fields("e", role_only, contract.UNIT_FIELDS)["host"] is None
    with pytest.raises(ValueError, match=r"^e: lacks host, gpus \(fleet_plan instances carry them"):
        contract.check_instance_fields("e", role_only)
    # The host must be one of the plan's where the caller gives them.
    with pytest.raises(ValueError, match=r"^e\.host: must be a host of the plan's hosts \(got 'gpu-a'\)"):
        contract.check_instance_fields("e", entry, hosts={"gpu-b": {}})
    # An unknown GPU index (an AMD GPU no source numbered) is the kept plan's to hold, never a unit's.
    entry["gpu_indices"][1] = None
    assert contract.check_instance_fields("e", entry, unknown_index=True)["gpu_indices"][1] is None
    with pytest.raises(ValueError, match=r"^e\.gpu_indices\[1\]: must be an integer \(got None\)"):
        contract.check_instance_fields("e", entry)
    entry["gpu_indices"][0] = None  # unknown indices count as distinct GPUs
    assert contract.check_instance_fields("e", entry, unknown_index=True)["gpu_indices"][:2] == [None, None]
    with pytest.raises(ValueError, match=r"^e: must be a plan instance \(a mapping\) \(got \[\]\)"):
        contract.check_instance_fields("e", [])
