# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The plan contract: one reader of the plan, and every consumer goes through it."""

from __future__ import annotations

import os
import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host, merge_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import backends as gateway_view
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import command as vllm_command
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import variables as vllm_variables
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import VARIABLES as VLLM_VARIABLES
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import check as plan_check
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import table
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology

H100 = os.path.join(fixture_paths.MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml")
PLUGINS = os.path.join(fixture_paths.REPO, "plugins")


@pytest.fixture(scope="module")
def h100():
    return topology.facts_from_capture(H100)


def _multinode(rank, hosts=("gpu-a", "gpu-b")):
    return {"nnodes": len(hosts), "node_rank": rank, "head": hosts[0], "hosts": list(hosts), "master_port": 29500}


@pytest.mark.parametrize("instance, head", [
    ({"host": "gpu-a"}, True),
    ({"host": "gpu-a", "multinode": None}, True),
    ({"host": "gpu-a", "multinode": _multinode(0)}, True),
    ({"host": "gpu-b", "multinode": _multinode(1)}, False),
    ({"host": "gpu-b", "multinode": "rank 1"}, True),  # not a multinode field: a one-host reading
])
def test_is_head_one_host_instances_and_rank_zero(instance, head):
    assert contract.is_head(instance) is head


def test_count_instances_counts_a_multinode_instance_once():
    entries = [{"gpus": [1, 2]}, {"gpus": [3], "multinode": _multinode(0)}, {"gpus": [4], "multinode": _multinode(1)}]
    assert contract.count_instances(entries) == 2
    assert contract.plan_totals(2, 8, entries) == {"hosts": 2, "instances": 2, "gpus": 8, "gpus_used": 4,
                                                   "gpus_unused": 4}


def test_add_totals_adds_every_field_and_reads_a_missing_one_as_zero():
    assert contract.add_totals([{"hosts": 1, "instances": 2, "gpus": 8, "gpus_used": 8, "gpus_unused": 0},
                                {"hosts": 1}, None]) == {
        "hosts": 2, "instances": 2, "gpus": 8, "gpus_used": 8, "gpus_unused": 0}


def test_share_and_share_options_of_a_multinode_instance():
    assert contract.share(4, 4, 2) == contract.Share(nnodes=2, pp_size=2, gpus=8)
    assert contract.share(8, 1) == contract.Share(1, 1, 8)
    assert contract.share_options({"pp_size": 4, "tp_size": 4, "base_port": 8000}, 2) == {
        "pp_size": 2, "tp_size": 4, "base_port": 8000, "max_instances_per_host": 1}


def test_server_name_is_the_gateways_and_the_drain_targets():
    plan = {"instances": [{"host": "gpu-a", "name": "vllm-0", "port": 8000, "served_model_name": "m"}]}
    (backend,) = gateway_view.gateway_backends(plan, {"gpu-a": "10.0.0.1"})
    assert backend["name"] == contract.server_name("gpu-a", "vllm-0") == "gpu-a-vllm-0"
    variables = {"vllm_gateways": {"lb": "/run/haproxy/admin.sock"},
                 "vllm_gateway_backends": [{"host": "gpu-a", "server": backend["name"], "backend": "model-m"}]}
    assert vllm_command.drain_targets("vllm-0", variables, "gpu-a") == [
        {"gateway": "lb", "socket": "/run/haproxy/admin.sock", "backend": "model-m", "server": "gpu-a-vllm-0"}]


def test_headless_ranks_are_neither_backends_nor_counted_nor_served():
    instances = [{"host": h, "name": "vllm-0", "port": 8000, "served_model_name": "m", "gpus": [0],
                  "multinode": _multinode(rank)} for rank, h in enumerate(("gpu-a", "gpu-b"))]
    assert [b["host"] for b in gateway_view.gateway_backends({"instances": instances},
                                                             {"gpu-a": "10.0.0.1", "gpu-b": "10.0.0.2"})] == ["gpu-a"]
    assert gateway_view.gateway_api_keys({"instances": instances}, {"gpu-b": "k" * 16}) == {}
    assert contract.count_instances(instances) == 1


def test_facts_view_reads_hostvars_a_numa_topology_mapping_or_the_facts(h100):
    assert contract.facts_view("a", {"ansible_facts": {"numa_topology": h100}}) is h100
    assert contract.facts_view("a", {"numa_topology": h100}) is h100
    assert contract.facts_view("a", h100) is h100
    for variables in ({}, {"ansible_facts": {}}, None, "facts"):
        with pytest.raises(ValueError, match="^host a: no topology facts"):
            contract.facts_view("a", variables)


def test_fleet_plan_by_host_reads_facts_through_the_facts_view(h100):
    plan = fleet_plan_by_host({"gpu-a": {"numa_topology": h100, "gpufleet_tp_size": 4}})
    assert [i["gpu_indices"] for i in plan["instances"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]


# The served-name rule, one strictness everywhere: what one consumer takes
# every other takes, what one refuses every other refuses.
SERVED_NAMES = [
    ("meta-llama/Llama-3.1-8B-Instruct", True),
    ("llama:8b", True),
    ("my model", False),        # command_word alone took it
    ("llama'x", False),
    ('llama"x', False),
    ("llama$HOME", False),
    ("-x", False),
    ("/srv/models/llama", False),  # a path: served under vllm_served_model_name instead
    ("x" * 201, False),
]


def _vllm(served):
    return vllm_variables.check_variables(dict(VLLM_VARIABLES, vllm_model="org/model", vllm_served_model_name=served, vllm_instances=[]))


def _gateway(served):
    return gateway_settings.backends([{"name": "a-0", "address": "10.0.0.1", "port": 8000, "model": served}])


def _backends(served):
    return gateway_view.gateway_backends({"instances": [{"host": "a", "name": "v0", "port": 8000,
                                                         "served_model_name": served}]}, {"a": "10.0.0.1"})


def _planner(served):
    return host_settings.host_models({"a": {"vllm_model": "org/model", "vllm_served_model_name": served}}, ["a"])


def _kept_plan(served):
    plan = {"hosts": {"a": {"gpus": 1}}, "instances": [{
        "host": "a", "name": "v0", "tp_size": 1, "pp_size": 1, "gpus": [{"id": "0000:1a:00.0", "index": 0}],
        "gpu_indices": [0], "binding": {"cpus": "0-3", "mems": [0], "policy": "bind", "by_node": True},
        "port": 8000, "dist_port": 9000, "served_model_name": served}], "unused": [], "warnings": []}
    return plan_check.check_artifact(plan, "plan.json")


CONSUMERS = {"vllm unit": _vllm, "gateway settings": _gateway, "gateway backends": _backends,
             "planner": _planner, "kept plan": _kept_plan}


@pytest.mark.parametrize("served, ok", SERVED_NAMES, ids=[n[:20] for n, dummy in SERVED_NAMES])
@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_served_name_rule_is_one_strictness_everywhere(consumer, served, ok):
    if ok:
        CONSUMERS[consumer](served)
    else:
        with pytest.raises(ValueError, match="must (be a served model name|not start with '-'|be at most 200 characters)"):
            CONSUMERS[consumer](served)


def test_served_name_is_the_model_itself_when_none_is_set():
    assert contract.served_name("org/model", "") == "org/model"
    assert contract.served_name("org/model", None) == "org/model"
    assert contract.served_name("org/model", "alias") == "alias"
    # A local-path model needs a served name: the unit used to serve it as
    # the path, which the gateway and the planner refuse.
    with pytest.raises(ValueError, match=r"^vllm_model \(served as its own name\): must be a served model name"):
        contract.served_name("/srv/models/llama", "")
    assert contract.served_name("/srv/models/llama", "llama") == "llama"


def test_unit_serves_the_contracts_served_name():
    checked = vllm_variables.check_variables(dict(VLLM_VARIABLES, vllm_model="org/model", vllm_served_model_name="", vllm_instances=[]))
    inst = {"name": "v0", "tp_size": 1, "pp_size": 1, "gpu_indices": [0], "cpus": "0-3", "mems": [0],
            "policy": "bind", "by_node": True, "mode": "process", "workers": [], "port": 8000, "dist_port": 9000,
            "reason": "", "multinode": None}
    unit = vllm_command.instance_unit(inst, checked)
    assert ["--served-model-name", "org/model"] in unit["options"]


@pytest.mark.parametrize("value", ["maybe", "sometimes", "2", ""])
def test_merge_plan_refuses_an_allow_span_that_is_no_boolean(h100, value):
    fresh = dict(placement.plan_fleet({"a": h100}, tp_size=4), settings={"a": {"tp_size": 4, "allow_span": value}})
    with pytest.raises(AnsibleFilterError, match=r"settings\.a\.allow_span: must be a boolean .*%s" % re.escape(
            repr(value))):
        merge_plan(fresh, None, ["a"], ["a"])


@pytest.mark.parametrize("value, typed", [("yes", True), ("off", False), ("True", True), (" 0 ", False), ("1", True)])
def test_merge_plan_reads_allow_span_words_as_booleans(h100, value, typed):
    fresh = dict(placement.plan_fleet({"a": h100}, tp_size=4), settings={"a": {"tp_size": "4", "allow_span": value}})
    hosts = plan_artifact.merge_plans(fresh, None, ["a"], ["a"])["plan"]["hosts"]
    assert hosts["a"]["options"] == {"tp_size": 4, "allow_span": typed}


def test_plan_keys_is_gone_and_the_plan_fields_are_the_contracts():
    assert not hasattr(plan_artifact, "PLAN_KEYS")
    assert contract.PLAN_FIELDS == ("instances", "unused", "warnings", "totals")


def test_plan_table_is_only_the_text_table():
    # The gateway's view lives in deploy/gateway/backends.py alone.
    assert not hasattr(table, "gateway_backends") and not hasattr(table, "gateway_api_keys")
    source = open(table.__file__).read()
    assert "def gateway_" not in source and "is_headless" not in source


# One place for each decision: no consumer repeats the contract's rules.
REPEATS = [
    (r"node_rank\"?\]?\)? *[!=]= *0|get\(\"node_rank\"\) *[!=]= *0", "is_head"),
    (r"\"%s-%s\" % \((inventory_)?host", "server_name"),
    (r"tp_size \* pp_size // ", "share"),
    (r"vllm_served_model_name\"\] or v\[\"vllm_model\"\]", "served_name"),
    (r"in \(\"1\", \"true\", \"yes\", \"on\"\)", "value_checks.boolean"),
]


@pytest.mark.parametrize("pattern, function", REPEATS, ids=[f for dummy, f in REPEATS])
def test_no_consumer_repeats_a_decision_of_the_contract(pattern, function):
    found = []
    for folder, dummy, files in os.walk(PLUGINS):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.endswith(os.path.join("placement", "contract.py")):
                continue
            for number, line in enumerate(open(path, encoding="utf-8"), 1):
                if re.search(pattern, line):
                    found.append("%s:%d" % (os.path.relpath(path, PLUGINS), number))
    assert not found, "call contract.%s instead: %s" % (function, ", ".join(found))


@pytest.mark.parametrize("entry", [
    {}, {"multinode": None}, {"multinode": "x"}, {"multinode": {}}, {"multinode": {"node_rank": 0}},
    {"multinode": {"node_rank": 1}}, {"multinode": {"node_rank": "0"}}, "not a dict",
])
def test_count_instances_counts_exactly_the_heads(entry):
    # count_instances writes is_head out for speed: the two must never disagree.
    assert contract.count_instances([entry, entry]) == 2 * contract.is_head(entry)
