# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The plan artifact: partial runs keep the hosts they did not reach, on plans of recorded machines."""

from __future__ import annotations

import json
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import merge_plan, plan_artifact_json
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology

FIXTURES = os.path.join(fixture_paths.FIXTURES, "machines")
MACHINES = {
    "h100": "h100_sxm_8gpu_nvswitch",
    "rtx4090": "rtx4090_8gpu_pcie_switch_quads",
    "a6000": "rtxa6000_8gpu_nvlink_pairs",
}


@pytest.fixture(scope="module")
def facts():
    return dict((host, topology.facts_from_capture(os.path.join(FIXTURES, folder, "capture.yml")))
                for host, folder in MACHINES.items())


def plan(facts, hosts, **options):
    options.setdefault("tp_size", 4)
    return placement.plan_fleet(dict((h, facts[h]) for h in hosts), **options)


def test_first_full_run_is_the_fleet_plan_with_per_host_gpu_counts(facts):
    full = plan(facts, sorted(MACHINES))
    merged = plan_artifact.merge_plans(full, None, sorted(MACHINES), sorted(MACHINES))
    assert merged["plan"]["instances"] == full["instances"]
    assert merged["plan"]["totals"] == full["totals"]
    assert merged["plan"]["hosts"] == {"a6000": {"gpus": 8}, "h100": {"gpus": 8}, "rtx4090": {"gpus": 8}}
    assert (merged["replanned"], merged["kept"], merged["not_planned"], merged["dropped"]) == (
        ["a6000", "h100", "rtx4090"], [], [], [])


def test_limited_run_keeps_every_other_host_unchanged(facts):
    before = plan_artifact.merge_plans(plan(facts, sorted(MACHINES)), None, sorted(MACHINES), sorted(MACHINES))["plan"]
    # --limit h100 with another tp size: only h100 changes
    fresh = plan(facts, ["h100"], tp_size=2)
    after = plan_artifact.merge_plans(fresh, before, ["h100"], sorted(MACHINES))
    assert after["replanned"] == ["h100"] and after["kept"] == ["a6000", "rtx4090"]
    kept_before = [i for i in before["instances"] if i["host"] != "h100"]
    kept_after = [i for i in after["plan"]["instances"] if i["host"] != "h100"]
    assert kept_after == kept_before
    assert [i["gpu_indices"] for i in after["plan"]["instances"] if i["host"] == "h100"] == [
        [0, 1], [2, 3], [4, 5], [6, 7]]
    assert after["plan"]["totals"] == {"hosts": 3, "instances": 8, "gpus": 24, "gpus_used": 24, "gpus_unused": 0}


def test_rerun_of_the_same_plan_gives_the_same_bytes(facts):
    full = plan(facts, sorted(MACHINES))
    first = plan_artifact.merge_plans(full, None, sorted(MACHINES), sorted(MACHINES))["plan"]
    text = plan_artifact.dump_artifact(first)
    again = plan_artifact.merge_plans(plan(facts, ["a6000"]), plan_artifact.load_artifact(text),
                                      ["a6000"], sorted(MACHINES))["plan"]
    assert plan_artifact.dump_artifact(again) == text


def test_hosts_gone_from_the_inventory_are_dropped_and_new_ones_reported(facts):
    before = plan_artifact.merge_plans(plan(facts, ["h100", "rtx4090"]), None, ["h100", "rtx4090"],
                                       ["h100", "rtx4090"])["plan"]
    after = plan_artifact.merge_plans(plan(facts, []), before, [], ["h100", "a6000"])
    assert after["dropped"] == ["rtx4090"] and after["kept"] == ["h100"] and after["not_planned"] == ["a6000"]
    assert set(i["host"] for i in after["plan"]["instances"]) == {"h100"}
    assert after["plan"]["totals"]["hosts"] == 1


def test_merge_refuses_fresh_hosts_outside_the_replanned_list(facts):
    with pytest.raises(ValueError, match="not re-planned: h100"):
        plan_artifact.merge_plans(plan(facts, ["h100"]), None, [], ["h100"])
    with pytest.raises(ValueError, match="not in the fleet: gone"):
        plan_artifact.merge_plans(plan(facts, []), None, ["gone"], ["h100"])


