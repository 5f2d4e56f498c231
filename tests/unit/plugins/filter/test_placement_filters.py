# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The socket_local_groups and fleet_plan filters: called directly, and through a real ansible-playbook."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.placement import FilterModule, fleet_plan, socket_local_groups
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import (
    h100_nvswitch,
    ndv4_like,
)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def test_filter_module_exposes_both_filters():
    filters = FilterModule().filters()
    assert filters["socket_local_groups"] is socket_local_groups
    assert filters["fleet_plan"] is fleet_plan


def test_socket_local_groups_positional_tp_size():
    plan = socket_local_groups(h100_nvswitch(), 4)
    assert [g["gpu_indices"] for g in plan["groups"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_socket_local_groups_rejects_unknown_keyword():
    with pytest.raises(AnsibleFilterError, match="socket_local_groups: unknown option\\(s\\): tp"):
        socket_local_groups(h100_nvswitch(), 4, tp=2)


def test_socket_local_groups_rejects_fleet_only_option():
    with pytest.raises(AnsibleFilterError, match="unknown option\\(s\\): base_port"):
        socket_local_groups(h100_nvswitch(), 4, base_port=9000)


@pytest.mark.parametrize("tp", [None, 0, -2, "four", "4.0", 2.0, True])
def test_socket_local_groups_rejects_bad_tp_size(tp):
    with pytest.raises(AnsibleFilterError, match="tp_size"):
        socket_local_groups(h100_nvswitch(), tp)


def test_filters_accept_numbers_and_booleans_given_as_strings():
    # -e gpufleet_tp_size=4 on the command line arrives as a string
    plan = socket_local_groups(h100_nvswitch(), "8", allow_span="yes", reserved_cpus_per_socket="1")
    assert plan["groups"][0]["gpu_indices"] == list(range(8))
    fleet = fleet_plan({"a": h100_nvswitch()}, tp_size="4", base_port="9000")
    assert [i["port"] for i in fleet["instances"]] == [9000, 9001]
    with pytest.raises(AnsibleFilterError, match="allow_span must be a boolean"):
        socket_local_groups(h100_nvswitch(), 4, allow_span="maybe")


def test_socket_local_groups_strict_failure_is_a_filter_error_naming_host():
    with pytest.raises(AnsibleFilterError, match="host gpu-a: tp_size 8 does not fit on any socket"):
        socket_local_groups(h100_nvswitch("gpu-a"), 8)


def test_socket_local_groups_missing_facts():
    with pytest.raises(AnsibleFilterError, match="schema_version is None"):
        socket_local_groups({}, 2)


def test_fleet_plan_hostvars_mapping_and_hosts_option():
    hostvars = {
        "gpu-a": {"ansible_facts": {"numa_topology": h100_nvswitch()}, "ansible_host": "10.0.0.1"},
        "gpu-b": {"numa_topology": ndv4_like()},
        "lb": {"ansible_host": "10.0.0.9"},
    }
    fleet = fleet_plan(hostvars, tp_size=2, hosts=["gpu-a", "gpu-b"])
    assert fleet["totals"] == {"hosts": 2, "instances": 8, "gpus": 16, "gpus_used": 16, "gpus_unused": 0}
    with pytest.raises(AnsibleFilterError, match="fleet_plan: host lb: no topology facts"):
        fleet_plan(hostvars, tp_size=2)


def test_fleet_plan_rejects_unknown_keyword_naming_it():
    with pytest.raises(AnsibleFilterError, match="unknown option\\(s\\): base_prot"):
        fleet_plan({"a": h100_nvswitch()}, tp_size=2, base_prot=9000)


def test_fleet_plan_rejects_non_mapping_input():
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        fleet_plan([h100_nvswitch()], tp_size=2)


def test_fleet_plan_through_ansible_playbook_with_hostvars(tmp_path):
    """hostvars and templated (tagged) values as Ansible really passes them."""
    facts_dir = tmp_path / "facts"
    facts_dir.mkdir()
    for host, facts in (("gpu-a", h100_nvswitch("gpu-a")), ("gpu-b", ndv4_like("gpu-b"))):
        (facts_dir / (host + ".yml")).write_text(yaml.safe_dump({"numa_topology": facts}))
    (tmp_path / "inventory.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"gpu-a": {}, "gpu-b": {}, "lb": {}},
                    "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                }
            }
        )
    )
    out = tmp_path / "plan.json"
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "gpu-a:gpu-b",
                    "gather_facts": False,
                    "tasks": [
                        {"ansible.builtin.include_vars": {"file": str(facts_dir) + "/{{ inventory_hostname }}.yml"}},
                        {"ansible.builtin.set_fact": {"numa_topology": "{{ numa_topology }}"}},
                    ],
                },
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "ansible.builtin.copy": {
                                "dest": str(out),
                                "content": "{{ hostvars | gpufleet.numa.fleet_plan(tp_size=2, hosts=['gpu-a', 'gpu-b'],"
                                " exclude_gpus={'gpu-b': ['0000:0b:00.0']}) | to_json }}",
                            }
                        },
                        {
                            "ansible.builtin.debug": {
                                "msg": "{{ hostvars['gpu-a'].numa_topology | gpufleet.numa.socket_local_groups(4) }}"
                            }
                        },
                    ],
                },
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"), ANSIBLE_NOCOLOR="1")
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    result = subprocess.run(
        [playbook, "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml")],
        env=env, capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    fleet = json.loads(out.read_text())
    assert [(i["host"], i["name"], i["gpu_indices"], i["numa_nodes"]) for i in fleet["instances"]] == [
        ("gpu-a", "vllm-0", [0, 1], [0]),
        ("gpu-a", "vllm-1", [2, 3], [0]),
        ("gpu-a", "vllm-2", [4, 5], [1]),
        ("gpu-a", "vllm-3", [6, 7], [1]),
        ("gpu-b", "vllm-0", [2, 3], [0]),
        ("gpu-b", "vllm-1", [4, 5], [3]),
        ("gpu-b", "vllm-2", [6, 7], [2]),
    ]
    assert fleet["unused"] == [{"host": "gpu-b", "id": "0000:0b:00.0", "index": 0, "reason": "excluded by exclude_gpus"},
                               {"host": "gpu-b", "id": "0000:0c:00.0", "index": 1,
                                "reason": fleet["unused"][1]["reason"]}]
    assert "NV18" in result.stdout


