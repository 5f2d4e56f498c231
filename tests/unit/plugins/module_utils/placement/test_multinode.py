# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""fleet_plan with nodes_per_instance > 1: one vLLM instance over several hosts.

vLLM's multi-node launch gives node r the ranks r*L .. (r+1)*L - 1 (rank =
stage * tp_size + tp_rank, L = tp_size * pp_size / nnodes), so each host runs
pp_size / nnodes whole pipeline stages. Expected GPUs and nodes are read from
the recorded facts, not from the plan.
"""

from __future__ import annotations

import copy
import json
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.filter.placement import fleet_plan, socket_local_groups
from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import drift as audit_drift
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import backends as gateway_view
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import (
    VARIABLES,
    numactl_reading,
    vllm_options,
)

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
_CACHE = {}


def machine(name):
    if name not in _CACHE:
        _CACHE[name] = topology.facts_from_capture(os.path.join(MACHINES, name, "capture.yml"))
    return copy.deepcopy(_CACHE[name])


def named(facts, name):
    """The facts with every GPU named (the topo -m captures do not name them)."""
    for gpu in facts["gpus"]:
        gpu["name"] = name
    return facts


def fleet(name, hosts):
    return dict((h, machine(name)) for h in hosts)


def gpu_nodes(facts):
    return dict((g["index"], g["numa_node"]) for g in facts["gpus"])


def no_nic(host, nodes):
    """The warning record of a share with no NIC on its nodes: the nodes it names are its nodes field."""
    return {"host": host, "text": "multi-node instance vllm-0 (head gpu-a): no NIC on NUMA node(s) %s of its GPUs in "
            "the facts; NCCL traffic leaves through whatever interface NCCL picks (set gpufleet_socket_ifname)" % nodes,
            "gpus": [], "nodes": [int(n) for n in nodes.split(",")]}


# ---------------------------------------------------------------- plans


def test_h100_tp4_pp4_over_two_hosts_two_stages_each():
    hosts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"])
    plan = placement.plan_fleet(hosts, tp_size=4, pp_size=4, nodes_per_instance=2)
    nodes = gpu_nodes(hosts["gpu-a"])
    assert [i["host"] for i in plan["instances"]] == ["gpu-a", "gpu-b"]
    for rank, entry in enumerate(plan["instances"]):
        assert entry["multinode"] == {"nnodes": 2, "node_rank": rank, "head": "gpu-a", "hosts": ["gpu-a", "gpu-b"],
                                      "master_port": 29501, "nics": []}
        assert (entry["name"], entry["ordinal"], entry["port"], entry["dist_port"], entry["dist_port_range"]) == (
            "vllm-0", 0, 8000, 29000, [29000, 29099])
        # vLLM's flags take the instance's totals; the host holds tp * pp / nnodes GPUs
        assert (entry["tp_size"], entry["pp_size"]) == (4, 4)
        assert entry["gpu_indices"] == list(range(8))
        assert [s["gpu_indices"] for s in entry["stages"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        # one local stage per socket: every tensor-parallel group on one NUMA node
        assert [s["numa_nodes"] for s in entry["stages"]] == [[nodes[0]], [nodes[4]]] == [[0], [1]]
        assert entry["cpus"] == "0-191"
        binding = entry["binding"]
        assert binding["mode"] == "per_worker"
        assert [(w["gpu_index"], w["node"]) for w in binding["workers"]] == [(i, nodes[i]) for i in range(8)]
        assert (binding["mems"], binding["cpus"]) == ([0], "0-47,96-143")
    assert plan["unused"] == []
    assert plan["warnings"] == [no_nic("gpu-a", "0,1"), no_nic("gpu-b", "0,1")]
    assert plan["totals"] == {"hosts": 2, "instances": 1, "gpus": 16, "gpus_used": 16, "gpus_unused": 0}


def test_each_host_share_is_the_single_host_plan_of_its_stages():
    hosts = fleet("mi300x_8gpu_xgmi", ["gpu-a", "gpu-b"])
    plan = placement.plan_fleet(hosts, tp_size=2, pp_size=4, nodes_per_instance=2)
    alone = placement.plan_fleet({"gpu-a": hosts["gpu-a"]}, tp_size=2, pp_size=2, max_instances_per_host=1)
    (single,) = alone["instances"]
    for entry in plan["instances"]:
        share = dict(entry)
        multinode = share.pop("multinode")
        assert share == dict(single, host=entry["host"], pp_size=4)
        assert len(entry["gpu_indices"]) == entry["tp_size"] * entry["pp_size"] // multinode["nnodes"]


def test_tp4_pp2_one_stage_per_host_on_the_first_socket():
    hosts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"])
    plan = placement.plan_fleet(hosts, tp_size=4, pp_size=2, nodes_per_instance=2)
    for rank, entry in enumerate(plan["instances"]):
        assert entry["gpu_indices"] == [0, 1, 2, 3]
        assert [s["numa_nodes"] for s in entry["stages"]] == [[0]]
        assert (entry["cpus"], entry["tp_size"], entry["pp_size"]) == ("0-47,96-143", 4, 2)
        assert entry["binding"]["mode"] == "process"  # one local stage: bound as a single-stage instance
        assert entry["multinode"]["node_rank"] == rank
    reason = ("max_instances_per_host (1) reached: a host holds one share of one multi-node instance "
              "(nodes_per_instance 2)")
    assert plan["unused"] == [{"host": h, "id": "GPU%d" % i, "index": i, "reason": reason}
                              for h in ("gpu-a", "gpu-b") for i in range(4, 8)]
    assert plan["warnings"] == [no_nic("gpu-a", "0"), no_nic("gpu-b", "0")]
    assert plan["totals"] == {"hosts": 2, "instances": 1, "gpus": 16, "gpus_used": 8, "gpus_unused": 8}


def test_hosts_taken_in_planning_order_and_the_one_left_over_is_unused():
    hosts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b", "gpu-c"])
    plan = placement.plan_fleet(hosts, tp_size=4, pp_size=4, nodes_per_instance=2, hosts=["gpu-c", "gpu-a", "gpu-b"])
    assert [(i["host"], i["multinode"]["node_rank"], i["multinode"]["head"]) for i in plan["instances"]] == [
        ("gpu-c", 0, "gpu-c"), ("gpu-a", 1, "gpu-c")]
    assert plan["instances"][0]["multinode"]["hosts"] == ["gpu-c", "gpu-a"]
    reason = "not enough hosts for another 2-host instance (nodes_per_instance 2)"
    assert plan["unused"] == [{"host": "gpu-b", "id": "GPU%d" % i, "index": i, "reason": reason} for i in range(8)]
    assert plan["warnings"][-1] == {"host": "gpu-b", "gpus": [], "nodes": [], "text": (
        "nodes_per_instance 2: 3 host(s) make 1 instance(s); gpu-b left over with no instance, "
        "their GPUs unused (add hosts or plan them in another group)")}
    assert len(plan["warnings"]) == 3
    assert plan["totals"] == {"hosts": 3, "instances": 1, "gpus": 24, "gpus_used": 16, "gpus_unused": 8}


def test_four_hosts_make_two_instances_that_share_no_host():
    names = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    plan = placement.plan_fleet(fleet("h100_sxm_8gpu_nvswitch", names), tp_size=4, pp_size=4, nodes_per_instance=2)
    assert [(i["host"], i["multinode"]["hosts"], i["multinode"]["node_rank"]) for i in plan["instances"]] == [
        ("gpu-a", ["gpu-a", "gpu-b"], 0), ("gpu-b", ["gpu-a", "gpu-b"], 1),
        ("gpu-c", ["gpu-c", "gpu-d"], 0), ("gpu-d", ["gpu-c", "gpu-d"], 1)]
    assert plan["totals"]["instances"] == 2
    # every entry owns its lists: editing one plan entry never edits another
    plan["instances"][0]["multinode"]["hosts"].append("x")
    assert plan["instances"][1]["multinode"]["hosts"] == ["gpu-a", "gpu-b"]


def test_four_hosts_one_stage_each():
    names = ["n0", "n1", "n2", "n3"]
    plan = placement.plan_fleet(fleet("rtx4090_8gpu_pcie_switch_quads", names), tp_size=4, pp_size=4,
                                nodes_per_instance=4, master_port=29600)
    assert [(i["multinode"]["node_rank"], i["gpu_indices"], i["worst_link"]) for i in plan["instances"]] == [
        (r, [0, 1, 2, 3], "PIX") for r in range(4)]
    assert all(i["multinode"]["master_port"] == 29600 and i["multinode"]["nnodes"] == 4 for i in plan["instances"])


def test_nics_of_the_share_nodes_come_from_the_facts():
    hosts = fleet("mi300x_8gpu_xgmi", ["gpu-a", "gpu-b"])
    facts_nics = hosts["gpu-a"]["nics"]
    both = placement.plan_fleet(hosts, tp_size=4, pp_size=4, nodes_per_instance=2)
    assert both["instances"][0]["multinode"]["nics"] == [
        {"id": n["id"], "interfaces": n["interfaces"], "numa_node": n["numa_node"]} for n in facts_nics]
    assert len(facts_nics) == 8 and both["warnings"] == []
    one = placement.plan_fleet(hosts, tp_size=4, pp_size=2, nodes_per_instance=2)
    node = one["instances"][0]["numa_nodes"]
    assert node == [0]
    assert one["instances"][0]["multinode"]["nics"] == [
        {"id": n["id"], "interfaces": n["interfaces"], "numa_node": 0} for n in facts_nics if n["numa_node"] == 0]


def test_a_share_without_a_named_nic_on_its_nodes_warns():
    hosts = fleet("mi300x_8gpu_xgmi", ["gpu-a", "gpu-b"])
    # gpu-b: its node-0 NICs lose their interface names; its node-1 NICs do not count for a node-0 share
    for nic in hosts["gpu-b"]["nics"]:
        if nic["numa_node"] == 0:
            nic["interfaces"] = []
    plan = placement.plan_fleet(hosts, tp_size=4, pp_size=2, nodes_per_instance=2)
    assert plan["warnings"] == [no_nic("gpu-b", "0")]
    assert [n["interfaces"] for n in plan["instances"][1]["multinode"]["nics"]] == [[], [], [], []]


@pytest.mark.parametrize("nics, message", [
    ("eth0", "host gpu-b: numa_topology.nics must be a list, got 'eth0'"),
    (["eth0"], "host gpu-b: numa_topology.nics[0] must be a mapping, got 'eth0'"),
    ([{"id": "", "interfaces": [], "numa_node": 0}], "numa_topology.nics[0].id must be a non-empty string"),
    ([{"id": "n", "interfaces": "eth0", "numa_node": 0}], "nics[0].interfaces must be a list of interface names"),
    ([{"id": "n", "interfaces": [], "numa_node": "0"}], "nics[0].numa_node must be an integer or null, got '0'"),
])
def test_bad_nics_name_the_host_and_field(nics, message):
    hosts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"])
    hosts["gpu-b"]["nics"] = nics
    with pytest.raises(placement.PlacementError) as info:
        placement.plan_fleet(hosts, tp_size=4, pp_size=2, nodes_per_instance=2)
    assert message in str(info.value)


def test_exclusions_are_per_host_and_a_host_whose_share_does_not_fit_is_named():
    hosts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"])
    plan = placement.plan_fleet(hosts, tp_size=4, pp_size=2, nodes_per_instance=2, exclude_gpus={"gpu-b": ["GPU1"]})
    assert [i["gpu_indices"] for i in plan["instances"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert {"host": "gpu-b", "id": "GPU1", "index": 1, "reason": "excluded by exclude_gpus"} in plan["unused"]
    with pytest.raises(placement.PlacementError) as info:
        placement.plan_fleet(hosts, tp_size=4, pp_size=4, nodes_per_instance=2, exclude_gpus={"gpu-b": ["GPU1"]})
    assert str(info.value) == ("host gpu-b: pp_size 2 x tp_size 4 needs 2 groups of 4 GPUs; only 1 fit "
                               "(nodes_per_instance 2: each host runs pp_size 4 / 2 = 2 pipeline stage(s))")


# ---------------------------------------------------------------- refusals


def test_hosts_of_different_shapes_are_refused_naming_each_shape():
    hosts = {"gpu-a": named(machine("h100_sxm_8gpu_nvswitch"), "NVIDIA H100 80GB HBM3"),
             "gpu-b": named(machine("h100_sxm_8gpu_nvswitch"), "NVIDIA H100 80GB HBM3"),
             "gpu-c": machine("power8_minsky_p100")}
    with pytest.raises(placement.PlacementError) as info:
        placement.plan_fleet(hosts, tp_size=2, pp_size=2, nodes_per_instance=2)
    assert str(info.value) == (
        "nodes_per_instance 2: hosts differ in shape (8 x NVIDIA H100 80GB HBM3: gpu-a, gpu-b; "
        "4 x Tesla P100-SXM2-16GB: gpu-c); plan them in separate groups")


def test_same_count_other_gpu_model_is_another_shape():
    hosts = {"gpu-a": named(machine("h100_sxm_8gpu_nvswitch"), "NVIDIA H100 80GB HBM3"),
             "gpu-b": machine("azure_ndv4_like")}
    with pytest.raises(placement.PlacementError, match=r"\(8 x NVIDIA H100 80GB HBM3: gpu-a; "
                                                       r"8 x NVIDIA A100-SXM4-40GB: gpu-b\)"):
        placement.plan_fleet(hosts, tp_size=2, pp_size=2, nodes_per_instance=2, allow_span=True)


def test_a_host_with_gpus_of_two_models_shows_both():
    mixed = named(machine("h100_sxm_8gpu_nvswitch"), "B")
    for gpu in mixed["gpus"][:3]:
        gpu["name"] = "A"
    hosts = {"gpu-a": mixed, "gpu-b": named(machine("h100_sxm_8gpu_nvswitch"), "B"),
             "gpu-c": machine("h100_sxm_8gpu_nvswitch")}
    with pytest.raises(placement.PlacementError, match=r"\(3 x A \+ 5 x B: gpu-a; 8 x B: gpu-b; "
                                                       r"8 x \(name unknown\): gpu-c\)"):
        placement.plan_fleet(hosts, tp_size=2, pp_size=2, nodes_per_instance=2)


@pytest.mark.parametrize("options, message", [
    ({"pp_size": 3}, "pp_size 3 is not a multiple of nodes_per_instance 2"),
    ({"pp_size": 1}, "pp_size 1 is not a multiple of nodes_per_instance 2"),
    ({"nodes_per_instance": 0}, "nodes_per_instance must be an integer >= 1, got 0"),
    ({"nodes_per_instance": "2"}, "nodes_per_instance must be an integer >= 1, got '2'"),
    ({"nodes_per_instance": True}, "nodes_per_instance must be an integer >= 1, got True"),
    ({"nodes_per_instance": 2.0}, "nodes_per_instance must be an integer >= 1, got 2.0"),
    ({"master_port": 0}, "master_port must be an integer from 1 to 65535, got 0"),
    ({"master_port": 65536}, "master_port must be an integer from 1 to 65535, got 65536"),
    ({"master_port": "29501"}, "master_port must be an integer from 1 to 65535, got '29501'"),
    ({"max_instances_per_host": 2}, "max_instances_per_host 2 cannot be used with nodes_per_instance 2: a host holds "
                                    "at most one multi-node instance, one per host by construction"),
    ({"master_port": 8000}, "master_port 8000 equals base_port 8000, the API port of each host's instance; "
                            "move master_port or base_port"),
    ({"master_port": 9000, "base_port": 9000}, "master_port 9000 equals base_port 9000"),
    ({"master_port": 29000}, "master_port 29000 falls inside the VLLM_PORT range 29000-29099 of each host's "
                             "instance (dist_port_base 29000, dist_port_stride 100); move master_port or "
                             "dist_port_base"),
    ({"master_port": 29099}, "master_port 29099 falls inside the VLLM_PORT range 29000-29099"),
    ({"master_port": 29501, "dist_port_base": 29500, "dist_port_stride": 10}, "inside the VLLM_PORT range 29500-29509"),
])
def test_refusals_name_the_option(options, message):
    options = dict({"tp_size": 4, "pp_size": 2, "nodes_per_instance": 2}, **options)
    with pytest.raises(placement.PlacementError) as info:
        placement.plan_fleet(fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"]), **options)
    assert message in str(info.value)


@pytest.mark.parametrize("options", [{"master_port": 29100}, {"master_port": 7999}, {"max_instances_per_host": 1},
                                     {"max_instances_per_host": None}])
def test_ports_next_to_the_ranges_and_a_cap_of_one_are_accepted(options):
    options = dict({"tp_size": 4, "pp_size": 2, "nodes_per_instance": 2}, **options)
    plan = placement.plan_fleet(fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"]), **options)
    assert plan["instances"][0]["multinode"]["master_port"] == options.get("master_port", 29501)


def test_fewer_hosts_than_nodes_per_instance_is_refused():
    with pytest.raises(placement.PlacementError) as info:
        placement.plan_fleet(fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"]), tp_size=4, pp_size=3,
                             nodes_per_instance=3)
    assert str(info.value) == "nodes_per_instance 3 needs at least 3 hosts, got 2 (gpu-a, gpu-b)"


def test_the_single_host_planner_does_not_take_the_fleet_options():
    for option in ("nodes_per_instance", "master_port"):
        with pytest.raises(placement.PlacementError, match=r"unknown option\(s\): %s" % option):
            placement.plan_host(machine("h100_sxm_8gpu_nvswitch"), tp_size=4, **{option: 2})
        with pytest.raises(AnsibleFilterError, match=r"unknown option\(s\): %s" % option):
            socket_local_groups(machine("h100_sxm_8gpu_nvswitch"), 4, **{option: "2"})


# ---------------------------------------------------------------- one host per instance: unchanged


@pytest.mark.parametrize("options", [
    {"tp_size": 2},
    {"tp_size": 4, "pp_size": 2},
    {"tp_size": 1, "base_port": 29501, "dist_port_base": 30000},
])
def test_nodes_per_instance_1_is_the_plan_without_the_option(options):
    hosts = dict(fleet("h100_sxm_8gpu_nvswitch", ["gpu-a"]), **fleet("rtx4090_8gpu_pcie_switch_quads", ["gpu-b"]))
    without = placement.plan_fleet(hosts, **options)
    # master_port is not read (nor checked against the ports) without multi-node instances
    explicit = placement.plan_fleet(hosts, nodes_per_instance=1, master_port=29501, **options)
    assert json.dumps(explicit, sort_keys=True) == json.dumps(without, sort_keys=True)
    assert not any("multinode" in i for i in without["instances"])


def test_the_same_input_gives_the_same_plan():
    names = ["gpu-c", "gpu-a", "gpu-d", "gpu-b"]
    hosts = fleet("mi300x_8gpu_xgmi", names)
    first = placement.plan_fleet(hosts, tp_size=2, pp_size=4, nodes_per_instance=2)
    placement.clear_cache()
    again = placement.plan_fleet(dict(reversed(list(hosts.items()))), tp_size=2, pp_size=4, nodes_per_instance=2)
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)
    assert [i["host"] for i in first["instances"]] == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]


# ---------------------------------------------------------------- filters and per-host settings


def test_fleet_plan_filter_takes_the_options_as_strings():
    hosts = dict((h, {"ansible_facts": {"numa_topology": f}})
                 for h, f in fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"]).items())
    plan = fleet_plan(hosts, "4", pp_size="2", nodes_per_instance="2", master_port="29600")
    assert [i["multinode"]["master_port"] for i in plan["instances"]] == [29600, 29600]
    with pytest.raises(AnsibleFilterError, match="fleet_plan: nodes_per_instance must be an integer >= 1, got 'two'"):
        fleet_plan(hosts, 4, pp_size=2, nodes_per_instance="two")


def _hostvars(facts, **per_host):
    return dict((h, dict(per_host.get(h, {}), ansible_facts={"numa_topology": facts[h]})) for h in facts)


def test_fleet_plan_by_host_forms_instances_among_hosts_with_the_same_settings():
    facts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b", "gpu-c"])
    multi = {"gpufleet_tp_size": 4, "gpufleet_pp_size": "4", "gpufleet_nodes_per_instance": "2",
             "gpufleet_master_port": 29700}
    result = fleet_plan_by_host(_hostvars(facts, **{"gpu-a": multi, "gpu-b": multi, "gpu-c": {"gpufleet_tp_size": 4}}))
    assert [(i["host"], i["name"], i.get("multinode", {}).get("node_rank")) for i in result["instances"]] == [
        ("gpu-a", "vllm-0", 0), ("gpu-b", "vllm-0", 1), ("gpu-c", "vllm-0", None), ("gpu-c", "vllm-1", None)]
    assert result["instances"][0]["multinode"]["master_port"] == 29700
    assert result["settings"]["gpu-a"]["nodes_per_instance"] == 2 and result["settings"]["gpu-a"]["pp_size"] == 4
    assert (result["settings"]["gpu-c"]["nodes_per_instance"], result["settings"]["gpu-c"]["master_port"]) == (1, 29501)
    assert result["totals"] == {"hosts": 3, "instances": 3, "gpus": 24, "gpus_used": 24, "gpus_unused": 0}


def test_hosts_that_differ_only_in_excluded_gpus_still_form_one_instance():
    facts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"])
    multi = {"gpufleet_tp_size": 4, "gpufleet_pp_size": 2, "gpufleet_nodes_per_instance": 2}
    host_vars = _hostvars(facts, **{"gpu-a": dict(multi, gpufleet_exclude_gpus={"gpu-a": ["GPU2"]}),
                                    "gpu-b": dict(multi, gpufleet_exclude_gpus={"gpu-a": ["GPU2"]})})
    result = fleet_plan_by_host(host_vars)
    assert [(i["host"], i["gpu_indices"], i["multinode"]["node_rank"]) for i in result["instances"]] == [
        ("gpu-a", [4, 5, 6, 7], 0), ("gpu-b", [0, 1, 2, 3], 1)]
    assert (result["settings"]["gpu-a"]["exclude_gpus"], result["settings"]["gpu-b"]["exclude_gpus"]) == (["GPU2"], [])


@pytest.mark.parametrize("variables, message", [
    ({"gpufleet_nodes_per_instance": 0}, "host gpu-a: gpufleet_nodes_per_instance: must be at least 1 (got 0)"),
    ({"gpufleet_nodes_per_instance": True},
     "host gpu-a: gpufleet_nodes_per_instance: must be an integer, not a boolean"),
    ({"gpufleet_master_port": 70000}, "host gpu-a: gpufleet_master_port: must be at most 65535"),
    ({"gpufleet_nodes_per_instance": 2, "gpufleet_pp_size": 3},
     "pp_size 3 is not a multiple of nodes_per_instance 2"),
])
def test_fleet_plan_by_host_names_host_and_variable(variables, message):
    facts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"])
    with pytest.raises(AnsibleFilterError) as info:
        fleet_plan_by_host(_hostvars(facts, **{"gpu-a": variables, "gpu-b": variables}))
    assert message in str(info.value)


def test_the_kept_plan_counts_a_multi_node_instance_once():
    facts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b", "gpu-c"])
    fresh = placement.plan_fleet(facts, tp_size=4, pp_size=2, nodes_per_instance=2, hosts=["gpu-a", "gpu-b"])
    merged = plan_artifact.merge_plans(fresh, None, ["gpu-a", "gpu-b"], sorted(facts))["plan"]
    assert merged["totals"] == fresh["totals"] == {"hosts": 2, "instances": 1, "gpus": 16, "gpus_used": 8,
                                                   "gpus_unused": 8}
    # a later run re-plans gpu-c alone, one instance per socket, and keeps the multi-node instance
    again = plan_artifact.merge_plans(placement.plan_fleet({"gpu-c": facts["gpu-c"]}, tp_size=4), merged, ["gpu-c"],
                                      sorted(facts))["plan"]
    assert again["totals"] == {"hosts": 3, "instances": 3, "gpus": 24, "gpus_used": 16, "gpus_unused": 8}


# ---------------------------------------------------------------- what the roles make of the entries


def test_planned_entries_are_the_units_of_each_host_and_only_heads_are_backends():
    names = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    addresses = dict((h, "10.0.0.%d" % (i + 1)) for i, h in enumerate(names))
    plan = placement.plan_fleet(fleet("h100_sxm_8gpu_nvswitch", names), tp_size=4, pp_size=4, nodes_per_instance=2,
                                master_port=29600)
    for entry in plan["instances"]:
        (unit,) = host_state.host_units([entry], dict(VARIABLES, host=entry["host"], vllm_node_addresses=addresses,
                                                      vllm_rollout_hosts=names))["units"]
        flags = vllm_options(numactl_reading(unit["argv"])[1][3:])
        head = entry["multinode"]["head"]
        assert (flags["--nnodes"], flags["--node-rank"], flags["--master-addr"], flags["--master-port"]) == (
            ["2"], [str(entry["multinode"]["node_rank"])], [addresses[head]], ["29600"])
        assert (flags["--tensor-parallel-size"], flags["--pipeline-parallel-size"]) == (["4"], ["4"])
        assert flags["--numa-bind-nodes"] == ["0"] * 4 + ["1"] * 4
        assert ("--headless" in flags) == (entry["host"] != head)
    served = [dict(i, served_model_name="m", model="m") for i in plan["instances"]]
    backends = gateway_view.gateway_backends(dict(plan, instances=served), addresses)
    assert [b["host"] for b in backends] == ["gpu-a", "gpu-c"]


def test_the_audit_replans_a_host_as_its_share_of_the_instance():
    facts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"])
    settings = dict((h, {"tp_size": 4, "pp_size": 4, "nodes_per_instance": 2}) for h in facts)
    fresh = dict(placement.plan_fleet(facts, tp_size=4, pp_size=4, nodes_per_instance=2), settings=settings)
    kept = plan_artifact.merge_plans(fresh, None, sorted(facts), sorted(facts))["plan"]
    for host in ("gpu-a", "gpu-b"):
        instances, options, dummy = audit_drift.deployed_for_host(kept, host)
        assert options == {"tp_size": 4, "pp_size": 2, "max_instances_per_host": 1}
        result = audit_result.audit_host(facts[host], None, host=host, deployed=kept)
        assert [f["code"] for f in result["findings"] if f["code"].startswith("replan")] == []
        assert [g["gpu_indices"] for g in result["today_plan"]["groups"]] == [instances[0]["gpu_indices"]]


def test_an_instance_over_hosts_of_two_device_classes_is_refused():
    hosts = fleet("h100_sxm_8gpu_nvswitch", ["gpu-a", "gpu-b"])
    for gpu in hosts["gpu-b"]["gpus"]:
        gpu["vendor"] = "amd"  # the same shape on AMD GPUs
    with pytest.raises(placement.PlacementError, match=r"^nodes_per_instance 2: hosts gpu-a and gpu-b of one instance "
                                                       r"serve on nvidia and amd GPUs \(gpufleet_device_class\)"):
        placement.plan_fleet(hosts, tp_size=4, pp_size=4, nodes_per_instance=2)
    for gpu in hosts["gpu-a"]["gpus"]:
        gpu["vendor"] = "amd"
    plan = placement.plan_fleet(hosts, tp_size=4, pp_size=4, nodes_per_instance=2)
    assert [(i["host"], i["device"]) for i in plan["instances"]] == [("gpu-a", "amd"), ("gpu-b", "amd")]