@pytest.mark.parametrize("text,message", [
    ("{", "plan file p.json is not JSON"),
    ("[]", "must hold a JSON object, got list"),
    ('{"artifact_version": true, "instances": [], "unused": [], "warnings": [], "hosts": {}}', "artifact_version True"),
    ('{"artifact_version": 1, "instances": {}, "unused": [], "warnings": [], "hosts": {}}', "instances must be a list"),
    ('{"artifact_version": 1, "instances": [{"name": "x"}], "unused": [], "warnings": [], "hosts": {}}',
     "instance or unused GPU 0 has no host"),
    ('{"artifact_version": 1, "instances": [], "unused": [], "warnings": [], "hosts": []}', "hosts must be a mapping"),
])
def test_load_artifact_names_the_file_and_problem(text, message):
    with pytest.raises(ValueError, match="p.json") as info:
        plan_artifact.load_artifact(text, "p.json")
    assert message in str(info.value)


def test_load_artifact_without_a_file_is_none():
    assert plan_artifact.load_artifact("") is None and plan_artifact.load_artifact(None) is None


def test_filters_wrap_errors_and_round_trip(facts):
    full = plan(facts, ["h100"])
    merged = merge_plan(full, previous="", replanned=["h100"], fleet_hosts=["h100"])
    assert json.loads(plan_artifact_json(merged["plan"])) == merged["plan"]
    with pytest.raises(AnsibleFilterError, match="^gpufleet.numa.merge_plan: plan file /x/plan.json is not JSON"):
        merge_plan(full, previous="nope", previous_name="/x/plan.json", replanned=["h100"], fleet_hosts=["h100"])
    with pytest.raises(AnsibleFilterError, match="replanned and fleet_hosts are required"):
        merge_plan(full, previous="")


def test_load_plan_filter_requires_a_kept_plan(facts):
    from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import load_plan

    with pytest.raises(AnsibleFilterError, match="no deployed plan at /srv/plan.json: run the playbook"):
        load_plan("", "/srv/plan.json")
    merged = merge_plan(plan(facts, ["h100"]), previous="", replanned=["h100"], fleet_hosts=["h100"])
    assert load_plan(plan_artifact_json(merged["plan"]), "p") == merged["plan"]


def test_settings_are_kept_per_host_with_their_types(facts):
    fresh = dict(plan(facts, ["h100", "a6000"], tp_size=2),
                 settings={"h100": {"tp_size": "2", "allow_span": "false", "exclude_gpus": ["0000:18:00.0"]},
                           "a6000": {"tp_size": 2, "exclude_gpus": []}})
    merged = plan_artifact.merge_plans(fresh, None, ["h100", "a6000"], ["h100", "a6000"])
    hosts = merged["plan"]["hosts"]
    assert hosts["h100"]["options"] == {"tp_size": 2, "allow_span": False, "exclude_gpus": ["0000:18:00.0"]}
    # a later run that re-plans only a6000 keeps h100's settings as deployed
    again = plan_artifact.merge_plans(dict(plan(facts, ["a6000"]), settings={"a6000": {"tp_size": 4}}),
                                      merged["plan"], ["a6000"], ["h100", "a6000"])
    assert again["plan"]["hosts"]["h100"] == hosts["h100"]
    assert again["plan"]["hosts"]["a6000"]["options"] == {"tp_size": 4}


def _hostvars(facts, **per_host):
    return dict((h, dict(per_host.get(h, {}), ansible_facts={"numa_topology": facts[h]})) for h in facts)


def test_fleet_plan_by_host_takes_each_hosts_own_values(facts):
    from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host

    host_vars = _hostvars(facts, h100={"gpufleet_tp_size": 2}, a6000={"gpufleet_tp_size": "4"},
                          rtx4090={"gpufleet_tp_size": 8, "gpufleet_allow_span": True})
    result = fleet_plan_by_host(host_vars)
    sizes = dict((h, sorted(set(len(i["gpus"]) for i in result["instances"] if i["host"] == h))) for h in facts)
    assert sizes == {"h100": [2], "a6000": [4], "rtx4090": [8]}
    assert result["settings"]["a6000"]["tp_size"] == 4 and result["settings"]["rtx4090"]["allow_span"] is True
    assert result["totals"] == {"hosts": 3, "instances": 7, "gpus": 24, "gpus_used": 24, "gpus_unused": 0}
    # the same as planning each host alone with its values
    alone = placement.plan_fleet({"h100": facts["h100"]}, tp_size=2)
    assert [i for i in result["instances"] if i["host"] == "h100"] == alone["instances"]
    # and what the audit replans with
    merged = plan_artifact.merge_plans(result, None, sorted(facts), sorted(facts))
    instances, options, dummy = __import__(
        "ansible_collections.gpufleet.numa.plugins.module_utils.audit.drift", fromlist=["drift"]).deployed_for_host(
        merged["plan"], "h100")
    assert options["tp_size"] == 2 and len(instances) == 4


