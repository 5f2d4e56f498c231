# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Stable instance identity (docs/plan.md, "Stable identity"): a change
renames, moves or rebinds only the instances it forces."""

from __future__ import annotations

import os
import random
import time

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host, merge_plan
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import FLEET_OPTIONS
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact, identity
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import make_facts
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_search_reference import random_host

MI300X = os.path.join(fixture_paths.MACHINES, "mi300x_8gpu_xgmi", "capture.yml")


def dist_port(ordinal):
    return FLEET_OPTIONS["dist_port_base"] + ordinal * FLEET_OPTIONS["dist_port_stride"]


def host_vars(facts, **variables):
    return dict({"ansible_facts": {"numa_topology": facts}}, **variables)


def deploy(fleet):
    """The kept plan after a run that planned every host of `fleet` (JSON text, as kept_plan reads it)."""
    plan = fleet_plan_by_host(fleet)
    return artifact.dump_artifact(merge_plan(plan, None, sorted(fleet), sorted(fleet))["plan"])


def by_name(plan, host=None):
    return dict((i["name"], i) for i in plan["instances"] if host is None or i["host"] == host)


def gpu_set(instance):
    return frozenset(g["id"] for g in instance["gpus"])


@pytest.fixture(scope="module")
def mi300x():
    return topology.facts_from_capture(MI300X)


def test_mi300x_excluding_a_socket0_gpu_keeps_the_socket1_instance(mi300x):
    kept = deploy({"mi": host_vars(mi300x, gpufleet_tp_size=4)})
    deployed = by_name(artifact.load_artifact(kept))
    assert sorted(deployed) == ["vllm-0", "vllm-1"]
    socket1 = deployed["vllm-1"]
    assert socket1["sockets"] == [1]
    fleet = {"mi": host_vars(mi300x, gpufleet_tp_size=4, gpufleet_exclude_gpus=["0000:1e:00.0"])}
    positional = fleet_plan_by_host(fleet)
    assert [i["name"] for i in positional["instances"]] == ["vllm-0"]  # what the field saw
    plan = fleet_plan_by_host(fleet, deployed=kept)
    assert plan["instances"] == [socket1]  # name, ordinal, port, dist_port, CPUs, binding: as deployed
    assert plan["totals"] == positional["totals"]
    assert plan["unused"] == positional["unused"]
    assert not any("0000:9f:00.0" in w["text"] or "0000:9f:00.0" in w["gpus"] for w in plan["warnings"])
    # the same with the kept plan as a mapping; None or "" is the first run
    assert fleet_plan_by_host(fleet, deployed=artifact.load_artifact(kept))["instances"] == [socket1]
    assert fleet_plan_by_host(fleet, deployed="")["instances"] == positional["instances"]
    assert fleet_plan_by_host(fleet, deployed=None)["instances"] == positional["instances"]


def test_mi300x_unexcluding_forms_the_instance_again_on_the_lowest_free_ordinal(mi300x):
    fleet = {"mi": host_vars(mi300x, gpufleet_tp_size=4, gpufleet_exclude_gpus=["0000:1e:00.0"])}
    kept = deploy(fleet)
    (survivor,) = artifact.load_artifact(kept)["instances"]
    assert survivor["name"] == "vllm-0" and survivor["sockets"] == [1]
    plan = fleet_plan_by_host({"mi": host_vars(mi300x, gpufleet_tp_size=4)}, deployed=kept)
    assert [i["ordinal"] for i in plan["instances"]] == [0, 1]
    assert plan["instances"][0] == survivor
    again = plan["instances"][1]
    assert (again["name"], again["port"], again["dist_port"], again["sockets"]) == ("vllm-1", 8001, dist_port(1), [0])
    assert plan["unused"] == []


def shared_host():
    """Two sockets of one node each, 8 CPUs per node, four GPUs per node: tp 1 shares the nodes."""
    return make_facts("shared", {0: (0, "0-7"), 1: (1, "8-15")}, [0, 0, 0, 0, 1, 1, 1, 1],
                      lambda i, j: "NODE" if (i < 4) == (j < 4) else "SYS")


def test_shared_node_excluding_a_gpu_keeps_the_other_instances_cpus():
    facts = shared_host()
    kept = deploy({"s": host_vars(facts, gpufleet_tp_size=1)})
    deployed = artifact.load_artifact(kept)["instances"]
    assert len(deployed) == 8 and deployed[0]["cpus_shared_node"]
    fleet = {"s": host_vars(facts, gpufleet_tp_size=1, gpufleet_exclude_gpus=["0000:11:00.0"])}
    positional = fleet_plan_by_host(fleet)
    moved = [i for i in positional["instances"] if i not in deployed]
    assert moved  # the survivors of node 0 would take the freed CPUs, and be renamed
    plan = fleet_plan_by_host(fleet, deployed=kept)
    assert plan["instances"] == [i for i in deployed if i["gpus"][0]["id"] != "0000:11:00.0"]
    assert [u["id"] for u in plan["unused"]] == ["0000:11:00.0"]


def test_shared_node_exclude_then_unexclude_comes_back_to_the_first_plan():
    """The returning GPU finds the CPUs it left (the survivors' are taken out of the
    node's usable CPUs) and the lowest free ordinal, its own: the first plan again."""
    facts = shared_host()
    first = deploy({"s": host_vars(facts, gpufleet_tp_size=1)})
    excluded = fleet_plan_by_host({"s": host_vars(facts, gpufleet_tp_size=1, gpufleet_exclude_gpus=["0000:11:00.0"])},
                                  deployed=first)
    kept = artifact.dump_artifact(merge_plan(excluded, first, ["s"], ["s"])["plan"])
    back = fleet_plan_by_host({"s": host_vars(facts, gpufleet_tp_size=1)}, deployed=kept)
    assert back["instances"] == artifact.load_artifact(first)["instances"]


def test_shared_node_unexcluding_keeps_names_by_gpu_set():
    """Survivors hold every CPU of node 0, so the returning GPU's instance gets none: the change
    forces the fresh plan, whose instances keep their names by GPU set; the new one takes ordinal 7."""
    facts = shared_host()
    kept = deploy({"s": host_vars(facts, gpufleet_tp_size=1, gpufleet_exclude_gpus=["0000:11:00.0"])})
    deployed = dict((gpu_set(i), i) for i in artifact.load_artifact(kept)["instances"])
    plan = fleet_plan_by_host({"s": host_vars(facts, gpufleet_tp_size=1)}, deployed=kept)
    assert len(plan["instances"]) == 8
    for instance in plan["instances"]:
        old = deployed.get(gpu_set(instance))
        if old is None:
            assert (instance["name"], instance["port"]) == ("vllm-7", 8007)
        else:
            assert (instance["name"], instance["port"], instance["dist_port"]) == (
                old["name"], old["port"], old["dist_port"])
    assert [i["ordinal"] for i in plan["instances"]] == list(range(8))


def test_tp_change_keeps_names_by_gpu_set(mi300x):
    """tp 2 x pp 2 -> tp 4 (and a GPU of socket 0 out): the options changed, so the host is planned
    afresh, but the socket-1 instance, on the GPUs it had, keeps its name and ports."""
    kept = deploy({"mi": host_vars(mi300x, gpufleet_tp_size=2, gpufleet_pp_size=2)})
    deployed = dict((gpu_set(i), i) for i in artifact.load_artifact(kept)["instances"])
    fleet = {"mi": host_vars(mi300x, gpufleet_tp_size=4, gpufleet_exclude_gpus=["0000:1e:00.0"])}
    positional = fleet_plan_by_host(fleet)
    plan = fleet_plan_by_host(fleet, deployed=kept)
    assert len(plan["instances"]) == len(positional["instances"]) == 1
    (instance,) = plan["instances"]
    old = deployed.get(gpu_set(instance))
    assert old is not None and old["name"] == "vllm-1"  # the socket-1 GPUs, positionally vllm-0
    assert positional["instances"][0]["name"] == "vllm-0"
    assert (instance["name"], instance["port"], instance["dist_port"]) == ("vllm-1", 8001, dist_port(1))


def test_model_change_takes_todays_model_fields_only(mi300x):
    kept = deploy({"mi": host_vars(mi300x, gpufleet_tp_size=4, vllm_model="org/a")})
    deployed = artifact.load_artifact(kept)["instances"]
    plan = fleet_plan_by_host({"mi": host_vars(mi300x, gpufleet_tp_size=4, vllm_model="org/a",
                                               vllm_served_model_name="b")}, deployed=kept)
    assert [i["served_model_name"] for i in plan["instances"]] == ["b", "b"]
    assert [dict(i, served_model_name="org/a") for i in plan["instances"]] == deployed


def test_a_host_that_stops_naming_its_model_keeps_no_deployed_model_fields(mi300x):
    kept = deploy({"mi": host_vars(mi300x, gpufleet_tp_size=4, vllm_model="org/a")})
    plan = fleet_plan_by_host({"mi": host_vars(mi300x, gpufleet_tp_size=4)}, deployed=kept)
    assert len(plan["instances"]) == 2
    assert not any("model" in i or "served_model_name" in i for i in plan["instances"])


def test_ports_of_kept_ordinals_are_checked(mi300x):
    fleet = {"mi": host_vars(mi300x, gpufleet_tp_size=4, gpufleet_exclude_gpus=["0000:1e:00.0"])}
    kept = artifact.load_artifact(deploy({"mi": host_vars(mi300x, gpufleet_tp_size=4)}))
    kept["instances"][1]["ordinal"] = 4000  # a hand-edited kept plan: VLLM_PORT ranges past 65535
    with pytest.raises(AnsibleFilterError, match="ports end at 65535"):
        fleet_plan_by_host(fleet, deployed=kept)


def test_a_bad_deployed_plan_is_refused_like_merge_plan_refuses_it(mi300x):
    fleet = {"mi": host_vars(mi300x, gpufleet_tp_size=4)}
    with pytest.raises(AnsibleFilterError, match="fleet_plan_by_host: plan file <deployed> is not JSON"):
        fleet_plan_by_host(fleet, deployed="{")
    with pytest.raises(AnsibleFilterError, match="deployed must be the plan file's JSON text or a mapping"):
        fleet_plan_by_host(fleet, deployed=[1])


# ---------------------------------------------------------------- random fleets, one change each

CHANGES = ("exclude", "tp", "add", "remove", "model")
RANDOM_FLEETS = 400


def _random_vars(rng, case):
    facts = random_host(rng, case)
    return host_vars(facts, gpufleet_tp_size=rng.randint(1, 3), gpufleet_allow_span=rng.random() < 0.3,
                     vllm_model="org/m")


def _plans(fleet):
    try:
        plan = fleet_plan_by_host(fleet)
    except AnsibleFilterError:
        return None
    # a random host no instance fits on is set apart (unplannable): not a case this test checks
    return None if plan["unplannable"] else plan


def _random_change(rng, fleet, deployed, serial):
    """(changed fleet, kind, host changed) for one random change."""
    kind = rng.choice(CHANGES)
    host = rng.choice(sorted(fleet))
    changed = dict(fleet)
    if kind == "remove" and len(fleet) == 1:
        kind = "add"
    if kind == "exclude":
        mine = [g["id"] for i in deployed if i["host"] == host for g in i["gpus"]]
        every = [g["id"] for g in fleet[host]["ansible_facts"]["numa_topology"]["gpus"]]
        pool = mine if mine and rng.random() < 0.9 else every
        if not pool:
            return None
        changed[host] = dict(fleet[host], gpufleet_exclude_gpus=[rng.choice(pool)])
    elif kind == "tp":
        tps = [tp for tp in (1, 2, 3, 4) if tp != fleet[host]["gpufleet_tp_size"]]
        changed[host] = dict(fleet[host], gpufleet_tp_size=rng.choice(tps))
    elif kind == "add":
        host = "h%d" % len(fleet)
        changed[host] = _random_vars(rng, serial)
    elif kind == "remove":
        del changed[host]
    else:
        changed[host] = dict(fleet[host], vllm_served_model_name="other")
    return changed, kind, host


def _overlapping(instances):
    seen = set()
    for instance in instances:
        cpus = set(parse_cpulist(instance["cpus"]))
        if cpus & seen:
            return True
        seen |= cpus
    return False


def _check_change(kind, host, deployed, plan, positional):
    """Asserts the change moved only what it forces; returns how many kept instances the
    positional plan would have renamed, moved or rebound."""
    old = [i for i in deployed if i["host"] == host]
    new = [i for i in plan["instances"] if i["host"] == host]
    kept = []
    if kind == "exclude" and _overlapping(old):
        return None  # instances already share CPUs: the freed GPUs may find none left (the fresh plan then)
    if kind == "exclude":
        (victim,) = plan["settings"][host]["exclude_gpus"]
        kept = [i for i in old if victim not in gpu_set(i)]
        assert [i for i in new if i in kept] == kept
        held = set().union(*map(gpu_set, kept))
        assert all(not gpu_set(i) & held for i in new if i not in kept)
        assert len(new) == sum(1 for i in positional["instances"] if i["host"] == host)
    elif kind == "model":
        assert [dict(i, served_model_name="org/m") for i in new] == old
        kept = old
    elif kind == "tp":
        by_set = dict((gpu_set(i), i) for i in old)
        for instance in new:
            match = by_set.get(gpu_set(instance))
            if match is not None:
                assert (instance["name"], instance["port"]) == (match["name"], match["port"])
    by_set = dict((gpu_set(i), i) for i in positional["instances"] if i["host"] == host)
    return sum(1 for i in kept if by_set.get(gpu_set(i)) is None
               or [by_set[gpu_set(i)][k] for k in ("name", "port", "cpus")] != [i[k] for k in ("name", "port", "cpus")])


def test_a_random_change_moves_only_the_instances_it_forces():
    rng = random.Random(20260611)
    counts = dict.fromkeys(CHANGES, 0)
    would_move = overlapping = 0
    started = time.monotonic()
    for case in range(RANDOM_FLEETS):
        fleet = dict(("h%d" % k, _random_vars(rng, case * 10 + k)) for k in range(rng.randint(1, 3)))
        first = _plans(fleet)
        if first is None:
            continue
        kept_text = artifact.dump_artifact(merge_plan(first, None, sorted(fleet), sorted(fleet))["plan"])
        try:
            deployed = artifact.load_artifact(kept_text)["instances"]
        except ValueError:
            continue  # a plan no run keeps (an instance without CPUs)
        change = _random_change(rng, fleet, deployed, case * 10 + 9)
        if change is None:
            continue
        changed, kind, host = change
        positional = _plans(changed)
        if positional is None:
            continue
        plan = fleet_plan_by_host(changed, deployed=kept_text)
        for other in changed:
            if other != host or kind in ("add", "remove"):
                if other in fleet:
                    assert [i for i in plan["instances"] if i["host"] == other] == [
                        i for i in deployed if i["host"] == other], (case, kind, other)
        moved = _check_change(kind, host, deployed, plan, positional)
        if moved is None:
            overlapping += 1
            continue
        would_move += moved
        counts[kind] += 1
    elapsed = time.monotonic() - started
    print("random fleets checked: %s; exclusions on hosts whose instances share CPUs (not checked): %d; "
          "kept instances the positional plan would move: %d; %.1f s" % (counts, overlapping, would_move, elapsed))
    assert min(counts.values()) >= 20
    assert would_move > 0


def test_a_kept_instance_is_proposed_without_what_it_ran(mi300x):
    """What an instance runs (its `deployed` record) is recorded again once its host converged: a kept instance
    never carries the old record into the proposal."""
    import json
    kept = json.loads(deploy({"mi": host_vars(mi300x, gpufleet_tp_size=4)}))
    for instance in kept["instances"]:
        instance["deployed"] = {"engine": "vllm==0.11.0"}
    fleet = {"mi": host_vars(mi300x, gpufleet_tp_size=4, gpufleet_exclude_gpus=["0000:1e:00.0"])}
    (survivor,) = fleet_plan_by_host(fleet, deployed=kept)["instances"]
    assert survivor["name"] == "vllm-1" and "deployed" not in survivor


def test_a_rerun_that_keeps_every_instance_keeps_every_warning():
    """The demo's rtx4090 with reserved cores and no SMT sibling lists: the host's warnings are about the host
    (no GPU named); a rerun keeps every instance as deployed, and must keep those warnings too (the kept plan
    would otherwise change on every other run)."""
    facts = topology.facts_from_capture(os.path.join(fixture_paths.MACHINES, "rtx4090_8gpu_pcie_switch_quads",
                                                     "capture.yml"))
    fleet = {"rtx": host_vars(facts, gpufleet_tp_size=4, gpufleet_reserved_cpus_per_socket=1)}
    kept = deploy(fleet)
    first = artifact.load_artifact(kept)
    assert first["warnings"] and all(w["host"] == "rtx" and w["text"].startswith("SMT siblings unknown")
                                     for w in first["warnings"])
    again = fleet_plan_by_host(fleet, deployed=kept)
    assert again["instances"] == [dict(i) for i in first["instances"]]
    assert again["warnings"] == first["warnings"]


def test_a_re_planned_host_keeps_warnings_by_the_gpus_they_concern_not_their_words():
    """The fresh plan's warnings about the host itself (no GPU) or about a GPU a
    kept instance holds stay; its others give way to the re-plan's, which
    never speak of a held GPU: read from each record's gpus, whatever the text."""
    def w(text, *gpus):
        return {"host": "h", "text": text, "gpus": list(gpus), "nodes": []}

    host, held_gpu, other = w("a note on no GPU"), w("words about g0", "g0"), w("old words about g1", "g1")
    fresh = [held_gpu, other, host]
    rest = [w("the re-plan's words about g0", "g0"), w("new words about g1", "g1"), host]
    assert identity._warnings(fresh, rest, {"g0"}) == [held_gpu, host, w("new words about g1", "g1")]
    assert identity._warnings([other], [other], {"g0"}) == [other]
