import pathlib

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.gateway import gateway_settings
from ansible_collections.gpufleet.numa.plugins.filter.plan_views import (
    gateway_api_keys,
    gateway_backends,
    plan_table,
    plan_warning_lines,
)

INSTANCE = {
    "host": "gpu-a", "name": "vllm-0", "gpu_indices": [0, 1, 2, 3], "numa_nodes": [0],
    "cpus": "0-47,96-143", "memory_policy": "bind", "worst_link": "NV18",
    "tp_size": 4, "pp_size": 1, "port": 8000,
    "model": "meta-llama/Llama-3.1-70B-Instruct", "served_model_name": "llama-3.1-70b",
}
QWEN = {"model": "Qwen/Qwen2.5-7B-Instruct", "served_model_name": "Qwen/Qwen2.5-7B-Instruct"}


def test_plan_table_aligns_columns_and_lists_unused():
    plan = {
        "instances": [INSTANCE, dict(INSTANCE, name="vllm-1", gpu_indices=[4, 5, 6, 7], numa_nodes=[1], cpus="48-95,144-191", port=8001)],
        "unused": [{"host": "gpu-b", "index": 7, "id": "GPU7", "reason": "NUMA node unknown"}],
        "totals": {"instances": 2},
    }
    lines = plan_table(plan)
    assert lines[0].split() == ["HOST", "INSTANCE", "MODEL", "GPUS", "NUMA", "CPUS", "MEMORY", "LINK", "TPxPP", "PORT"]
    assert lines[1].split() == ["gpu-a", "vllm-0", "llama-3.1-70b", "0,1,2,3", "0", "0-47,96-143", "bind", "NV18", "4x1", "8000"]
    assert lines[0].index("CPUS") == lines[2].index("48-95,144-191")
    assert lines[3] == "unused: gpu-b GPU 7 (GPU7): NUMA node unknown"
    assert lines[4] == "instances 2"


@pytest.mark.parametrize("bad", [None, [], {"instances": "x"}, {"instances": [{"name": "vllm-0"}]}])
def test_plan_table_rejects_non_plans(bad):
    with pytest.raises(AnsibleFilterError, match="plan_table"):
        plan_table(bad)


def test_plan_warning_lines_are_the_deploys_lines_in_the_plans_order():
    """The deploy prints "warning: HOST: text" per warning, as it did when warnings were strings."""
    plan = {"instances": [], "warnings": [
        {"host": "gpu-b", "text": "NUMA node 1 left over: max_instances_per_host (1) reached", "gpus": [], "nodes": [1]},
        {"host": "gpu-a", "text": "GPU GPU3 (index 3) has no known NUMA node; left unused", "gpus": ["GPU3"],
         "nodes": []}]}
    assert plan_warning_lines(plan) == [
        "warning: gpu-b: NUMA node 1 left over: max_instances_per_host (1) reached",
        "warning: gpu-a: GPU GPU3 (index 3) has no known NUMA node; left unused"]
    assert plan_warning_lines(dict(plan, warnings=[])) == []


@pytest.mark.parametrize("bad", [None, [], {"instances": []}, {"warnings": "x"}])
def test_plan_warning_lines_rejects_non_plans(bad):
    with pytest.raises(AnsibleFilterError, match="plan_warning_lines"):
        plan_warning_lines(bad)


def test_gateway_backends_uses_each_hosts_address():
    plan = {"instances": [INSTANCE, dict(INSTANCE, host="gpu-b", port=8001)]}
    addresses = {"gpu-a": "10.0.0.11", "gpu-b": "fd00:0::12", "gpu-unused": None}
    assert gateway_backends(plan, addresses) == [
        {"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.0.0.11", "port": 8000,
         "model": "llama-3.1-70b", "backend": "model-llama-3.1-70b", "agent": "vllm-0"},
        {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "fd00::12", "port": 8001,
         "model": "llama-3.1-70b", "backend": "model-llama-3.1-70b", "agent": "vllm-0"},
    ]


def test_gateway_backends_one_backend_per_served_model():
    plan = {"instances": [INSTANCE, dict(INSTANCE, host="gpu-b", **QWEN), dict(INSTANCE, host="gpu-c")]}
    backends = gateway_backends(plan, {"gpu-a": "10.0.0.11", "gpu-b": "10.0.0.12", "gpu-c": "10.0.0.13"})
    assert [(b["name"], b["model"], b["backend"]) for b in backends] == [
        ("gpu-a-vllm-0", "llama-3.1-70b", "model-llama-3.1-70b"),
        ("gpu-b-vllm-0", "Qwen/Qwen2.5-7B-Instruct", "model-Qwen_Qwen2.5-7B-Instruct"),
        ("gpu-c-vllm-0", "llama-3.1-70b", "model-llama-3.1-70b"),
    ]


def test_gateway_backends_backend_names_agree_with_the_gateway_role():
    """The rollout drains 'backend/name' over the admin socket: the name
    plan_views gives must be the one the role writes, collisions included."""
    defaults = yaml.safe_load((pathlib.Path(__file__).resolve().parents[4] / "roles" / "gateway" / "defaults"
                               / "main.yml").read_text())
    plan = {"instances": [dict(INSTANCE, served_model_name="org/m"), dict(INSTANCE, host="gpu-b", served_model_name="org_m",
                                                                          model="other")]}
    backends = gateway_backends(plan, {"gpu-a": "10.0.0.11", "gpu-b": "10.0.0.12"})
    defaults = dict((name, value) for name, value in defaults.items() if not name.startswith("gateway_vrrp_"))
    settings = gateway_settings(dict(defaults, gateway_backends=backends, gateway_listen_address="127.0.0.1"))
    assert [b["backend"] for b in backends] == [m["backend"] for m in settings["models"]]
    assert len(set(b["backend"] for b in backends)) == 2