@pytest.mark.parametrize("variables,message", [
    ({"gpufleet_tp_size": 0}, "host h100: gpufleet_tp_size: must be at least 1 (got 0)"),
    ({"gpufleet_tp_size": "four"}, "host h100: gpufleet_tp_size: must be an integer (got 'four')"),
    ({"gpufleet_pp_size": True}, "host h100: gpufleet_pp_size: must be an integer, not a boolean"),
    ({"gpufleet_allow_span": "maybe"}, "host h100: gpufleet_allow_span: must be a boolean"),
    ({"gpufleet_base_port": 70000}, "host h100: gpufleet_base_port: must be at most 65535"),
    ({"gpufleet_exclude_gpus": "0000:18:00.0"}, "host h100: gpufleet_exclude_gpus: must be a list"),
    ({"gpufleet_reserved_cpus_per_socket": -1}, "host h100: gpufleet_reserved_cpus_per_socket: must be at least 0"),
])
def test_fleet_plan_by_host_names_host_and_variable(facts, variables, message):
    from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host

    with pytest.raises(AnsibleFilterError) as info:
        fleet_plan_by_host(_hostvars({"h100": facts["h100"]}, h100=variables))
    assert message in str(info.value)


def test_fleet_plan_by_host_records_each_hosts_served_model(facts):
    """The plan says what each host serves; a later run that reaches only
    one host keeps the other host's model with its instances."""
    from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host

    host_vars = _hostvars(facts, h100={"vllm_model": "meta-llama/Llama-3.1-70B-Instruct",
                                       "vllm_served_model_name": "llama-3.1-70b"},
                          a6000={"vllm_model": "Qwen/Qwen2.5-7B-Instruct", "vllm_served_model_name": ""})
    result = fleet_plan_by_host(host_vars)
    served = dict((i["host"], (i.get("model"), i.get("served_model_name"))) for i in result["instances"])
    assert served == {"h100": ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
                      "a6000": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
                      "rtx4090": (None, None)}
    merged = plan_artifact.merge_plans(result, None, sorted(facts), sorted(facts))["plan"]
    # Only a6000 re-planned, now with another model: h100 keeps its own.
    again = fleet_plan_by_host(dict(host_vars, a6000=dict(host_vars["a6000"], vllm_model="other/model")),
                               hosts=["a6000"])
    kept = plan_artifact.merge_plans(again, merged, ["a6000"], sorted(facts))["plan"]
    served = dict((i["host"], i.get("served_model_name")) for i in kept["instances"])
    assert served == {"h100": "llama-3.1-70b", "a6000": "other/model", "rtx4090": None}


@pytest.mark.parametrize("variables,message", [
    ({"vllm_model": "m", "vllm_served_model_name": "llama 70b"},
     "host h100: vllm_served_model_name: must be a served model name"),
    ({"vllm_model": "org/m'x"}, "host h100: vllm_model (served as its own name): must be a served model name"),
    ({"vllm_model": "--trust-remote-code"}, "host h100: vllm_model: must not start with '-'"),
    ({"vllm_model": "m\nx"}, "host h100: vllm_model: must not contain control characters"),
])
def test_fleet_plan_by_host_checks_served_model_names(facts, variables, message):
    from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host

    with pytest.raises(AnsibleFilterError) as info:
        fleet_plan_by_host(_hostvars({"h100": facts["h100"]}, h100=variables))
    assert message in str(info.value)


def test_fleet_plan_by_host_without_facts_names_the_host(facts):
    from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host

    with pytest.raises(AnsibleFilterError, match="host gpu-x: no topology facts"):
        fleet_plan_by_host({"gpu-x": {}})


