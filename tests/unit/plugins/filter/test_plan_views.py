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


def test_gateway_backends_uses_each_hosts_listen_address():
    plan = {"instances": [INSTANCE, dict(INSTANCE, host="gpu-b", port=8001)]}
    hostvars = {"gpu-a": {"vllm_listen_host": "10.0.0.11"}, "gpu-b": {"vllm_listen_host": "10.0.0.12"}}
    assert gateway_backends(plan, hostvars) == [
        {"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.0.0.11", "port": 8000},
        {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "10.0.0.12", "port": 8001},
    ]


def test_gateway_backends_names_host_without_listen_address():
    with pytest.raises(AnsibleFilterError, match="host gpu-a has no vllm_listen_host"):
        gateway_backends({"instances": [INSTANCE]}, {"gpu-a": {"ansible_host": "10.0.0.11"}})
