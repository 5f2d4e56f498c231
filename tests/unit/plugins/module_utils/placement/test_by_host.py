# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""exclude_gpus by any name a GPU goes by, and a host that cannot be planned set apart
(placement/exclude.py, placement/by_host.py; docs/deploy.md)."""

from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host, merge_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact, report
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology


def _machine(folder):
    return topology.facts_from_capture(os.path.join(fixture_paths.MACHINES, folder, "capture.yml"))


@pytest.fixture(scope="module")
def machines():
    # mi300x: bus ids, sockets known; azure_ndv4_like: A100, 4 NUMA nodes of 2 GPUs, sockets unknown, UUIDs
    return {"mi300x": _machine("mi300x_8gpu_xgmi"), "ndv4": _machine("azure_ndv4_like"),
            "h100": _machine("h100_sxm_8gpu_nvswitch")}


def host_vars(facts, **variables):
    return dict({"ansible_facts": {"numa_topology": facts}}, **variables)


def _excluded(plan, host):
    return sorted(u["id"] for u in plan["unused"] if u["host"] == host and u["reason"] == "excluded by exclude_gpus")


@pytest.mark.parametrize("entry", [2, "2", " 2", "GPU2", "gpu2", "0000:1e:00.0", "0000:1E:00.0", "1e:00.0",
                                   "00000000:1E:00.0"])
def test_every_exclude_form_names_the_same_gpu(machines, entry):
    plan = fleet_plan_by_host({"gpu-a": host_vars(machines["mi300x"], gpufleet_exclude_gpus=[entry])})
    assert plan["unplannable"] == {}
    assert _excluded(plan, "gpu-a") == ["0000:1e:00.0"]
    assert all("0000:1e:00.0" not in [g["id"] for g in i["gpus"]] for i in plan["instances"])
    # the kept plan's options hold the one form the planner used
    assert plan["settings"]["gpu-a"]["exclude_gpus"] == ["0000:1e:00.0"]


def test_a_uuid_in_any_case_names_its_gpu(machines):
    uuid = machines["ndv4"]["gpus"][3]["uuid"]
    plan = fleet_plan_by_host({"gpu-a": host_vars(machines["ndv4"], gpufleet_exclude_gpus=[uuid.upper()])})
    assert _excluded(plan, "gpu-a") == [machines["ndv4"]["gpus"][3]["id"]]


def test_an_index_excluded_now_re_forms_the_deployed_instance_that_held_it(machines):
    fleet = {"gpu-a": host_vars(machines["mi300x"], gpufleet_tp_size=2)}
    first = fleet_plan_by_host(fleet)
    kept = artifact.dump_artifact(merge_plan(first, None, ["gpu-a"], ["gpu-a"])["plan"])
    fleet["gpu-a"] = dict(fleet["gpu-a"], gpufleet_exclude_gpus=["2"])
    again = fleet_plan_by_host(fleet, deployed=kept)
    assert all(2 not in i["gpu_indices"] for i in again["instances"])
    holder = [i["name"] for i in first["instances"] if 2 in i["gpu_indices"]]
    untouched = [i for i in first["instances"] if i["name"] not in holder]
    again_by_name = dict((i["name"], i) for i in again["instances"])
    assert all(again_by_name[i["name"]]["gpus"] == i["gpus"] for i in untouched)


def test_an_unmatched_entry_leaves_only_its_host_out(machines):
    fleet = {"gpu-a": host_vars(machines["mi300x"], gpufleet_exclude_gpus=["0000:99:00.0"]),
             "gpu-b": host_vars(machines["mi300x"])}
    plan = fleet_plan_by_host(fleet)
    assert sorted(plan["unplannable"]) == ["gpu-a"] and "'0000:99:00.0'" in plan["unplannable"]["gpu-a"]
    assert set(i["host"] for i in plan["instances"]) == {"gpu-b"}


@pytest.mark.parametrize("entry", [True, 1.5, None, -1])
def test_an_exclude_entry_of_no_gpu_form_says_what_forms_are(machines, entry):
    with pytest.raises(AnsibleFilterError, match=r"host gpu-a: gpufleet_exclude_gpus\[0\]: must be a GPU index "
                                                 r"\(0, 1, \.\.\.\), a PCI bus id, a UUID or GPU<n> \(got "):
        fleet_plan_by_host({"gpu-a": host_vars(machines["mi300x"], gpufleet_exclude_gpus=[entry])})


def _bad_facts(facts):
    return dict(facts, schema_version=99)


def test_one_host_that_cannot_be_planned_never_stops_the_others(machines):
    fleet = dict(("gpu-%d" % n, host_vars(machines["h100"], gpufleet_tp_size=4)) for n in range(4))
    fleet["a100-new"] = host_vars(machines["ndv4"], gpufleet_tp_size=4)  # 2 GPUs per NUMA node
    fleet["broken"] = host_vars(_bad_facts(machines["h100"]), gpufleet_tp_size=4)
    plan = fleet_plan_by_host(fleet)
    assert sorted(plan["unplannable"]) == ["a100-new", "broken"]
    assert set(i["host"] for i in plan["instances"]) == set("gpu-%d" % n for n in range(4))
    assert sorted(plan["settings"]) == sorted(plan["hardware"]) == ["gpu-%d" % n for n in range(4)]
    for host, why in plan["unplannable"].items():
        assert why.startswith("host %s: " % host) and "gpu-" not in why  # names only the host concerned
    assert "schema_version is 99" in plan["unplannable"]["broken"]
    why = plan["unplannable"]["a100-new"]
    assert "does not fit on any NUMA node (at most 2 placeable GPUs share one)" in why and "socket" not in why


def test_a_tp_that_fits_no_socket_still_says_socket_where_sockets_are_known(machines):
    plan = fleet_plan_by_host({"gpu-a": host_vars(machines["mi300x"], gpufleet_tp_size=8)})
    assert "does not fit on any socket (at most 4 placeable GPUs share one)" in plan["unplannable"]["gpu-a"]


def test_a_fleet_where_no_host_can_be_planned_plans_nothing(machines):
    plan = fleet_plan_by_host({"gpu-a": host_vars(machines["ndv4"], gpufleet_tp_size=16)})
    assert plan["instances"] == [] and sorted(plan["unplannable"]) == ["gpu-a"]


def test_merge_plan_keeps_the_recorded_instances_of_an_unplannable_host(machines):
    fleet = {"gpu-a": host_vars(machines["h100"], gpufleet_tp_size=4),
             "gpu-b": host_vars(machines["h100"], gpufleet_tp_size=4)}
    first = merge_plan(fleet_plan_by_host(fleet), None, ["gpu-a", "gpu-b"], ["gpu-a", "gpu-b"])["plan"]
    kept_text = artifact.dump_artifact(first)
    fleet["gpu-b"] = dict(fleet["gpu-b"], gpufleet_tp_size=16)
    fresh = fleet_plan_by_host(fleet, deployed=kept_text)
    merged = merge_plan(fresh, kept_text, ["gpu-a", "gpu-b"], ["gpu-a", "gpu-b"])
    assert merged["replanned"] == ["gpu-a"] and merged["kept"] == ["gpu-b"]
    assert sorted(merged["unplannable"]) == ["gpu-b"]
    assert ([i for i in merged["plan"]["instances"] if i["host"] == "gpu-b"]
            == [i for i in first["instances"] if i["host"] == "gpu-b"])
    assert merged["plan"]["hosts"]["gpu-b"] == first["hosts"]["gpu-b"]


def test_the_report_says_why_a_host_is_unplannable_and_what_it_keeps(machines):
    fleet = {"gpu-a": host_vars(machines["h100"], gpufleet_tp_size=4)}
    record = merge_plan(fleet_plan_by_host(fleet), None, ["gpu-a"], ["gpu-a"])["plan"]
    context = {"fleet": ["gpu-a"], "in_run": ["gpu-a"], "failed": [], "converged": [], "removed": [],
               "gateways": [], "gateway_configured": False, "finish": "x",
               "unplannable": {"gpu-a": "host gpu-a: tp_size 16 exceeds the 8 placeable GPUs"}}
    lines = report.run_report(record, record, context)
    assert lines[0] == ("unplannable: gpu-a: tp_size 16 exceeds the 8 placeable GPUs; it keeps its recorded "
                        "instances vllm-0 :8000, vllm-1 :8001")


_FOLDERS = ("h100_sxm_8gpu_nvswitch", "azure_ndv4_like", "mi300x_8gpu_xgmi", "amd_4gpu_pcie_4numa")


@pytest.fixture(scope="module")
def recorded():
    return [_machine(folder) for folder in _FOLDERS]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(_FOLDERS) - 1), st.sampled_from((1, 2, 4, 8, 16)), st.booleans()),
                min_size=1, max_size=6))
def test_a_host_that_cannot_be_planned_never_changes_another_hosts_plan(recorded, hosts):
    # each host: a recorded machine, a tp_size, and whether its facts are broken
    fleet = dict(("h%d" % n, host_vars(_bad_facts(recorded[m]) if broken else recorded[m], gpufleet_tp_size=tp))
                 for n, (m, tp, broken) in enumerate(hosts))
    plan = fleet_plan_by_host(fleet)
    planned = set(plan["settings"])
    assert planned | set(plan["unplannable"]) == set(fleet) and not planned & set(plan["unplannable"])
    for host, why in plan["unplannable"].items():
        assert why.startswith("host %s: " % host) and not any(("host %s:" % h) in why for h in fleet if h != host)
    for host in planned:
        alone = fleet_plan_by_host({host: fleet[host]})
        assert alone["unplannable"] == {}
        assert ([i for i in plan["instances"] if i["host"] == host] == alone["instances"])
