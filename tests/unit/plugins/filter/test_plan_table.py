import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.plan_table import plan_table

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
