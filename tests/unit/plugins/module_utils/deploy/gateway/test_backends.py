# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/gateway/backends.py on its own, over plans the planner makes from
recorded machines: server names are the contract's server_name, only the
head of a multi-node instance is served (its headless ranks are neither
backends nor asked for a served name or a key), one key per served model,
and each error names the field (ValueError; the filter's own wording and
address rules are tests/unit/plugins/filter/test_plan_views.py)."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import backends as gateway_view
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES

H100 = facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))
HOSTS = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
ADDRESSES = dict((host, "10.0.0.%d" % (11 + n)) for n, host in enumerate(HOSTS))
KEY = "sk-gw-0123456789abcdef"


def served(plan, name="llama", model="meta-llama/Llama-3.1-70B-Instruct"):
    out = copy.deepcopy(plan)
    for instance in out["instances"]:
        instance.update(served_model_name=name, model=model)
    return out


def multinode_plan():
    """Two tp4 x pp4 instances, each over two H100 hosts: heads gpu-a and gpu-c."""
    fleet = dict((host, copy.deepcopy(H100)) for host in HOSTS)
    return served(placement.plan_fleet(fleet, tp_size=4, pp_size=4, nodes_per_instance=2))


def one_host_plan():
    """Two tp4 instances on each of two H100 hosts."""
    fleet = dict((host, copy.deepcopy(H100)) for host in HOSTS[:2])
    return served(placement.plan_fleet(fleet, tp_size=4))


def test_server_names_are_the_contracts():
    plan = one_host_plan()
    backends = gateway_view.gateway_backends(plan, ADDRESSES)
    assert [b["name"] for b in backends] == [contract.server_name(i["host"], i["name"]) for i in plan["instances"]]
    assert [b["name"] for b in backends] == ["gpu-a-vllm-0", "gpu-a-vllm-1", "gpu-b-vllm-0", "gpu-b-vllm-1"]
    assert [b["port"] for b in backends] == [i["port"] for i in plan["instances"]] == [8000, 8001, 8000, 8001]


def test_server_names_go_through_the_contract(monkeypatch):
    monkeypatch.setattr(contract, "server_name", lambda host, name: "s-%s-%s" % (name, host))
    backends = gateway_view.gateway_backends(one_host_plan(), ADDRESSES)
    assert backends[0]["name"] == "s-vllm-0-gpu-a"


def test_only_heads_of_multinode_instances_are_served():
    plan = multinode_plan()
    ranks = [(i["host"], i["multinode"]["node_rank"]) for i in plan["instances"]]
    assert ranks == [("gpu-a", 0), ("gpu-b", 1), ("gpu-c", 0), ("gpu-d", 1)]
    backends = gateway_view.gateway_backends(plan, ADDRESSES)
    assert [(b["name"], b["address"], b["backend"]) for b in backends] == [
        ("gpu-a-vllm-0", "10.0.0.11", "model-llama"), ("gpu-c-vllm-0", "10.0.0.13", "model-llama")]


def test_headless_ranks_need_no_address_served_name_or_key():
    plan = multinode_plan()
    for instance in plan["instances"]:
        if not contract.is_head(instance):
            instance["served_model_name"] = None
    heads_only = {"gpu-a": "10.0.0.11", "gpu-c": "10.0.0.13"}
    assert [b["host"] for b in gateway_view.gateway_backends(plan, heads_only)] == ["gpu-a", "gpu-c"]
    # A headless rank's key is never sent: it may differ from its head's.
    keys = {"gpu-a": KEY, "gpu-b": "sk-other-0123456789abcd", "gpu-c": KEY}
    assert gateway_view.gateway_api_keys(multinode_plan(), keys) == {"llama": KEY}


def test_one_key_per_served_model_not_per_model():
    plan = one_host_plan()
    plan["instances"][2]["served_model_name"] = "llama-b"
    plan["instances"][3]["served_model_name"] = "llama-b"
    other = "sk-b-0123456789abcdef"
    assert gateway_view.gateway_api_keys(plan, {"gpu-a": KEY, "gpu-b": other}) == {"llama": KEY, "llama-b": other}
    assert gateway_view.gateway_api_keys(plan, {"gpu-a": KEY, "gpu-b": ""}) == {"llama": KEY}


def test_a_key_on_one_host_and_none_on_another_of_one_model_names_both_hosts():
    with pytest.raises(ValueError) as info:
        gateway_view.gateway_api_keys(one_host_plan(), {"gpu-a": KEY})
    message = str(info.value)
    assert message.startswith("vllm_api_key: hosts gpu-a and gpu-b serve model llama with different keys")
    assert KEY not in message and KEY[:6] not in message