def test_fleet_plan_failure_through_ansible_playbook_names_host(tmp_path):
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"fleet": {"gpu-z": {"numa_topology": h100_nvswitch("gpu-z")}}},
                    "tasks": [{"ansible.builtin.debug": {"msg": "{{ fleet | gpufleet.numa.fleet_plan(tp_size=8) }}"}}],
                }
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    result = subprocess.run([playbook, str(tmp_path / "play.yml")], env=env, capture_output=True, text=True,
                            cwd=str(tmp_path), timeout=300, check=False)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "host gpu-z: tp_size 8 does not fit on any socket" in text
    assert "Traceback" not in text


# ---------------------------------------------------------------- wrong facts: a filter error naming host and field

# Every fact the planner reads is checked in one place; whatever the facts
# hold, the filters plan or raise AnsibleFilterError naming the host and,
# for a malformed fact, its path ("numa_topology.gpus[3].numa_node").

MACHINES = os.path.join(REPO, "tests", "fixtures", "machines")
RECORDED = ("mi50_8gpu_nps4", "azure_ndv4_like", "rtx3090_2gpu_threadripper_numa_na")
FIELD = re.compile(r"numa_topology\.([A-Za-z_]+(?:\[[^\]]*\]|\.[A-Za-z_]+)*)")


def recorded_facts(name):
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology

    return topology.facts_from_capture(os.path.join(MACHINES, name, "capture.yml"))


BASES = dict((name, recorded_facts(name)) for name in RECORDED)


def locate(facts, path):
    """(container, key) of a field path as the reader writes it."""
    keys = []
    for quoted, index, name in re.findall(r"\['((?:[^'\\]|\\.)*)'\]|\[(\d+)\]|\.?([A-Za-z_]+)", path):
        keys.append(quoted if quoted or (not index and not name) else int(index) if index else name)
    node = facts
    for key in keys[:-1]:
        node = node[key]
    return node, keys[-1]


def _inside(path, outer):
    return path == outer or path.startswith(outer + ".") or path.startswith(outer + "[")


