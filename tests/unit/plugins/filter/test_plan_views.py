import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.plan_views import gateway_backends, plan_table

INSTANCE = {
    "host": "gpu-a", "name": "vllm-0", "gpu_indices": [0, 1, 2, 3], "numa_nodes": [0],
    "cpus": "0-47,96-143", "memory_policy": "bind", "worst_link": "NV18",
    "tp_size": 4, "pp_size": 1, "port": 8000,
}


def test_plan_table_aligns_columns_and_lists_unused():
    plan = {
        "instances": [INSTANCE, dict(INSTANCE, name="vllm-1", gpu_indices=[4, 5, 6, 7], numa_nodes=[1], cpus="48-95,144-191", port=8001)],
        "unused": [{"host": "gpu-b", "index": 7, "id": "GPU7", "reason": "NUMA node unknown"}],
        "totals": {"instances": 2},
    }
    lines = plan_table(plan)
    assert lines[0].split() == ["HOST", "INSTANCE", "GPUS", "NUMA", "CPUS", "MEMORY", "LINK", "TPxPP", "PORT"]
    assert lines[1].split() == ["gpu-a", "vllm-0", "0,1,2,3", "0", "0-47,96-143", "bind", "NV18", "4x1", "8000"]
    assert lines[0].index("CPUS") == lines[2].index("48-95,144-191")
    assert lines[3] == "unused: gpu-b GPU 7 (GPU7): NUMA node unknown"
    assert lines[4] == "instances 2"


@pytest.mark.parametrize("bad", [None, [], {"instances": "x"}, {"instances": [{"name": "vllm-0"}]}])
def test_plan_table_rejects_non_plans(bad):
    with pytest.raises(AnsibleFilterError, match="plan_table"):
        plan_table(bad)


def test_gateway_backends_uses_each_hosts_address():
    plan = {"instances": [INSTANCE, dict(INSTANCE, host="gpu-b", port=8001)]}
    addresses = {"gpu-a": "10.0.0.11", "gpu-b": "fd00:0::12", "gpu-unused": None}
    assert gateway_backends(plan, addresses) == [
        {"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.0.0.11", "port": 8000},
        {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "fd00::12", "port": 8001},
    ]


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