def test_gateway_backends_one_served_name_two_models_names_both_hosts():
    plan = {"instances": [INSTANCE, dict(INSTANCE, host="gpu-b", model="meta-llama/Llama-3.1-8B-Instruct")]}
    with pytest.raises(AnsibleFilterError, match=r"vllm_served_model_name: hosts gpu-a and gpu-b both serve the name "
                                                 r"llama-3.1-70b but with different models"):
        gateway_backends(plan, {"gpu-a": "10.0.0.11", "gpu-b": "10.0.0.12"})


@pytest.mark.parametrize("served", [None, ""])
def test_gateway_backends_names_host_without_served_model(served):
    instance = dict(INSTANCE, served_model_name=served)
    with pytest.raises(AnsibleFilterError, match=r"host gpu-a: plan instance vllm-0 names no served model: set vllm_model"):
        gateway_backends({"instances": [instance]}, {"gpu-a": "10.0.0.11"})
    del instance["served_model_name"]
    with pytest.raises(AnsibleFilterError, match=r"host gpu-a: plan instance vllm-0 names no served model"):
        gateway_backends({"instances": [instance]}, {"gpu-a": "10.0.0.11"})


def test_gateway_backends_rejects_hostile_served_name_naming_host():
    with pytest.raises(AnsibleFilterError, match=r"host gpu-a vllm_served_model_name: must be a served model name"):
        gateway_backends({"instances": [dict(INSTANCE, served_model_name="x' if TRUE")]}, {"gpu-a": "10.0.0.11"})


def test_gateway_api_keys_one_key_per_model():
    plan = {"instances": [INSTANCE, dict(INSTANCE, host="gpu-b", **QWEN), dict(INSTANCE, host="gpu-c")]}
    key = "sk-a-0123456789abcdef"
    assert gateway_api_keys(plan, {"gpu-a": key, "gpu-c": key, "gpu-b": ""}) == {"llama-3.1-70b": key}
    assert gateway_api_keys(plan, {}) == {}
    with pytest.raises(AnsibleFilterError) as info:
        gateway_api_keys(plan, {"gpu-a": "sk-a-0123456789abcdef", "gpu-c": "sk-c-0123456789abcdef"})
    message = str(info.value)
    assert "vllm_api_key: hosts gpu-a and gpu-c serve model llama-3.1-70b with different keys" in message
    assert "sk-a-0123456789abcdef" not in message and "sk-c-0123456789abcdef" not in message
    with pytest.raises(AnsibleFilterError) as info:
        gateway_api_keys(plan, {"gpu-a": "sk-a-0123456789abcdef\nx", "gpu-c": "sk-a-0123456789abcdef\nx"})
    assert "host gpu-a vllm_api_key: must be" in str(info.value) and "sk-a-0123456789abcdef" not in str(info.value)


def test_gateway_backends_takes_addresses_by_keyword_and_dns_names():
    backends = gateway_backends({"instances": [INSTANCE]}, addresses={"gpu-a": "gpu-a.internal"})
    assert backends[0]["address"] == "gpu-a.internal"


@pytest.mark.parametrize("addresses", [{}, {"gpu-a": None}, {"gpu-a": ""}, {"other": "10.0.0.11"}])
def test_gateway_backends_names_host_without_address(addresses):
    with pytest.raises(AnsibleFilterError, match="host gpu-a has no address in addresses"):
        gateway_backends({"instances": [INSTANCE]}, addresses)


@pytest.mark.parametrize("address, rule", [
    ("10.0.0.11\n    server evil 6.6.6.6:80", "control characters"),
    ("10.0.0.11 backup", "address or a DNS host name"),
    ("0.0.0.0", "not the wildcard"),
    ("::", "not the wildcard"),
    (["10.0.0.11"], "must be a string"),
])
def test_gateway_backends_rejects_bad_address_naming_host(address, rule):
    with pytest.raises(AnsibleFilterError, match="host gpu-a address: .*%s" % rule):
        gateway_backends({"instances": [INSTANCE]}, {"gpu-a": address})


@pytest.mark.parametrize("host", ["gpu-a\n    stats enable", "gpu a", "gpu-a#x", ""])
def test_gateway_backends_rejects_bad_host(host):
    with pytest.raises(AnsibleFilterError, match="plan instance 0 host"):
        gateway_backends({"instances": [dict(INSTANCE, host=host)]}, {host: "10.0.0.11"})


def test_gateway_backends_rejects_bad_port_and_instance_name():
    with pytest.raises(AnsibleFilterError, match="host gpu-a instance vllm-0 port: must be at most 65535"):
        gateway_backends({"instances": [dict(INSTANCE, port=70000)]}, {"gpu-a": "10.0.0.11"})
    with pytest.raises(AnsibleFilterError, match="host gpu-a instance name"):
        gateway_backends({"instances": [dict(INSTANCE, name="vllm 0")]}, {"gpu-a": "10.0.0.11"})


@pytest.mark.parametrize("addresses", [None, "10.0.0.11", ["gpu-a"]])
def test_gateway_backends_rejects_non_mapping_addresses(addresses):
    with pytest.raises(AnsibleFilterError, match="addresses must be a mapping"):
        gateway_backends({"instances": [INSTANCE]}, addresses)


def test_gateway_backends_has_no_default_address_variable():
    """Role-neutral: no vLLM variable name is looked up behind the caller's back."""
    with pytest.raises(TypeError):
        gateway_backends({"instances": [INSTANCE]})
