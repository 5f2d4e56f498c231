# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The facts reader of placement and the plan cache key it yields.

The plan of a host is memoised on PlanKey (options, excluded GPUs, the
Topology the reader built). A fact the planner reads must change the key,
or two hosts that differ in it would share a plan; a fact it does not read
must not, or identical machines would each cost a search. Every leaf of a
recorded machine's facts is changed once and the key compared.
"""

from __future__ import annotations

import copy
import os
import re

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import facts as placement_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host as placement_host
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import h100_nvswitch

FIXTURES = os.path.join(fixture_paths.FIXTURES, "machines")

# Leaf paths of the facts, by what the planner does with them. A path that
# matches none of these fails the test: a new fact field must be placed here.
READ = [
    r"gpus\[\d+\]\.(numa_node|local_cpus)",
    r"numa_nodes\[\d+\]\.(id|cpus|socket|usable_cpus)",
    r"numa_nodes\[\d+\]\.distances\[.*\]",
    r"sockets\[\d+\]\.(id|numa_nodes\[\d+\])",
    r"smt_siblings\[\d+\]\[\d+\]",
    r"links\[.*\]\[.*\]",
]
IDENTITY = [r"gpus\[\d+\]\.(id|pci_bus_id|index|uuid|name)", r"hostname"]
# Read for the device class (placement/device.py) and CPU ranks, beside the key.
DEVICE = [r"gpus\[\d+\]\.vendor", r"numa_nodes\[\d+\]\.memory_mb"]
UNREAD = [
    r"gpus\[\d+\]\.(memory_mb|mig_mode|pcie.*|memory_numa_node)",
    r"numa_nodes\[\d+\]\.kind",  # memory-only is read from cpus "" (the kind follows it)
    r"sockets\[\d+\]\.cpus",
    r"nics.*",  # gpu_links too
    r"sources.*",
    r"warnings.*",
]


def kind(path):
    for name, patterns in (("read", READ), ("identity", IDENTITY), ("device", DEVICE), ("unread", UNREAD)):
        if any(re.fullmatch(p, path) for p in patterns):
            return name
    raise AssertionError("fact %s is not classified as read, identity or unread by the planner" % path)


def leaves(value, path=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, _join(path, k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from leaves(v, "%s[%d]" % (path, i))
    else:
        yield path


def _join(path, key):
    if not path:
        return str(key)
    if path == "links" or path.startswith("links[") or path.endswith((".distances", ".gpu_links")):
        return "%s[%r]" % (path, key)
    return "%s.%s" % (path, key)


def facts_with_everything():
    """A recorded-like host whose facts hold every field: SLIT distances, SMT, sockets, a NIC."""
    facts = h100_nvswitch("gpu-a")
    for node in facts["numa_nodes"]:
        node["distances"] = dict((str(n["id"]), 10 if n["id"] == node["id"] else 21) for n in facts["numa_nodes"])
    facts["nics"] = [{"id": "0000:0c:00.0", "pci_bus_id": "0000:0c:00.0", "vendor": "mellanox",
                      "interfaces": ["mlx5_0"], "numa_node": 0, "local_cpus": "0-47", "pcie": None}]
    facts["warnings"] = ["a note"]
    facts["gpus"][0]["pcie"] = {"current_width": 16}
    facts["gpus"][0]["memory_numa_node"] = 1
    facts["nics"][0]["gpu_links"] = {facts["gpus"][0]["id"]: "PIX"}
    for node in facts["numa_nodes"]:
        node["kind"] = "cpu"
        cpus = parse_cpulist(node["cpus"])
        node["usable_cpus"] = format_cpulist(cpus[:-2])  # a restricted cpuset (cpus may lose a CPU and keep it)
    return facts


def get_parent(facts, path):
    """(container, key) of a leaf path as leaves() writes it."""
    tokens = re.findall(r"\[('(?:[^']*)'|\d+)\]|\.?([A-Za-z_]+)", path)
    node = facts
    keys = []
    for quoted, name in tokens:
        if name:
            keys.append(name)
        elif quoted.startswith("'"):
            keys.append(quoted[1:-1])
        else:
            keys.append(int(quoted))
    for k in keys[:-1]:
        node = node[k]
    return node, keys[-1]


def changed(path, value):
    """Another valid value for a leaf."""
    if value is None:
        return "something"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 100 if re.search(r"(\.id|numa_nodes\[\d+\])$", path) else value + 1
    if re.fullmatch(r"NV\d+|PIX|PXB|PHB|NODE|SYS", value):
        return "SYS" if value != "SYS" else "NODE"
    if re.search(r"cpus$", path) and value:
        return format_cpulist(parse_cpulist(value)[:-1])
    return value + "x"  # sorts right after the old value: PCI order kept


def key_of(facts, **options):
    opts = placement.validate_options(dict({"tp_size": 2}, **options))
    return placement_host.plan_key(placement_facts.read_host_facts(facts, "gpu-a"), opts)


def plan_of(facts):
    placement.clear_cache()
    return placement.plan_host(facts, tp_size=2, host="gpu-a")


BASE = facts_with_everything()
PATHS = [p for p in leaves(BASE) if p != "schema_version"]  # the gate: any other value is refused


def test_leaves_cover_the_fields_the_planner_reads():
    kinds = [kind(p) for p in PATHS]
    assert kinds.count("read") > 100 and kinds.count("identity") >= 40 and kinds.count("unread") >= 30


@pytest.mark.parametrize("path", PATHS)
def test_plan_key_changes_with_every_fact_the_planner_reads(path):
    facts = copy.deepcopy(BASE)
    parent, key = get_parent(facts, path)
    parent[key] = changed(path, parent[key])
    if kind(path) == "read":
        assert key_of(facts) != key_of(BASE), path
    elif kind(path) == "device":
        assert key_of(facts) == key_of(BASE), path
        view, base = (placement_facts.read_host_facts(f, "gpu-a") for f in (facts, BASE))
        assert (view.vendors, view.node_memory) != (base.vendors, base.node_memory), path
    elif kind(path) == "unread":
        assert key_of(facts) == key_of(BASE), path
        assert plan_of(facts) == plan_of(BASE), path
    else:
        if path.endswith(".id"):
            # the id is the links' key too: rename it there as well
            new = parent[key]
            old_id = get_parent(BASE, path)[0]["id"]
            links = facts["links"]
            links[new] = links.pop(old_id)
            for row in links.values():
                if old_id in row:
                    row[new] = row.pop(old_id)
        assert key_of(facts) == key_of(BASE), path
        assert plan_of(facts) != plan_of(BASE) or path == "hostname", path


def test_plan_key_includes_options_and_exclusions():
    assert key_of(BASE) != key_of(BASE, reserved_cpus_per_socket=1)
    assert key_of(BASE) != key_of(BASE, exclude_gpus=[BASE["gpus"][2]["uuid"]])
    assert key_of(BASE, exclude_gpus=[BASE["gpus"][2]["uuid"]]) == key_of(BASE, exclude_gpus=[BASE["gpus"][2]["id"]])


def test_plan_key_is_the_whole_input_of_the_template():
    # a template built for one host serves another with the same key, identities aside
    other = copy.deepcopy(BASE)
    for i, gpu in enumerate(other["gpus"]):
        gpu["uuid"] = "GPU-other-%d" % i
        gpu["name"] = "Other"
    assert key_of(other) == key_of(BASE)
    placement.clear_cache()
    placement.plan_host(BASE, tp_size=2)
    plan = placement.plan_host(other, tp_size=2)
    assert placement.cache_size() == 1
    placement.clear_cache()
    assert placement.plan_host(other, tp_size=2) == plan


# ---------------------------------------------------------------- the reader


def test_read_host_facts_numa_node_minus_one_is_unknown_with_warning():
    facts = h100_nvswitch("gpu-a")
    facts["gpus"][3]["numa_node"] = -1
    plan = placement.plan_host(facts, tp_size=1)
    gid = facts["gpus"][3]["id"]
    assert [u["id"] for u in plan["unused"]] == [gid]
    assert "NUMA node unknown" in plan["unused"][0]["reason"]
    assert "GPU %s reports numa_node -1; NUMA node unknown" % gid in plan["warnings"]
    assert all(gid not in [g["id"] for g in grp["gpus"]] for grp in plan["groups"])
    # the same plan as null, besides that warning
    null = h100_nvswitch("gpu-a")
    null["gpus"][3]["numa_node"] = None
    expected = placement.plan_host(null, tp_size=1)
    assert plan["groups"] == expected["groups"] and plan["unused"] == expected["unused"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: f["gpus"][3].update(numa_node=-2), "gpus[3].numa_node must be an integer >= 0, -1 (unknown) or null, got -2"),
        (lambda f: f["gpus"][3].update(numa_node=True), "gpus[3].numa_node must be an integer >= 0, -1 (unknown) or null, got True"),
        (lambda f: f["gpus"][1].update(id=""), "gpus[1].id must be a non-empty string, got ''"),
        (lambda f: f["gpus"][1].update(id=f["gpus"][0]["id"]), "gpus[1].id: GPU id 0000:18:00.0 appears twice"),
        (lambda f: f["numa_nodes"][1].update(id=0), "numa_nodes[1].id: NUMA node 0 appears twice"),
        (lambda f: f["numa_nodes"][0].update(cpus="0-x"), "numa_nodes[0].cpus must be a cpulist (bad element '0-x'"),
        (lambda f: f["numa_nodes"][0].update(usable_cpus="0-x"),
         "numa_nodes[0].usable_cpus must be a cpulist (bad element '0-x'"),
        (lambda f: f["numa_nodes"][0].update(usable_cpus="0-200"),
         "numa_nodes[0].usable_cpus must be a subset of the node's cpus '0-47,96-143', got '0-200'"),
        (lambda f: f["numa_nodes"][0].update(distances={"a": 10}), "numa_nodes[0].distances keys must be NUMA node ids, got 'a'"),
        (lambda f: f["numa_nodes"][0].update(distances={"0": 10, 0: 11}), "numa_nodes[0].distances must name each node once"),
        (lambda f: f.update(smt_siblings=[[0, 96], [1, "97"]]), "smt_siblings[1][1] must be an integer (a CPU id), got '97'"),
        (lambda f: f["links"]["0000:18:00.0"].update({"0000:19:00.0": 4}),
         "links['0000:18:00.0']['0000:19:00.0'] must be a link class or null, got 4"),
        (lambda f: f.update(schema_version="1"), "topology facts schema_version is '1', this collection reads 1"),
    ],
)
def test_read_host_facts_names_host_and_field(mutate, message):
    facts = h100_nvswitch("gpu-z")
    mutate(facts)
    with pytest.raises(placement.PlacementError) as info:
        placement_facts.read_host_facts(facts)
    text = str(info.value)
    assert text.startswith("host gpu-z: ")
    assert message in text


def test_read_host_facts_link_listed_one_way_reads_both_ways():
    facts = h100_nvswitch("gpu-a")
    a, b = facts["gpus"][0]["id"], facts["gpus"][1]["id"]
    del facts["links"][b][a]
    topology = placement_facts.read_host_facts(facts).topology
    assert topology.links[0][1] == topology.links[1][0] == "NV18"
    assert topology.links[0][0] is None


def test_read_host_facts_plain_values_from_str_and_int_subclasses():
    class Tagged(str):
        pass

    class TaggedInt(int):
        pass

    facts = h100_nvswitch("gpu-a")
    facts["gpus"][0]["name"] = Tagged("H100")
    facts["gpus"][0]["numa_node"] = TaggedInt(0)
    facts["links"][facts["gpus"][0]["id"]][facts["gpus"][1]["id"]] = Tagged("NV18")
    view = placement_facts.read_host_facts(facts)
    assert view.gpus[0].name.__class__ is str
    assert view.topology.gpu_nodes[0].__class__ is int
    assert view.topology.links[0][1].__class__ is str
    assert view.topology == placement_facts.read_host_facts(h100_nvswitch("gpu-a")).topology


def test_read_host_facts_gpus_in_pci_order_whatever_the_list_order():
    facts = h100_nvswitch("gpu-a")
    shuffled = copy.deepcopy(facts)
    shuffled["gpus"].reverse()
    assert placement_facts.read_host_facts(shuffled) == placement_facts.read_host_facts(facts)
