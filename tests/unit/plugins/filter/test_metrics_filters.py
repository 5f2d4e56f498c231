# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The metrics filters as the deploy calls them: each GPU server's
instances are scraped where they listen (vllm_listen_host over the vllm
role's default, the host's own address behind a wildcard), each gateway's
exporter from its variables over the gateway role's defaults; errors are
filter errors naming the variable."""

from __future__ import annotations

import copy
import json
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter import metrics
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES

DGX2 = facts_from_capture(os.path.join(MACHINES, "dgx2_v100_16gpu_nvswitch", "capture.yml"))


def record(hosts):
    plan = placement.plan_fleet(dict((h, copy.deepcopy(DGX2)) for h in hosts), tp_size=8)
    for instance in plan["instances"]:
        instance["served_model_name"] = "llama"
    return plan


def files(hostvars, gpu_servers, gateways=()):
    return metrics.metrics_files(record(gpu_servers), hostvars, gpu_servers, list(gateways),
                                 list(gpu_servers) + list(gateways), 9100, "1m")


def test_instances_are_scraped_where_they_listen():
    hostvars = {"a": {"ansible_host": "10.0.0.1"},                                   # the role's default
                "b": {"ansible_host": "10.0.0.2", "vllm_listen_host": "0.0.0.0"},    # a wildcard
                "c": {"vllm_listen_host": "10.1.0.3"},
                "lb": {"ansible_host": "10.0.0.9", "gateway_metrics_address": "0.0.0.0",
                       "gateway_metrics_port": 9405, "gateway_api_key": "sk-gw-0123456789abcdef"}}
    written = files(hostvars, ["a", "b", "c"], ["lb"])
    targets = dict((g["labels"]["instance"], g["targets"]) for g in json.loads(written["vllm.json"]))
    assert targets == {"a/vllm-0": ["127.0.0.1:8000"], "a/vllm-1": ["127.0.0.1:8001"],
                       "b/vllm-0": ["10.0.0.2:8000"], "b/vllm-1": ["10.0.0.2:8001"],
                       "c/vllm-0": ["10.1.0.3:8000"], "c/vllm-1": ["10.1.0.3:8001"]}
    assert json.loads(written["gateway.json"])[0]["targets"] == ["10.0.0.9:9405"]
    assert [g["targets"] for g in json.loads(written["node.json"])] == [
        ["10.0.0.1:9100"], ["10.0.0.2:9100"], ["c:9100"], ["10.0.0.9:9100"]]
    assert written["rules.yml"].startswith("groups:\n- name: gpufleet\n")


def test_a_host_is_scraped_at_the_address_its_record_keeps():
    """Issue 35: a's units listen at the address the record keeps (it moved
    while down: its inventory says 10.9.9.1 now); b's record keeps none (a
    record written before the field): its address now."""
    plan = record(["a", "b"])
    plan["hosts"] = {"a": {"gpus": 16, "address": "10.0.0.1"}, "b": {"gpus": 16}}
    hostvars = {"a": {"vllm_listen_host": "10.9.9.1"}, "b": {"vllm_listen_host": "10.9.9.2"}}
    written = metrics.metrics_files(plan, hostvars, ["a", "b"], [], [], 9100, "1m")
    targets = dict((g["labels"]["instance"], g["targets"]) for g in json.loads(written["vllm.json"]))
    assert targets == {"a/vllm-0": ["10.0.0.1:8000"], "a/vllm-1": ["10.0.0.1:8001"],
                       "b/vllm-0": ["10.9.9.2:8000"], "b/vllm-1": ["10.9.9.2:8001"]}


def test_the_gateway_defaults_put_its_exporter_on_loopback():
    written = files({"a": {}, "lb": {"ansible_host": "10.0.0.9"}}, ["a"], ["lb"])
    assert json.loads(written["gateway.json"]) == [
        {"targets": ["127.0.0.1:8405"], "labels": {"host": "lb", "instance": "lb/gateway"}}]


def test_a_bad_value_is_a_filter_error_naming_it():
    with pytest.raises(AnsibleFilterError, match="gpufleet_alert_down_for"):
        metrics.metrics_files(record(["a"]), {"a": {}}, ["a"], [], ["a"], 9100, "a minute")
    with pytest.raises(AnsibleFilterError, match="expects hostvars"):
        metrics.metrics_files(record(["a"]), [], ["a"], [], ["a"], 9100, "1m")