def test_instances_without_a_model_serve_under_their_served_name():
    plan = one_host_plan()
    for instance in plan["instances"]:
        instance.pop("model")
    plan["instances"][3]["model"] = "llama"  # the same model, named by its served name
    assert len(gateway_view.gateway_backends(plan, ADDRESSES)) == 4


@pytest.mark.parametrize("call, plan, mapping, message", [
    ("gateway_backends", None, ADDRESSES, "gateway_backends expects the dict returned by fleet_plan (with 'instances')"),
    ("gateway_backends", {"instances": {}}, ADDRESSES, "gateway_backends expects the dict returned by fleet_plan"),
    ("gateway_api_keys", [], {}, "gateway_api_keys expects the dict returned by fleet_plan"),
    ("gateway_api_keys", {"instances": []}, ["gpu-a"], "gateway_api_keys: api_keys must be a mapping of inventory host -> vllm_api_key"),
    ("gateway_backends", {"instances": []}, "10.0.0.11", "gateway_backends: addresses must be a mapping of inventory host -> "
     "address (got '10.0.0.11')"),
])
def test_non_plans_and_non_mappings_name_the_call(call, plan, mapping, message):
    with pytest.raises(ValueError) as info:
        getattr(gateway_view, call)(plan, mapping)
    assert str(info.value).startswith(message)


def test_errors_name_the_instance_field_or_variable():
    plan = one_host_plan()
    plan["instances"][1] = "vllm-1"
    with pytest.raises(ValueError, match=r"^plan instance 1 is not a dict$"):
        gateway_view.gateway_backends(plan, ADDRESSES)
    with pytest.raises(ValueError, match=r"^plan instance is not a dict$"):
        gateway_view.gateway_api_keys(plan, {})
    plan = one_host_plan()
    plan["instances"][2]["served_model_name"] = "--api-key"
    with pytest.raises(ValueError, match=r"^host gpu-b vllm_served_model_name: "):
        gateway_view.gateway_backends(plan, ADDRESSES)
    plan = one_host_plan()
    plan["instances"][3]["port"] = 0
    with pytest.raises(ValueError, match=r"^host gpu-b instance vllm-1 port: "):
        gateway_view.gateway_backends(plan, ADDRESSES)
    plan = one_host_plan()
    plan["instances"][3]["model"] = "other"
    with pytest.raises(ValueError, match=r"^vllm_served_model_name: hosts gpu-a and gpu-b both serve the name llama "
                                         r"but with different models \('meta-llama/Llama-3.1-70B-Instruct' and 'other'\)"):
        gateway_view.gateway_backends(plan, ADDRESSES)


def test_a_bad_key_names_the_host_and_hides_the_key():
    bad = "sk-a-0123456789abcdef\r\nX-Injected: 1"
    with pytest.raises(ValueError) as info:
        gateway_view.gateway_api_keys(one_host_plan(), {"gpu-a": bad, "gpu-b": bad})
    assert str(info.value).startswith("host gpu-a vllm_api_key: ")
    assert "0123456789" not in str(info.value)


@pytest.mark.parametrize("addresses", [
    {"gpu-a": "10.0.0.11"},
    {"gpu-a": "10.0.0.11", "gpu-b": ""},
    {"gpu-a": "10.0.0.11", "gpu-b": None},
], ids=["missing", "empty", "none"])
def test_a_planned_host_without_an_address_is_named_not_guessed(addresses):
    with pytest.raises(ValueError) as info:
        gateway_view.gateway_backends(one_host_plan(), addresses)
    assert str(info.value).startswith("host gpu-b has no address in addresses: map it to the address its vLLM "
                                      "instances listen on")


@pytest.mark.parametrize("name", [None, ""], ids=["none", "empty"])
def test_an_instance_without_a_served_name_names_host_and_instance(name):
    plan = one_host_plan()
    plan["instances"][1]["served_model_name"] = name
    for call in (lambda: gateway_view.gateway_backends(plan, ADDRESSES), lambda: gateway_view.gateway_servers(plan)):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith("host gpu-a: plan instance vllm-1 names no served model: set vllm_model")


def test_gateway_servers_are_the_backends_without_addresses():
    plan = multinode_plan()
    servers = gateway_view.gateway_servers(plan)
    assert servers == [
        {"name": "gpu-a-vllm-0", "host": "gpu-a", "model": "llama", "backend": "model-llama"},
        {"name": "gpu-c-vllm-0", "host": "gpu-c", "model": "llama", "backend": "model-llama"}]
    backends = gateway_view.gateway_backends(plan, ADDRESSES)
    assert [dict((k, b[k]) for k in ("name", "host", "model", "backend")) for b in backends] == servers
