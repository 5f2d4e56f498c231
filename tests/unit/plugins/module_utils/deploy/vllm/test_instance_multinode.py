# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm for multi-node instances (plan field multinode): the head and
headless ranks' units, from a recorded machine's plan given a multinode
field as fleet_plan gives it (docs/plan.md)."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import table
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import backends as gateway_view
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import (
    VARIABLES,
    numactl_reading,
    vllm_options,
)


MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")


HOSTS = ["gpu-a", "gpu-b"]


ADDRESSES = {"gpu-a": "10.0.0.1", "gpu-b": "10.0.0.2"}


def entry(rank):
    """Rank `rank` of a TP 4 x PP 4 instance over two 8-GPU hosts: two stages per host."""
    facts = topology.facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))
    instance = placement.plan_fleet({HOSTS[rank]: facts}, tp_size=4, pp_size=2)["instances"][0]
    instance = copy.deepcopy(instance)
    instance["pp_size"] = 4
    instance["multinode"] = {"nnodes": 2, "node_rank": rank, "head": "gpu-a", "hosts": HOSTS, "master_port": 29501,
                             "nics": []}
    return instance


def units(rank, **variables):
    base = dict(VARIABLES, host=HOSTS[rank], vllm_node_addresses=ADDRESSES, vllm_rollout_hosts=HOSTS)
    base.update(variables)
    return host_state.host_units([entry(rank)], base)["units"]


def test_head_serves_the_api_and_names_the_rendezvous():
    (unit,) = units(0)
    options, program = numactl_reading(unit["argv"])
    assert options == {"cpunodebind": "0", "membind": "0"}  # per worker: API server on the first stage
    flags = vllm_options(program[3:])
    assert flags["--tensor-parallel-size"] == ["4"] and flags["--pipeline-parallel-size"] == ["4"]
    assert (flags["--nnodes"], flags["--node-rank"], flags["--master-addr"], flags["--master-port"]) == (
        ["2"], ["0"], ["10.0.0.1"], ["29501"])
    assert flags["--port"] == ["8000"] and "--headless" not in flags
    assert flags["--numa-bind-nodes"] == ["0"] * 4 + ["1"] * 4
    assert unit["health_url"] == "http://127.0.0.1:8000/health"
    assert unit["exec_start_post"][0][1][1] == unit["health_url"]
    assert "node 0 of 2, head gpu-a" in unit["description"]


def test_headless_rank_waits_for_the_head_and_serves_nothing():
    (unit,) = units(1)
    flags = vllm_options(numactl_reading(unit["argv"])[1][3:])
    assert (flags["--nnodes"], flags["--node-rank"], flags["--master-addr"], flags["--master-port"]) == (
        ["2"], ["1"], ["10.0.0.1"], ["29501"])
    assert flags["--headless"] == []
    assert not {"--host", "--port", "--served-model-name"} & set(flags)
    assert unit["health_url"] == "" and unit["exec_start_post"] == [] and unit["drain"] == []
    assert unit["exec_start_pre"][-1] == ["", ["/usr/local/libexec/gpufleet/gpufleet-wait-ready",
                                               "tcp://10.0.0.1:29501", "600"]]


def test_socket_interface_is_set_on_multinode_units_only():
    (unit,) = units(1, vllm_socket_ifname="ens1f0")
    environment = dict(unit["environment"])
    assert environment["NCCL_SOCKET_IFNAME"] == environment["GLOO_SOCKET_IFNAME"] == "ens1f0"
    single = host_state.host_units([placement.plan_fleet({"h": topology.facts_from_capture(
        os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))}, tp_size=4)["instances"][0]],
        dict(VARIABLES, vllm_socket_ifname="ens1f0"))["units"][0]
    assert "NCCL_SOCKET_IFNAME" not in dict(single["environment"])


@pytest.mark.parametrize("variables,message", [
    ({"vllm_node_addresses": {}}, r"^vllm_node_addresses: lacks the head gpu-a of instance vllm-0 \(head gpu-a, "
                                  r"hosts gpu-a, gpu-b\): set gpufleet_node_address"),
    ({"vllm_node_addresses": {"gpu-a": "0.0.0.0"}}, r"^vllm_node_addresses\.gpu-a: 0\.0\.0\.0 is a wildcard"),
    ({"vllm_node_addresses": {"gpu-a": "not an address!"}}, r"^vllm_node_addresses\.gpu-a: "),
    ({"vllm_rollout_hosts": ["gpu-b"]}, r"^vllm_rollout_hosts: instance vllm-0 \(head gpu-a, hosts gpu-a, gpu-b\) "
                                        r"must roll as one, but gpu-a is not in this batch \(gpu-b\)"),
    ({"host": "gpu-c"}, r"^vllm_instances: instance vllm-0 .* is rank 1, which is gpu-b, not this host gpu-c"),
    ({"vllm_socket_ifname": "eth0; rm -rf /"}, r"^vllm_socket_ifname: must be network interface names"),
    ({"vllm_socket_ifname": "ib0", "vllm_environment": {"NCCL_SOCKET_IFNAME": "eth0"}},
     r"^vllm_environment key: must not set NCCL_SOCKET_IFNAME while vllm_socket_ifname is set"),
    ({"vllm_extra_args": {"headless": True}}, r"^vllm_extra_args key: must not set options the unit sets itself"),
    ({"vllm_extra_args": {"master_addr": "10.0.0.9"}}, r"^vllm_extra_args key: must not set options"),
])
def test_bad_multinode_input_is_refused_naming_the_variable(variables, message):
    with pytest.raises(ValueError, match=message):
        units(1, **variables)


