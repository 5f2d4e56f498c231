# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/command.py at its edges (scripts/mutation.py
deploy/vllm/command found these untested), on plans fleet_plan makes for
recorded machines: a multi-node instance's head and headless rank, the
agent's units on each kind of listen address, the limits of pp_size,
vllm_shutdown_timeout and the drain, and each unit's Description=."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import agent
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import command, host_state
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import VARIABLES, numactl_reading, vllm_options

H100 = facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))
MI300X = facts_from_capture(os.path.join(MACHINES, "mi300x_8gpu_xgmi", "capture.yml"))
MI50 = facts_from_capture(os.path.join(MACHINES, "mi50_8gpu_nps4", "capture.yml"))
HOSTS = ["gpu-a", "gpu-b"]
IPV6 = {"gpu-a": "fd00::1", "gpu-b": "fd00::2"}


def multinode(rank, **variables):
    """Rank `rank` of a tp4 x pp4 instance over two H100 hosts, as its host's role renders it."""
    plan = placement.plan_fleet(dict((h, H100) for h in HOSTS), tp_size=4, pp_size=4, nodes_per_instance=2)
    host = HOSTS[rank]
    instances = [i for i in plan["instances"] if i["host"] == host]
    base = dict(VARIABLES, host=host, vllm_node_addresses=IPV6, vllm_rollout_hosts=HOSTS)
    return host_state.host_units(instances, dict(base, **variables))


def flags(unit):
    return vllm_options(numactl_reading(unit["argv"])[1][3:])


def test_a_headless_rank_waits_for_the_heads_rendezvous_in_brackets_and_serves_nothing():
    result = multinode(1)
    (unit,) = result["units"]
    assert unit["exec_start_pre"][-1] == ["", ["/usr/local/libexec/gpufleet/gpufleet-wait-ready",
                                               "tcp://[fd00::1]:29501", str(VARIABLES["vllm_engine_ready_timeout"])]]
    assert (unit["exec_start_post"], unit["exec_stop"], unit["health_url"], unit["runtime_directory"]) == (
        [], [], "", "")
    assert "--headless" in flags(unit) and "--port" not in flags(unit)
    # no instance of the host serves the API: no agent units
    assert result["agent_services"] == []
    assert command.agent_units(result["variables"], result["units"]) == []
    ipv4 = multinode(1, vllm_node_addresses={"gpu-a": "10.0.0.1", "gpu-b": "10.0.0.2"})["units"][0]
    assert ipv4["exec_start_pre"][-1][1][1] == "tcp://10.0.0.1:29501"


def test_both_ranks_name_the_rendezvous():
    for rank in (0, 1):
        (unit,) = multinode(rank)["units"]
        options = flags(unit)
        assert (options["--nnodes"], options["--node-rank"], options["--master-addr"], options["--master-port"]) == (
            ["2"], [str(rank)], ["fd00::1"], ["29501"])
        assert options["--pipeline-parallel-size"] == ["4"]


def test_the_socket_interface_is_set_on_multinode_units_only():
    for rank in (0, 1):
        environment = dict(multinode(rank, vllm_socket_ifname="ens1f0")["units"][0]["environment"])
        assert environment["NCCL_SOCKET_IFNAME"] == environment["GLOO_SOCKET_IFNAME"] == "ens1f0"
        environment = dict(multinode(rank)["units"][0]["environment"])
        assert "NCCL_SOCKET_IFNAME" not in environment and "GLOO_SOCKET_IFNAME" not in environment
    single = placement.plan_fleet({"gpu-a": H100}, tp_size=4)["instances"]
    for unit in host_state.host_units(single, dict(VARIABLES, vllm_socket_ifname="ens1f0"))["units"]:
        assert not set(dict(unit["environment"])) & {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}


def test_pipeline_parallel_size_is_passed_only_past_one_stage():
    one = placement.plan_fleet({"gpu-a": H100}, tp_size=4)["instances"]
    two = placement.plan_fleet({"gpu-a": H100}, tp_size=2, pp_size=2)["instances"]
    assert [i["pp_size"] for i in one + two] == [1, 1, 2, 2]
    for unit in host_state.host_units(one, VARIABLES)["units"]:
        assert "--pipeline-parallel-size" not in flags(unit)
    for unit in host_state.host_units(two, VARIABLES)["units"]:
        assert flags(unit)["--pipeline-parallel-size"] == ["2"]


@pytest.mark.parametrize("timeout, words", [(0, None), (1, ["1"]), (2, ["2"])])
def test_shutdown_timeout_is_passed_from_one_second(timeout, words):
    instances = placement.plan_fleet({"gpu-a": H100}, tp_size=4)["instances"]
    unit = host_state.host_units(instances, dict(VARIABLES, vllm_shutdown_timeout=timeout))["units"][0]
    assert flags(unit).get("--shutdown-timeout") == words