def related(named, mutated, text):
    """The field an error names is the one changed, inside it or around it; for a duplicate id, its sibling."""
    for m in mutated:
        if _inside(named, m) or _inside(m, named):
            return True
        if "appears twice" in text and re.sub(r"\[\d+\]", "[*]", named) == re.sub(r"\[\d+\]", "[*]", m):
            return True
    return False


def check_filters(facts, mutated, tp_size=2):
    """Both filters on these facts: a plan, or an AnsibleFilterError naming host (and the field)."""
    hostname = facts.get("hostname") if isinstance(facts, dict) else None
    expected_host = hostname if isinstance(hostname, str) and hostname else "(unnamed host)"
    calls = (
        ("socket_local_groups", expected_host, lambda: socket_local_groups(facts, tp_size)),
        ("fleet_plan", "gpu-x", lambda: fleet_plan({"gpu-x": {"ansible_facts": {"numa_topology": facts}}},
                                                   tp_size=tp_size)),
    )
    for name, host, call in calls:
        try:
            plan = call()
        except AnsibleFilterError as exc:
            text = str(exc)
            assert text.startswith("gpufleet.numa.%s: host %s: " % (name, host)), text
            match = FIELD.search(text)
            if match:
                assert related(match.group(1), mutated, text), (text, mutated)
            else:
                # not a malformed field: a plan the facts make impossible, said in words
                assert " must be " not in text, text
            continue
        assert isinstance(plan, dict)
        json.dumps(plan)
        groups = plan["groups"] if "groups" in plan else plan["instances"]
        assert all(n >= 0 for grp in groups for n in grp["numa_nodes"]), groups  # -1 is unknown, not a node


WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 300),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.sampled_from(["NV4", "SYS", "0-3", "0000:ff:00.0", "", "-1"]),
    st.lists(st.one_of(st.integers(-2, 5), st.text(max_size=2)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(-2, 5), max_size=2),
)


def _children(value, path):
    """(path, container, key) of each field directly inside value."""
    if isinstance(value, dict):
        quoted = path == "links" or path.startswith("links[") or path.endswith(".distances")
        return [("%s[%r]" % (path, k) if quoted else ("%s.%s" % (path, k) if path else k), value, k) for k in value]
    if isinstance(value, list):
        return [("%s[%d]" % (path, i), value, i) for i in range(len(value))]
    return []


def _node_refs(facts):
    refs = []
    for i, gpu in enumerate(facts.get("gpus") if isinstance(facts.get("gpus"), list) else []):
        if isinstance(gpu, dict) and "numa_node" in gpu:
            refs.append("gpus[%d].numa_node" % i)
    for i, node in enumerate(facts.get("numa_nodes") if isinstance(facts.get("numa_nodes"), list) else []):
        if isinstance(node, dict):
            refs.extend("numa_nodes[%d].%s" % (i, k) for k in ("id", "socket") if k in node)
    for i, sock in enumerate(facts.get("sockets") if isinstance(facts.get("sockets"), list) else []):
        if isinstance(sock, dict) and isinstance(sock.get("numa_nodes"), list):
            refs.extend("sockets[%d].numa_nodes[%d]" % (i, k) for k in range(len(sock["numa_nodes"])))
    return refs


@st.composite
def mutated_facts(draw):
    """A recorded machine's facts with 1-3 fields replaced by a wrong value or removed.

    The field is found by a random walk from the top (stop here or go one
    level deeper), so top-level fields are as likely as deep ones."""
    name = draw(st.sampled_from(RECORDED))
    facts = copy.deepcopy(BASES[name])
    mutated = []
    for _step in range(draw(st.integers(1, 3))):
        step = draw(st.integers(0, 3))
        gpus = facts.get("gpus")
        if step == 1 and isinstance(gpus, list) and gpus:
            # one GPU, or one of its fields: the part of the facts with the most fields the planner reads
            i = draw(st.integers(0, len(gpus) - 1))
            fields = sorted(gpus[i]) if isinstance(gpus[i], dict) else []
            field = draw(st.sampled_from([None] + fields))
            parent, key = (gpus, i) if field is None else (gpus[i], field)
            if field is not None and draw(st.booleans()):
                del parent[key]
            else:
                parent[key] = draw(WRONG)
            mutated.append("gpus[%d]" % i + ("" if field is None else "." + field))
            continue
        if step == 0:
            # a NUMA node or socket reference: negative (-1 is the kernel's "unknown"), null or mistyped
            refs = list(_node_refs(facts))
            if refs:
                path = draw(st.sampled_from(refs))
                parent, key = locate(facts, path)
                parent[key] = draw(st.sampled_from([-1, -1, -2, None, "0", 1.0, True, 0, 3]))
                mutated.append(path)
                continue
        value, path = facts, ""
        while True:
            inside = [c for c in _children(value, path) if c[0] != "schema_version"]
            if not inside or (path and draw(st.booleans())):
                break
            path, parent, key = draw(st.sampled_from(inside))
            value = parent[key]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[key]  # a missing field
        else:
            parent[key] = draw(WRONG)
        mutated.append(path)
    return facts, mutated, draw(st.integers(1, 4))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_facts())