# The probe of "Hostile input, round 2": head addresses the ranks never
# reach. Loopback is refused unless the setup says every host is this
# machine; wildcards and numeric shorthands always.


@pytest.mark.parametrize("address,allow,message", [
    ("127.0.0.1", False, r"127\.0\.0\.1 is a loopback address"),
    ("127.3.4.5", False, r"127\.3\.4\.5 is a loopback address"),
    ("::1", False, r"::1 is a loopback address"),
    # (Python before 3.13 writes IPv4-mapped addresses in hex)
    ("::ffff:127.0.0.1", False, r"::ffff:(127\.0\.0\.1|7f00:1) is a loopback address"),
    ("localhost", False, r"localhost is a loopback address"),
    ("LocalHost.", False, r"LocalHost\. is a loopback address"),
    ("gpu.localhost", False, r"gpu\.localhost is a loopback address"),
    ("0.0.0.0", True, r"0\.0\.0\.0 is a wildcard"),
    ("::", True, r":: is a wildcard"),
    ("::ffff:0.0.0.0", True, r"::ffff:(0\.0\.0\.0|0:0) is a wildcard"),
    ("0:0:0:0:0:ffff:0:0", True, r"::ffff:(0\.0\.0\.0|0:0) is a wildcard"),
    ("0.0.0.5", True, r"0\.0\.0\.5 is a wildcard"),
    ("GPU.localhost.", False, r"GPU\.localhost\. is a loopback address"),
])
def test_a_head_address_the_ranks_cannot_reach_is_refused(address, allow, message):
    for rank in (0, 1):
        with pytest.raises(ValueError, match=r"^vllm_node_addresses\.gpu-a: " + message) as info:
            units(rank, vllm_node_addresses=dict(ADDRESSES, **{"gpu-a": address}), vllm_allow_loopback_master=allow)
        assert "set gpufleet_node_address (or vllm_listen_host) of gpu-a" in str(info.value)
        assert ("vllm_allow_loopback_master" in str(info.value)) == ("loopback" in message)
        assert "instance vllm-0 (head gpu-a, hosts gpu-a, gpu-b)" in str(info.value)


@pytest.mark.parametrize("address", ["0", "127.1", "0x7f000001"])
def test_a_numeric_shorthand_head_address_is_refused_by_the_address_check(address):
    with pytest.raises(ValueError, match=r"^vllm_node_addresses\.gpu-a: must be an IPv4 address .* legacy form"):
        units(1, vllm_node_addresses=dict(ADDRESSES, **{"gpu-a": address}), vllm_allow_loopback_master=True)


@pytest.mark.parametrize("address", ["127.0.0.29", "::1", "localhost"])
def test_a_loopback_head_is_accepted_where_every_host_is_this_machine(address):
    (unit,) = units(1, vllm_node_addresses=dict(ADDRESSES, **{"gpu-a": address}), vllm_allow_loopback_master=True)
    assert unit["argv"][unit["argv"].index("--master-addr") + 1] == address
    with pytest.raises(ValueError, match="vllm_allow_loopback_master: must be a boolean"):
        units(1, vllm_node_addresses=ADDRESSES, vllm_allow_loopback_master="sometimes")


@pytest.mark.parametrize("change,message", [
    ({"nnodes": 1}, r"multinode\.nnodes: must be"),
    ({"node_rank": 2}, r"multinode\.node_rank: must be"),
    ({"hosts": ["gpu-a"]}, r"multinode\.hosts: must name nnodes \(2\) distinct hosts"),
    ({"hosts": ["gpu-a", "gpu-a"]}, r"multinode\.hosts: must name nnodes \(2\) distinct hosts"),
    ({"head": "gpu-b"}, r"multinode\.head: must be the first of hosts \(gpu-a\)"),
    ({"nnodes": 3, "hosts": ["gpu-a", "gpu-b", "gpu-c"]}, r"multinode\.nnodes: must divide pp_size 4"),
    ({"master_port": 70000}, r"multinode\.master_port: "),
])
def test_a_tampered_multinode_field_is_refused(change, message):
    instance = entry(1)
    instance["multinode"].update(change)
    with pytest.raises(ValueError, match=message):
        host_state.host_units([instance], dict(VARIABLES, vllm_node_addresses=ADDRESSES))


def test_local_gpus_are_tp_times_pp_over_nnodes():
    instance = entry(0)
    instance["gpu_indices"] = instance["gpu_indices"][:4]
    with pytest.raises(ValueError, match=r"gpu_indices: must list tp_size \* pp_size / multinode\.nnodes = 8"):
        host_state.host_units([instance], dict(VARIABLES, vllm_node_addresses=ADDRESSES))


def test_only_the_head_is_a_gateway_backend():
    plan = {"instances": [dict(entry(r), host=h, served_model_name="m", model="m") for r, h in enumerate(HOSTS)]}
    backends = gateway_view.gateway_backends(plan, ADDRESSES)
    assert [b["host"] for b in backends] == ["gpu-a"]
    assert gateway_view.gateway_api_keys(plan, {"gpu-a": "instance-key-0001", "gpu-b": ""}) == {"m": "instance-key-0001"}
    lines = table.plan_table(plan)
    assert lines[0].split()[-1] == "NODE" and lines[2].split()[-2:] == ["1/2", "gpu-a"]