@pytest.mark.parametrize("drain, stop, waits", [(0, 30, 0), (1, 30, 1), (29, 30, 29), (30, 30, 29), (5, 1, 0)])
def test_the_drain_waits_at_most_a_second_less_than_the_stop(drain, stop, waits):
    assert command.stop_drain({"vllm_drain_timeout": drain, "vllm_timeout_stop_sec": stop}) == waits


@pytest.mark.parametrize("listen, address, free_bind", [
    ("0.0.0.0", "0.0.0.0", False), ("::", "[::]", False), ("10.0.0.7", "10.0.0.7", True),
    ("fd00::5", "[fd00::5]", True)])
def test_the_agent_listens_where_the_instances_do(listen, address, free_bind):
    instances = placement.plan_fleet({"gpu-a": H100}, tp_size=4)["instances"]
    result = host_state.host_units(instances, dict(VARIABLES, vllm_listen_host=listen,
                                                   vllm_api_key="sk-test-0123456789"))
    socket, service, reader = command.agent_units(result["variables"], result["units"])
    assert [entry["name"] for entry in result["agent_services"]] == [socket["name"], reader["name"]] == [
        "gpufleet-agent.socket", "gpufleet-agent-weights.service"]
    assert socket["listen"] == "%s:%d" % (address, agent.AGENT_PORT)
    assert socket["free_bind"] is free_bind
    assert service["name"] == "gpufleet-agent@.service"


def test_each_units_read_write_paths_name_each_folder_once():
    instances = placement.plan_fleet({"gpu-a": H100}, tp_size=4)["instances"]
    unit = host_state.host_units(instances, VARIABLES)["units"][0]
    assert unit["read_write_paths"] == " ".join([VARIABLES["vllm_state_dir"], VARIABLES["vllm_hf_home"],
                                                 VARIABLES["vllm_cache_dir"]])
    same = dict(VARIABLES, vllm_cache_dir=VARIABLES["vllm_state_dir"])
    unit = host_state.host_units(instances, same)["units"][0]
    assert unit["read_write_paths"] == " ".join([VARIABLES["vllm_state_dir"], VARIABLES["vllm_hf_home"]])


def descriptions(plan, **variables):
    return [u["description"] for u in host_state.host_units(plan["instances"], dict(VARIABLES, **variables))["units"]]


def test_descriptions_name_the_device_the_nodes_and_the_binding():
    assert descriptions(placement.plan_fleet({"cpu": MI50}, device_class="cpu", tp_size=1),
                        vllm_cpu_kvcache_space=4)[:2] == [
        "vLLM instance vllm-0 (CPU, 1 rank on NUMA node 0)", "vLLM instance vllm-1 (CPU, 1 rank on NUMA node 1)"]
    assert descriptions(placement.plan_fleet({"cpu": MI50}, device_class="cpu", tp_size=2),
                        vllm_cpu_kvcache_space=4)[:2] == [
        "vLLM instance vllm-0 (CPU, 2 ranks on NUMA nodes 0,1)", "vLLM instance vllm-1 (CPU, 2 ranks on NUMA nodes 2,3)"]
    assert descriptions(placement.plan_fleet({"mi": MI300X}, tp_size=4), vllm_install=False,
                        vllm_executable="/opt/rocm/bin/vllm") == [
        "vLLM instance vllm-0 (AMD GPUs 0,1,2,3, NUMA nodes 0)", "vLLM instance vllm-1 (AMD GPUs 4,5,6,7, NUMA nodes 1)"]
    assert descriptions(placement.plan_fleet({"h": H100}, tp_size=4)) == [
        "vLLM instance vllm-0 (GPUs 0,1,2,3, NUMA nodes 0)", "vLLM instance vllm-1 (GPUs 4,5,6,7, NUMA nodes 1)"]
    assert descriptions(placement.plan_fleet({"h": H100}, tp_size=2, pp_size=2)) == [
        "vLLM instance vllm-0 (GPUs 0,1,2,3, NUMA nodes 0, bound per worker)",
        "vLLM instance vllm-1 (GPUs 4,5,6,7, NUMA nodes 1, bound per worker)"]
    assert [multinode(rank)["units"][0]["description"] for rank in (0, 1)] == [
        "vLLM instance vllm-0 (GPUs 0,1,2,3,4,5,6,7, NUMA nodes 0,1, bound per worker), node 0 of 2, head gpu-a",
        "vLLM instance vllm-0 (GPUs 0,1,2,3,4,5,6,7, NUMA nodes 0,1, bound per worker), node 1 of 2, head gpu-a"]