def test_filters_on_mutated_recorded_facts_plan_or_name_host_and_field(case):
    facts, mutated, tp_size = case
    check_filters(facts, mutated, tp_size)


def _set(path, value):
    def mutate(facts):
        parent, key = locate(facts, path)
        parent[key] = value
    return mutate


# The raw Python errors (TypeError, AttributeError) the filters used to let
# through, and a NUMA node -1 that used to be planned as a real node.
PROBES = [
    ("gpus not a list", _set("gpus", {"0": {}}), "numa_topology.gpus must be a list, got {'0': {}}"),
    ("gpu not a mapping", _set("gpus[3]", "GPU3"), "numa_topology.gpus[3] must be a mapping, got 'GPU3'"),
    ("numa_node a string", _set("gpus[3].numa_node", "x"),
     "numa_topology.gpus[3].numa_node must be an integer >= 0, -1 (unknown) or null, got 'x'"),
    ("cpus an int", _set("numa_nodes[0].cpus", 5), "numa_topology.numa_nodes[0].cpus must be a cpulist string or null, got 5"),
    ("links not a mapping", _set("links", [1]), "numa_topology.links must be a mapping, got [1]"),
    ("links row not a mapping", _set("links['0000:03:00.0']", ["SYS"]),
     "numa_topology.links['0000:03:00.0'] must be a mapping, got ['SYS']"),
    ("distances a list", _set("numa_nodes[0].distances", [10, 21]),
     "numa_topology.numa_nodes[0].distances must be a mapping, got [10, 21]"),
    ("distance not a number", _set("numa_nodes[0].distances", {"1": "far"}),
     "numa_topology.numa_nodes[0].distances['1'] must be an integer >= 0, got 'far'"),
    ("sockets entry not a mapping", _set("sockets", [0]), "numa_topology.sockets[0] must be a mapping, got 0"),
    ("socket nodes not a list", _set("sockets[0].numa_nodes", 3), "numa_topology.sockets[0].numa_nodes must be a list, got 3"),
    ("smt siblings not lists", _set("smt_siblings", [0, 64]), "numa_topology.smt_siblings[0] must be a list of CPU ids, got 0"),
    ("bus id not a string", _set("gpus[3].pci_bus_id", 7), "numa_topology.gpus[3].pci_bus_id must be a string or null, got 7"),
    ("uuid a list", _set("gpus[3].uuid", ["GPU-1"]), "numa_topology.gpus[3].uuid must be a string or null, got ['GPU-1']"),
]


@pytest.mark.parametrize("mutate, message", [p[1:] for p in PROBES], ids=[p[0] for p in PROBES])
def test_filters_wrongly_typed_fact_names_host_and_field(mutate, message):
    facts = copy.deepcopy(BASES["mi50_8gpu_nps4"])
    mutate(facts)
    for call, host in ((lambda: socket_local_groups(facts, 2, exclude_gpus=["0000:26:00.0"]), "mi50-8gpu-nps4"),
                       (lambda: fleet_plan({"gpu-x": {"numa_topology": facts}}, tp_size=2,
                                           exclude_gpus=["0000:26:00.0"]), "gpu-x")):
        with pytest.raises(AnsibleFilterError) as info:
            call()
        assert "host %s: %s" % (host, message) in str(info.value)


