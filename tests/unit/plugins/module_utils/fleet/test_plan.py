# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The planning use case of a deploy run (fleet/plan.py): the run it starts
from the kept plan and the hosts' variables, on recorded machines."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.fleet_runs import FLEET, deployed, hostvars, machine_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import plan as fleet_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import run as fleet_run
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology


@pytest.fixture(scope="module")
def facts():
    return machine_facts()


def test_a_multi_node_instance_hands_each_host_its_heads_address():
    capture = os.path.join(fixture_paths.MACHINES, "this_machine_2gpu_synthetic", "capture.yml")
    facts = topology.facts_from_capture(capture)
    variables = dict((h, {"ansible_facts": {"numa_topology": facts}, "gpufleet_tp_size": 1, "gpufleet_pp_size": 2,
                          "gpufleet_nodes_per_instance": 2, "vllm_listen_host": "10.0.1.%d" % n})
                     for n, h in ((1, "m1"), (2, "m2"), (3, "m3")))
    variables["m1"]["gpufleet_node_address"] = "192.168.7.1"
    ctx = {"fleet": ["m1", "m2", "m3"], "gateways": [], "inventory": ["m1", "m2", "m3"], "in_run": ["m1", "m2"]}
    run = fleet_plan.propose(variables, {"m1": facts, "m2": facts}, None, "/k/plan.json", ["m1", "m2"], ctx)
    # the head's gpufleet_node_address (not its listen address) for both hosts of the instance
    assert run["slices"]["m1"]["node_addresses"] == {"m1": "192.168.7.1"}
    assert run["slices"]["m2"]["node_addresses"] == {"m1": "192.168.7.1"}
    assert run["slices"]["m3"] == fleet_run.EMPTY_SLICE
    assert run["summary"]["not_planned"] == ["m3"]


def test_a_run_whose_planning_play_did_not_run_is_loaded_from_the_record(facts):
    kept = deployed(facts)
    run = fleet_plan.load(hostvars(facts), kept, "/k/plan.json", True, {"fleet": FLEET, "gateways": ["lb"]})
    assert run["proposal"]["instances"] and all("deployed" not in i for i in run["proposal"]["instances"])
    assert run["record"] == artifact.load_artifact(kept) == run["record_before"]
    assert run["in_run"] is None and run["leaving"] == []
    assert [i["name"] for i in run["slices"]["h100"]["instances"]] == ["vllm-0", "vllm-1"]
    # the report's own hosts stand for the hosts in the run
    lines = fleet_run.report(run, ["lb"], [], "finish")
    assert lines[0].startswith("kept: h100: not in this run (--limit)")
    assert fleet_plan.load({}, "", "/k/plan.json", False, {"fleet": FLEET, "gateways": []})["record"]["hosts"] == {}
    with pytest.raises(ValueError, match="/k/plan.json"):
        fleet_plan.load({}, "", "/k/plan.json", True, {"fleet": FLEET, "gateways": []})


def test_listen_addresses_take_the_node_address_for_partners(facts):
    variables = hostvars(facts, others={})
    variables["rtx4090"]["gpufleet_node_address"] = "192.168.0.9"
    del variables["h100"]["vllm_listen_host"]
    addresses, nodes = fleet_plan.listen_addresses(variables, FLEET + ["absent"])
    assert addresses == {"h100": "", "rtx4090": "10.0.0.2", "absent": ""}
    assert nodes == {"h100": "", "rtx4090": "192.168.0.9", "absent": ""}