def test_a_multinode_instance_formed_anew_drops_the_unreached_partners_stale_part(facts):
    # Three H100 hosts, two per instance: [a, b] and c left over. A run that
    # does not reach b pairs a with c; b's kept part of [a, b] is stale.
    hosts = dict((h, facts["h100"]) for h in ("gpu-a", "gpu-b", "gpu-c"))
    options = dict(tp_size=4, pp_size=2, nodes_per_instance=2)
    full = placement.plan_fleet(hosts, **options)
    before = plan_artifact.merge_plans(full, None, sorted(hosts), sorted(hosts))["plan"]
    assert [(i["host"], i["multinode"]["hosts"]) for i in before["instances"]] == [
        ("gpu-a", ["gpu-a", "gpu-b"]), ("gpu-b", ["gpu-a", "gpu-b"])]
    fresh = placement.plan_fleet({"gpu-a": hosts["gpu-a"], "gpu-c": hosts["gpu-c"]}, **options)
    after = plan_artifact.merge_plans(fresh, before, ["gpu-a", "gpu-c"], sorted(hosts))
    assert [(i["host"], i["multinode"]["hosts"]) for i in after["plan"]["instances"]] == [
        ("gpu-a", ["gpu-a", "gpu-c"]), ("gpu-c", ["gpu-a", "gpu-c"])]
    stale = [u for u in after["plan"]["unused"] if u["host"] == "gpu-b"]
    anew = [u["index"] for u in stale if "was formed anew without it: gpu-a re-planned" in u["reason"]]
    assert len(stale) == 8 and anew == [0, 1, 2, 3]  # its share; 4-7 were unused already
    assert any(w["host"] == "gpu-b" and w["text"].startswith("its multi-node instance vllm-0 (hosts gpu-a, gpu-b)")
               and w["gpus"] == [] and w["nodes"] == [] for w in after["plan"]["warnings"])
    assert after["plan"]["totals"]["instances"] == 1
    # a partner re-planned as a one-host instance leaves it stale too
    alone = plan_artifact.merge_plans(placement.plan_fleet({"gpu-a": hosts["gpu-a"]}, tp_size=4, pp_size=2),
                                      before, ["gpu-a"], sorted(hosts))
    assert not any(i["host"] == "gpu-b" for i in alone["plan"]["instances"])
    # the same pairing planned again changes nothing
    same = plan_artifact.merge_plans(full, before, sorted(hosts), sorted(hosts))
    assert same["plan"]["instances"] == before["instances"]


def test_a_plan_kept_with_string_warnings_loads_as_records_and_round_trips(facts):
    """A kept plan written before warnings were records holds "HOST: text"
    strings: each loads as the record of that host and text, concerning no
    GPU or node; written again it is records, and loads unchanged."""
    full = plan(facts, sorted(MACHINES), tp_size=1, reserved_cpus_per_socket=1)
    new = plan_artifact.merge_plans(full, None, sorted(MACHINES), sorted(MACHINES))["plan"]
    assert len(set(w["host"] for w in new["warnings"])) >= 2
    old = dict(new, warnings=["%s: %s" % (w["host"], w["text"]) for w in new["warnings"]])
    text = plan_artifact.dump_artifact(old)
    loaded = plan_artifact.load_artifact(text, "old.json")
    assert loaded["warnings"] == [dict(w, gpus=[], nodes=[]) for w in new["warnings"]]
    assert dict(loaded, warnings=[]) == dict(new, warnings=[])
    again = plan_artifact.dump_artifact(loaded)
    assert plan_artifact.load_artifact(again, "new.json") == loaded
    # the kept plan as a mapping is read the same, and left as it was
    assert plan_artifact.load_artifact(old)["warnings"] == loaded["warnings"]
    assert old["warnings"][0] == "%s: %s" % (new["warnings"][0]["host"], new["warnings"][0]["text"])
    # a text holding ": " itself splits at the first one only
    odd = dict(old, warnings=["h100: a: b"])
    assert plan_artifact.load_artifact(odd)["warnings"] == [{"host": "h100", "text": "a: b", "gpus": [], "nodes": []}]
    # a partial run keeps the unreached hosts' migrated warnings, each with its host
    after = plan_artifact.merge_plans(plan(facts, ["h100"], tp_size=1, reserved_cpus_per_socket=1), loaded, ["h100"],
                                      sorted(MACHINES))["plan"]
    assert [w for w in after["warnings"] if w["host"] != "h100"] == [w for w in loaded["warnings"]
                                                                     if w["host"] != "h100"]
    assert [w for w in after["warnings"] if w["host"] == "h100"] == [w for w in new["warnings"] if w["host"] == "h100"]