@pytest.mark.parametrize("entry", ["gpu-a", ["facts"], 5, None], ids=["str", "list", "int", "null"])
def test_fleet_plan_hostvars_entry_not_a_mapping_names_host(entry):
    with pytest.raises(AnsibleFilterError, match="fleet_plan: host gpu-x: no topology facts"):
        fleet_plan({"gpu-x": entry, "gpu-y": {"numa_topology": BASES["azure_ndv4_like"]}}, tp_size=2)
    with pytest.raises(AnsibleFilterError, match="fleet_plan: host gpu-x: topology facts must be a mapping"):
        fleet_plan({"gpu-x": {"numa_topology": entry or "x"}}, tp_size=2)


def test_filters_numa_node_minus_one_is_unknown_not_a_node():
    facts = copy.deepcopy(BASES["mi50_8gpu_nps4"])
    gid = facts["gpus"][3]["id"]
    facts["gpus"][3]["numa_node"] = -1
    plan = socket_local_groups(facts, 1)
    assert gid not in [g["id"] for grp in plan["groups"] for g in grp["gpus"]]
    assert -1 not in [n for grp in plan["groups"] for n in grp["numa_nodes"]]
    assert [u["id"] for u in plan["unused"]] == [gid]
    assert "GPU %s reports numa_node -1; NUMA node unknown" % gid in plan["warnings"]
    fleet = fleet_plan({"gpu-x": {"numa_topology": facts}}, tp_size=1)
    assert {"host": "gpu-x", "text": "GPU %s reports numa_node -1; NUMA node unknown" % gid, "gpus": [gid],
            "nodes": []} in fleet["warnings"]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"hosts": 5}, "hosts must be a list of host names, got 5"),
        ({"hosts": [["gpu-x"]]}, "hosts must be a list of host names"),
        ({"tp_size": "²"}, "tp_size must be an integer >= 1, got '²'"),
        ({"exclude_gpus": {"gpu-x": 5}}, "exclude_gpus['gpu-x'] must be a list of PCI bus ids or UUIDs, got 5"),
        ({"exclude_gpus": {5: []}}, "exclude_gpus: keys must be host names, got 5"),
        ({"name_prefix": 5}, "name_prefix must be a non-empty string, got 5"),
        ({"max_instances_per_host": 1.5}, "max_instances_per_host must be an integer >= 1, got 1.5"),
    ],
)
def test_fleet_plan_wrongly_typed_option_is_named(options, message):
    options = dict({"tp_size": 2}, **options)
    with pytest.raises(AnsibleFilterError) as info:
        fleet_plan({"gpu-x": {"numa_topology": BASES["azure_ndv4_like"]}}, **options)
    assert message in str(info.value)


# ---------------------------------------------------------------- failures the planner did not foresee


@pytest.mark.parametrize("error", [TypeError("'<' not supported between instances of 'tuple' and 'int'"),
                                   KeyError("numa_nodes"), IndexError("list index out of range")])
def test_filters_turn_any_planner_failure_into_a_filter_error_naming_the_host(monkeypatch, error):
    # Was: anything but ValueError left the filters as a traceback, no host named.
    from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
    from ansible_collections.gpufleet.numa.plugins.module_utils.placement import search as placement_search

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(placement_search, "search", broken)
    placement.clear_cache()
    try:
        facts = h100_nvswitch("gpu-q")
        with pytest.raises(AnsibleFilterError, match=r"socket_local_groups: host gpu-q: the planner failed on this "
                                                     r"host \(%s: " % type(error).__name__):
            socket_local_groups(facts, tp_size=2)
        with pytest.raises(AnsibleFilterError, match=r"fleet_plan: host gpu-q: the planner failed") as caught:
            fleet_plan({"gpu-q": {"ansible_facts": {"numa_topology": facts}}}, tp_size=2)
        assert "Traceback" not in str(caught.value)
    finally:
        placement.clear_cache()


def test_filters_planner_failure_reading_odd_facts_names_the_host():
    class Odd(dict):
        def get(self, key, default=None):
            if key == "numa_nodes":
                raise RuntimeError("no")
            return dict.get(self, key, default)

    facts = Odd(h100_nvswitch("gpu-r"))
    with pytest.raises(AnsibleFilterError, match=r"fleet_plan: host gpu-r: the planner failed on this host "
                                                 r"\(RuntimeError: 'no'\)"):
        fleet_plan({"gpu-r": {"numa_topology": facts}}, tp_size=2)
