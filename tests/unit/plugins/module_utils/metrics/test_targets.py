# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""metrics/targets.py over plans the planner makes from recorded machines:
one file_sd target per API-serving instance, at the address the gateway
reaches it, labelled field by field with the plan's placement; gateways'
exporters at the address Prometheus can reach; errors name the field."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import targets
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES

H100 = facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))  # nvidia-smi matrix only
DGX2 = facts_from_capture(os.path.join(MACHINES, "dgx2_v100_16gpu_nvswitch", "capture.yml"))  # sysfs: bus ids, sockets
CPU = facts_from_capture(os.path.join(MACHINES, "mi50_8gpu_nps4", "capture.yml"))
ADDRESSES = {"gpu-a": "10.0.0.11", "gpu-b": "fd00::12", "cpu-a": "10.0.0.13"}


def served(plan):
    for instance in plan["instances"]:
        instance.update(served_model_name="llama", model="meta-llama/Llama-3.1-8B")
    return plan


def test_one_target_per_instance_labelled_as_planned():
    plan = served(placement.plan_fleet({"gpu-a": copy.deepcopy(DGX2), "gpu-b": copy.deepcopy(DGX2)}, tp_size=8))
    groups = targets.vllm_targets(plan, ADDRESSES)
    assert [g["targets"] for g in groups] == [["10.0.0.11:8000"], ["10.0.0.11:8001"], ["[fd00::12]:8000"],
                                              ["[fd00::12]:8001"]]
    for group, instance in zip(groups, plan["instances"]):
        labels = group["labels"]
        assert list(labels) == list(targets.VLLM_LABELS)
        assert labels["host"] == instance["host"]
        assert labels["instance"] == "%s/%s" % (instance["host"], instance["name"])
        assert labels["model"] == "llama"
        assert labels["device"] == "nvidia"
        assert labels["gpus"] == ",".join(str(i) for i in instance["gpu_indices"])
        assert labels["gpu_ids"] == ",".join(g["id"] for g in instance["gpus"])
        assert labels["numa_nodes"] == ",".join(str(n) for n in instance["numa_nodes"])
        assert labels["socket"] == ",".join(str(s) for s in instance["sockets"])
        assert labels["binding"] == instance["binding"]["mode"]
        assert labels["memory_policy"] == instance["binding"]["policy"]
    # The recorded DGX-2: GPUs 0-7 on node 0 (socket 0), 8-15 on node 1 (socket 1).
    assert [(g["labels"]["gpus"], g["labels"]["gpu_ids"][:12], g["labels"]["numa_nodes"], g["labels"]["socket"])
            for g in groups[:2]] == [("0,1,2,3,4,5,6,7", "0000:34:00.0", "0", "0"),
                                     ("8,9,10,11,12,13,14,15", "0000:b7:00.0", "1", "1")]
    assert all(isinstance(v, str) for g in groups for v in g["labels"].values())


def test_unknown_sockets_and_bus_ids_as_the_facts_say():
    """A capture of the nvidia-smi matrix alone: no socket, GPUs known as GPU<index>."""
    plan = served(placement.plan_fleet({"gpu-a": copy.deepcopy(H100)}, tp_size=4))
    assert [(g["labels"]["gpu_ids"], g["labels"]["socket"]) for g in targets.vllm_targets(plan, ADDRESSES)] == [
        ("GPU0,GPU1,GPU2,GPU3", ""), ("GPU4,GPU5,GPU6,GPU7", "")]


def test_multi_node_instances_are_scraped_at_their_head():
    fleet = dict((host, copy.deepcopy(H100)) for host in ("gpu-a", "gpu-b"))
    plan = served(placement.plan_fleet(fleet, tp_size=4, pp_size=4, nodes_per_instance=2))
    groups = targets.vllm_targets(plan, ADDRESSES)
    assert [g["labels"]["instance"] for g in groups] == ["gpu-a/vllm-0"]


def test_cpu_instances_have_no_gpus():
    plan = served(placement.plan_fleet({"cpu-a": copy.deepcopy(CPU)}, tp_size=1, device_class="cpu"))
    labels = [g["labels"] for g in targets.vllm_targets(plan, ADDRESSES)]
    assert labels and all(l["device"] == "cpu" and l["gpus"] == "" and l["gpu_ids"] == "" for l in labels)
    assert [l["numa_nodes"] for l in labels] == [str(i["numa_nodes"][0]) for i in plan["instances"]]


def test_a_host_without_address_is_named():
    plan = served(placement.plan_fleet({"gpu-c": copy.deepcopy(H100)}, tp_size=4))
    with pytest.raises(ValueError, match="host gpu-c has no address"):
        targets.vllm_targets(plan, ADDRESSES)


@pytest.mark.parametrize("entry, expected", [
    ({"listen": "127.0.0.1", "port": 8405, "reach": "10.0.0.1"}, ["127.0.0.1:8405"]),
    ({"listen": "0.0.0.0", "port": 8405, "reach": "10.0.0.1"}, ["10.0.0.1:8405"]),
    ({"listen": "::", "port": 9000, "reach": "fd00::1"}, ["[fd00::1]:9000"]),
    ({"listen": "10.1.1.1", "port": 8405, "reach": "gw.example.com"}, ["10.1.1.1:8405"]),
])
def test_gateway_exporter_target(entry, expected):
    labels = {"host": "gw", "instance": "gw/gateway"}
    assert targets.gateway_targets({"gw": entry}) == [{"targets": expected, "labels": labels}]


def test_gateway_exporter_off_has_no_target():
    assert targets.gateway_targets({"gw": {"listen": "127.0.0.1", "port": 0, "reach": "gw"}}) == []


@pytest.mark.parametrize("entry, message", [
    ({"listen": "127.0.0.1", "port": "8405x", "reach": "gw"}, "gateway gw gateway_metrics_port"),
    ({"listen": "0.0.0.0", "port": 8405, "reach": ""}, r"gateway gw address \(ansible_host\)"),
    ({"listen": "::", "port": 8405, "reach": "0.0.0.0"},
     r"^gateway gw address \(ansible_host\): must be an address Prometheus can connect to, not the wildcard 0\.0\.0\.0"),
    ({"listen": "not an address", "port": 8405, "reach": "gw"}, "gateway gw gateway_metrics_address"),
    ("8405", r"expects \{listen, port, reach\}"),
])
def test_gateway_exporter_errors_name_the_field(entry, message):
    with pytest.raises(ValueError, match=message):
        targets.gateway_targets({"gw": entry})
