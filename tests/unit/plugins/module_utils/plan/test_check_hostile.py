# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Hostile input, round 2: the kept plan (gpufleet_plan_file).

A plan file that exists but cannot be read stops the run naming the file;
only a path where nothing exists is "no plan yet". A tampered plan ends in
one clear ValueError naming the file, the field and the rule, never a
traceback; a plan that loads binds only the GPUs, NUMA nodes and CPUs its
host's record lists."""

from __future__ import annotations

import copy
import json
import os

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import fleet_plan_by_host, load_plan, merge_plan
from ansible_collections.gpufleet.numa.plugins.filter.plan_artifact import rollout_batch
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import VARIABLES

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
NAME = "/srv/plan.json"
SOME = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLEET = ["gpu-a", "gpu-m1", "gpu-m2"]


@pytest.fixture(scope="module")
def kept():
    """A kept plan as a full run writes it: gpu-a (H100, TP 4: two
    instances) and one TP 4 x PP 2 instance over gpu-m1 and gpu-m2."""
    facts = topology.facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))
    pair = {"gpufleet_tp_size": 4, "gpufleet_pp_size": 2, "gpufleet_nodes_per_instance": 2}
    host_vars = {
        "gpu-a": {"gpufleet_tp_size": 4, "vllm_model": "org/model", "ansible_facts": {"numa_topology": facts}},
        "gpu-m1": dict(pair, vllm_model="org/model", ansible_facts={"numa_topology": facts}),
        "gpu-m2": dict(pair, vllm_model="org/model", ansible_facts={"numa_topology": facts}),
    }
    merged = merge_plan(fleet_plan_by_host(host_vars), previous="", replanned=FLEET, fleet_hosts=FLEET)
    return json.loads(plan_artifact.dump_artifact(merged["plan"]))


def test_a_written_plan_records_each_hosts_hardware_and_loads(kept):
    record = kept["hosts"]["gpu-a"]["hardware"]
    assert record["numa_nodes"] == [0, 1] and record["cpus"] == "0-191"
    assert [index for dummy, index in record["gpus"]] == list(range(8))
    assert plan_artifact.load_artifact(plan_artifact.dump_artifact(kept), NAME) == kept


# --- reading the file: only "nothing there" is no plan ---------------------

def _link_below_a_file(path):
    (path.parent / "file").write_text("x")
    os.symlink(str(path.parent / "file" / "below"), str(path))


def test_read_plan_file_nothing_there_is_no_plan(tmp_path):
    assert plan_artifact.read_plan_file(str(tmp_path / "gpufleet-plan.json")) is None


@pytest.mark.parametrize("make,reason", [
    (lambda p: os.symlink(str(p) + ".gone", str(p)), r"is a symbolic link to '.*\.gone', which does not exist"),
    (lambda p: os.mkdir(str(p)), r"it is a directory, not a regular file"),
    (lambda p: os.mkfifo(str(p)), r"it is a FIFO, not a regular file"),
    (lambda p: os.symlink("/dev/null", str(p)), r"it is a character device, not a regular file"),
    (lambda p: p.write_text(""), r"is empty \(a kept plan never is\)"),
    (lambda p: p.write_bytes(b'{"a": "\xff"}'), r"is not UTF-8 text \(byte 7\)"),
    (lambda p: p.write_text("x" * 101), r"it is larger than 100 bytes"),
    (_link_below_a_file, r"Not a directory \(ENOTDIR\)"),
])
def test_read_plan_file_refuses_what_exists_but_cannot_be_read(tmp_path, make, reason):
    path = tmp_path / "gpufleet-plan.json"
    make(path)
    with pytest.raises(ValueError, match=r"^plan file %s( cannot be read:)? .*%s" % (path, reason)):
        plan_artifact.read_plan_file(str(path), max_bytes=100)


def test_read_plan_file_without_permission_names_the_file(tmp_path):
    """EACCES: root reads anything, so as user nobody (effective uid only,
    and back) when the tests run as root."""
    path = tmp_path / "gpufleet-plan.json"
    path.write_text("{}")
    path.chmod(0)
    root = os.geteuid() == 0
    if root:
        os.seteuid(65534)
    try:
        with pytest.raises(ValueError) as info:
            plan_artifact.read_plan_file(str(path))
    finally:
        if root:
            os.seteuid(0)
    assert str(info.value).startswith("plan file %s cannot be read: Permission denied (EACCES)" % path)


# --- tampered plans: 40 shapes, one clear error each -----------------------

def _instance(plan, host, n=0):
    return [i for i in plan["instances"] if i["host"] == host][n]


def _many(plan):
    one = _instance(plan, "gpu-a")
    plan["instances"] = [dict(one, name="vllm-%d" % n, port=1 + n % 60000) for n in range(50000)]


def _gpus(plan, indices):
    inst = _instance(plan, "gpu-a")
    inst["gpu_indices"] = indices
    inst["gpus"] = [{"id": "0000:ff:%02x.0" % (i % 256), "index": i} for i in indices]
    inst["binding"]["workers"] = []
    inst["stages"] = []


def _stray_multinode(plan):
    _instance(plan, "gpu-a")["pp_size"] = 2
    _instance(plan, "gpu-a")["multinode"] = {"nnodes": 2, "node_rank": 0, "head": "gpu-a",
                                             "hosts": ["gpu-a", "gpu-m2"], "master_port": 29501, "nics": []}


def _set(path, value):
    """A change to the field at `path` (keys and indices) of gpu-a's first instance."""
    def change(plan):
        target = _instance(plan, "gpu-a")
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _top(key, value):
    def change(plan):
        plan[key] = value
    return change


def _host_entry(host, key, value):
    def change(plan):
        plan["hosts"][host][key] = value
    return change


I = r"instances\[0\]"
TAMPERED = [
    ("mems_4095", _set(["binding", "mems"], [4095]), I + r"\.binding\.mems\[0\]: must be at most 1023 \(got 4095\)"),
    ("mems_beyond_host", _set(["binding", "mems"], [2]), I + r"\.binding\.mems: must be NUMA nodes this host "
     r"has \(0, 1\) \(got \[2\]\)"),
    ("gpus_beyond_host", lambda p: _gpus(p, [4094, 4095, 4093, 4092]), I + r"\.gpus: must be GPUs this host has"),
    ("cpus_beyond_host", _set(["binding", "cpus"], "0-3,500"), I + r"\.binding\.cpus: must be CPUs this host has "
     r"\(0-191\) \(got '500'\)"),
    ("worker_node_beyond_host", _set(["binding", "workers"], [{"gpu_index": 0, "node": 7, "cpus": "0"}]),
     I + r"\.binding\.mems: must be NUMA nodes this host has \(0, 1\) \(got \[7\]\)"),
    ("numa_nodes_beyond_host", _set(["numa_nodes"], [0, 9]), I + r"\.binding\.mems: must be NUMA nodes"),
    ("50000_instances_on_8_gpus", _many, r"instances: must hold at most one instance per GPU of host 'gpu-a' \(8 "
     r"GPUs\) \(got '50000 instances'\)"),
    ("stray_multinode", _stray_multinode, I + r"\.multinode\.hosts: must each hold one entry of instance vllm-0 "
     r"\(entries on: gpu-a\)"),
    ("multinode_rank_wrong", lambda p: _instance(p, "gpu-m2")["multinode"].update(node_rank=0),
     r"instances\[3\]\.multinode\.node_rank: must be this entry's host's place in hosts \(gpu-m2 is rank 1\)"),
    ("multinode_ports_disagree", lambda p: _instance(p, "gpu-m2")["multinode"].update(master_port=29999),
     r"instances\[3\]\.multinode\.master_port: must be the same on every host of multi-node instance vllm-0"),
    ("multinode_models_disagree", lambda p: _instance(p, "gpu-m2").update(served_model_name="other"),
     r"instances\[3\]\.serves: must be the same on every host of multi-node instance vllm-0"),
    ("multinode_devices_disagree", lambda p: _instance(p, "gpu-m2").update(device="amd"),
     r"instances\[3\]\.device: must be the same on every host of multi-node instance vllm-0 \(instances\[2\] has "
     r"'nvidia'\)"),
    ("multinode_nnodes_one", lambda p: _instance(p, "gpu-m2")["multinode"].update(nnodes=1),
     r"instances\[3\]\.multinode\.nnodes: must be at least 2"),
    ("tp_size_text", _set(["tp_size"], "4"), I + r"\.tp_size: must be an integer \(got '4'\)"),
    ("tp_size_bool", _set(["tp_size"], True), I + r"\.tp_size: must be an integer \(got True\)"),
    ("tp_size_float", _set(["tp_size"], 4.0), I + r"\.tp_size: must be an integer \(got 4\.0\)"),
    ("tp_size_nan", _set(["tp_size"], float("nan")), I + r"\.tp_size: must be an integer \(got nan\)"),
    ("port_huge", _set(["port"], 10 ** 30), I + r"\.port: must be at most 65535"),
    ("port_zero", _set(["port"], 0), I + r"\.port: must be at least 1 \(got 0\)"),
    ("dist_port_range_reversed", _set(["dist_port_range"], [29099, 29000]), I + r"\.dist_port_range: must be "
     r"\[first, last\]"),
    ("name_newline", _set(["name"], "vllm-0\nExecStart=/bin/sh"), I + r"\.name: must not contain control"),
    ("name_dash", _set(["name"], "--help"), I + r"\.name: must be \[A-Za-z0-9_.-\], starting with a letter"),
    ("host_unknown", _set(["host"], "gpu-z"), r"instances\[\d\]\.host: must be a host of the plan's hosts "
     r"\(got 'gpu-z'\)"),
    ("policy_unknown", _set(["binding", "policy"], "preferred"), I + r"\.binding\.policy: must be one of bind"),
    ("by_node_text", _set(["binding", "by_node"], "yes"), I + r"\.binding\.by_node: must be a boolean"),
    ("binding_list", _set(["binding"], []), I + r"\.binding: must be a mapping \(got \[\]\)"),
    ("mems_unsorted", _set(["binding", "mems"], [1, 0]), I + r"\.binding\.mems: must be a sorted list"),
    ("mems_empty", _set(["binding", "mems"], []), I + r"\.binding\.mems: must hold at least 1 entries"),
    ("cpus_beyond_limit", _set(["binding", "cpus"], "0-99999"), I + r"\.binding\.cpus: CPU 99999 .* is beyond the "
     r"limit of 65536 CPUs"),
    ("gpu_indices_short", _set(["gpu_indices"], [0]), I + r"\.gpu_indices: must list tp_size \* pp_size = 4"),
    ("gpus_not_list", _set(["gpus"], "all"), I + r"\.gpus: must be a list \(got 'all'\)"),
    ("gpu_id_newline", lambda p: _instance(p, "gpu-a")["gpus"][0].update(id="GPU0\n"), I + r"\.gpus\[0\]\.id: "
     r"must not contain control"),
    ("stage_gpu_outside", _set(["stages", 0, "gpu_indices"], [7]), I + r"\.stages\[0\]\.gpu_indices: must be GPUs "
     r"of the instance's"),
    ("served_name_quote", _set(["served_model_name"], "m' or '1"), I + r"\.served_model_name: must be a served"),
    ("model_option", _set(["model"], "--trust-remote-code"), I + r"\.model: must not start with '-'"),
    ("instance_list", lambda p: p["instances"].insert(0, []), r"instance or unused GPU 0 has no host"),
    ("instance_text", lambda p: p["instances"].insert(0, {"host": "gpu-a", "name": []}), I + r": lacks tp_size"),
    ("instance_lacks_binding", lambda p: _instance(p, "gpu-a").pop("binding"), I + r": lacks binding"),
    ("duplicate_instance", lambda p: p["instances"].insert(1, copy.deepcopy(_instance(p, "gpu-a"))),
     r"hosts\.'gpu-a'\.gpus: must be at least the GPUs its instances use \(12 in 3 instances\) \(got 8\)"),
    ("duplicate_name", lambda p: _instance(p, "gpu-a", 1).update(name="vllm-0"),
     r"instances\[1\]: must not share name vllm-0 with instances\[0\] on host gpu-a"),
    ("duplicate_gpu", lambda p: _instance(p, "gpu-a", 1)["gpus"][0].update(id=_instance(p, "gpu-a")["gpus"][0]["id"]),
     r"instances\[1\]: must not share GPU"),
    ("duplicate_port", _set(["port"], 8001), r"instances\[1\]: must not share port 8001 with instances\[0\]"),
    ("host_gpus_huge", _host_entry("gpu-a", "gpus", 10 ** 6), r"hosts\.'gpu-a'\.gpus: must be at most 4096"),
    ("host_name_space", lambda p: p["hosts"].update({"a b": {"gpus": 1}}), r"hosts key: must be an inventory host"),
    ("option_unknown", lambda p: p["hosts"]["gpu-a"]["options"].update(rm="-rf"),
     r"hosts\.'gpu-a'\.options\.'rm': must be a placement option"),
    ("option_tp_zero", lambda p: p["hosts"]["gpu-a"]["options"].update(tp_size=0),
     r"hosts\.'gpu-a'\.options\.'tp_size': must be at least 1"),
    ("record_repeats_gpu", lambda p: p["hosts"]["gpu-a"]["hardware"]["gpus"].append(["x", 0]),
     r"hosts\.'gpu-a'\.hardware\.gpus\[8\]: must not repeat a GPU id or index"),
    ("record_not_mapping", _host_entry("gpu-a", "hardware", "8 GPUs"), r"hosts\.'gpu-a'\.hardware: must be a mapping"),
    # Found by the property test: a null record switched the hardware checks off.
    ("record_null", _host_entry("gpu-a", "hardware", None), r"hosts\.'gpu-a'\.hardware: must be a mapping"),
    # Issue 35: where the host's units listen, as deployed (the gateway connects there).
    ("address_wildcard", _host_entry("gpu-a", "address", "0.0.0.0"),
     r"hosts\.'gpu-a'\.address: must be an address the gateway can connect to, not the wildcard"),
    ("address_not_text", _host_entry("gpu-a", "address", 10), r"hosts\.'gpu-a'\.address: must be a string"),
    ("address_injected", _host_entry("gpu-a", "address", "10.0.0.1\n    server x 1.2.3.4:80"),
     r"hosts\.'gpu-a'\.address: "),
    ("unused_host_unknown", lambda p: p["unused"].append({"host": "gpu-z", "id": "x", "index": 0}),
     r"unused\[\d+\]\.host: must be a host of the plan's hosts"),
    ("unused_gpu_not_on_host", lambda p: p["unused"].append({"host": "gpu-a", "id": "0000:ff:00.0", "index": 9}),
     r"unused\[\d+\]: must be a GPU this host has"),
    ("warning_not_a_record", _top("warnings", [7]), r"warnings\[0\]: must be a mapping"),
    ("warning_unknown_field", _top("warnings", [{"x": 1}]), r"warnings\[0\]: has unknown field\(s\) x"),
    ("warning_without_nodes", _top("warnings", [{"host": "gpu-a", "text": "t", "gpus": []}]),
     r"warnings\[0\]: lacks nodes"),
    ("warning_host_not_a_name", _top("warnings", [{"host": "gpu a", "text": "t", "gpus": [], "nodes": []}]),
     r"warnings\[0\]\.host: must be an inventory host name"),
    ("warning_text_not_text", _top("warnings", [{"host": "gpu-a", "text": 5, "gpus": [], "nodes": []}]),
     r"warnings\[0\]\.text: must be a string"),
    ("warning_text_too_long", _top("warnings", [{"host": "gpu-a", "text": "x" * 5000, "gpus": [], "nodes": []}]),
     r"warnings\[0\]\.text: must be at most 4096 characters"),
    ("warning_gpus_not_list", _top("warnings", [{"host": "gpu-a", "text": "t", "gpus": "GPU0", "nodes": []}]),
     r"warnings\[0\]\.gpus: must be a list"),
    ("warning_gpu_not_an_id", _top("warnings", [{"host": "gpu-a", "text": "t", "gpus": ["a b"], "nodes": []}]),
     r"warnings\[0\]\.gpus\[0\]: must be a GPU id"),
    ("warning_node_not_int", _top("warnings", [{"host": "gpu-a", "text": "t", "gpus": [], "nodes": ["0"]}]),
     r"warnings\[0\]\.nodes\[0\]: must be an integer"),
    ("warning_nodes_unsorted", _top("warnings", [{"host": "gpu-a", "text": "t", "gpus": [], "nodes": [1, 0]}]),
     r"warnings\[0\]\.nodes: must be a sorted list of distinct NUMA nodes"),
    ("warning_old_string_no_host", _top("warnings", ["gpu a: text"]), r"warnings\[0\]\.host: must be an inventory host"),
    ("warning_old_string_no_separator", _top("warnings", ["gpu-a text"]), r"warnings\[0\]\.host: must not be empty"),
    ("totals_text", _top("totals", {"hosts": "3"}), r"totals\.hosts: must be an integer"),
    ("unused_not_list", _top("unused", {}), r"unused must be a list"),
    ("version_two", _top("artifact_version", 2), r"has artifact_version 2; this collection reads version 1"),
    # Round 3: Ansible's group names are no hosts of a record.
    ("host_all", lambda p: p["hosts"].update(all=p["hosts"]["gpu-a"]),
     r"hosts key: must be a host, not Ansible's group 'all'"),
    ("instance_host_ungrouped", lambda p: p["instances"][0].update(host="ungrouped"),
     r"instances\[0\]\.host: must be a host, not Ansible's group 'ungrouped'"),
]


@pytest.mark.parametrize("change,message", [t[1:] for t in TAMPERED], ids=[t[0] for t in TAMPERED])
def test_a_tampered_kept_plan_is_one_clear_error(kept, change, message):
    plan = copy.deepcopy(kept)
    change(plan)
    text = json.dumps(plan)
    with pytest.raises(ValueError, match=r"^plan file %s(:| has) " % NAME) as info:
        plan_artifact.load_artifact(text, NAME)
    assert info.type is ValueError  # exactly ValueError, no subclass
    assert __import__("re").search(message, str(info.value)), str(info.value)
    # and the filters say the same, as AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match=message):
        load_plan(text, NAME)
    with pytest.raises(AnsibleFilterError, match=message):
        merge_plan({"instances": [], "unused": [], "warnings": []}, previous=text, previous_name=NAME,
                   replanned=[], fleet_hosts=FLEET)


def test_a_host_entry_keeps_its_address_and_loads_without_one(kept):
    """hosts.HOST.address (issue 35) loads; a plan written before it has none and loads too."""
    plan = copy.deepcopy(kept)
    plan["hosts"]["gpu-a"]["address"] = "gpu-a.example.net"
    assert plan_artifact.load_artifact(json.dumps(plan), NAME)["hosts"]["gpu-a"]["address"] == "gpu-a.example.net"
    assert "address" not in plan_artifact.load_artifact(json.dumps(kept), NAME)["hosts"]["gpu-a"]


def test_nesting_beyond_the_parser_is_a_clear_error():
    with pytest.raises(ValueError, match=r"^plan file p nests too deeply"):
        plan_artifact.load_artifact("[" * 100000 + "]" * 100000, "p")


def test_an_old_plan_without_records_is_checked_by_schema_only(kept):
    plan = copy.deepcopy(kept)
    for entry in plan["hosts"].values():
        del entry["hardware"]
    _instance(plan, "gpu-a")["binding"]["mems"] = [5]
    assert plan_artifact.load_artifact(json.dumps(plan), NAME)["instances"][0]["binding"]["mems"] == [5]
    _instance(plan, "gpu-a")["binding"]["mems"] = [5000]
    with pytest.raises(ValueError, match=r"binding\.mems\[0\]: must be at most 1023"):
        plan_artifact.load_artifact(json.dumps(plan), NAME)


def test_a_partner_gone_from_the_inventory_leaves_a_plan_that_loads(kept):
    """gpu-m2 leaves the inventory: gpu-m1's half of their instance leaves
    the plan too (its GPUs unused), so the next run's load accepts it."""
    after = plan_artifact.merge_plans({"instances": [], "unused": [], "warnings": []}, kept, [],
                                      ["gpu-a", "gpu-m1"])["plan"]
    assert sorted(set(i["host"] for i in after["instances"])) == ["gpu-a"]
    assert any("gpu-m2 left the inventory" in w["text"] and w["host"] == "gpu-m1" for w in after["warnings"])
    plan_artifact.load_artifact(plan_artifact.dump_artifact(after), NAME)


# --- property: never anything but the clear error; what loads, exists ------

_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=12)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key in sorted(value):
            yield from _paths(value[key], prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, prefix + (i,))


@SOME
@given(st.data())
def test_kept_plans_load_or_fail_clearly_and_bind_only_what_the_host_has(kept, data):
    plan = copy.deepcopy(kept)
    paths = [p for p in _paths(plan) if p]
    for dummy in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        target = plan
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = data.draw(_JSON)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier change replaced a parent
    try:
        loaded = plan_artifact.load_artifact(json.dumps(plan), NAME)
    except ValueError as exc:
        assert type(exc) in (ValueError,) and str(exc).startswith("plan file %s" % NAME)
        return
    merged = plan_artifact.merge_plans({"instances": [], "unused": [], "warnings": []}, loaded, [], FLEET)["plan"]
    for host in ("gpu-a", "gpu-m1", "gpu-m2"):
        record = loaded["hosts"].get(host, {}).get("hardware")
        if record is None:
            continue  # a host entry replaced whole: no record to hold its units against
        instances = [i for i in merged["instances"] if i["host"] == host]
        try:
            units = host_state.host_units(instances, dict(VARIABLES, host=host, vllm_rollout_hosts=FLEET,
                                                          vllm_node_addresses={"gpu-m1": "10.0.0.1"}))["units"]
        except ValueError:
            continue
        for unit in units:
            environment = dict(unit["environment"])
            visible = [int(g) for g in environment["CUDA_VISIBLE_DEVICES"].split(",")]
            assert set(visible) <= set(index for dummy, index in record["gpus"])
            argv = unit["argv"]
            for flag in ("--cpunodebind=", "--membind=", "--interleave="):
                for word in argv:
                    if word.startswith(flag):
                        assert set(int(n) for n in word[len(flag):].split(",")) <= set(record["numa_nodes"])
            for word in argv:
                if word.startswith("--physcpubind="):
                    assert set(parse_cpulist(word[len("--physcpubind="):])) <= set(parse_cpulist(record["cpus"]))


# --- gpufleet_rollout_hosts_at_once (the vllm play's serial) ---------------

@pytest.mark.parametrize("value", ["abc", "-1", -1, 0, "0", "0%", "101%", "1.5", 2.5, True, None, "", "5 %", [2],
                                   "50%\n"])
def test_rollout_batch_refuses_what_serial_misreads(value):
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet.numa.rollout_batch: gpufleet_rollout_hosts_at_once: "
                       r"must be a positive integer or a percentage 1%-100% \(got "):
        rollout_batch(value)


@pytest.mark.parametrize("value,canonical", [(1, 1), ("3", 3), ("1%", "1%"), ("100%", "100%"), (500, 500)])
def test_rollout_batch_takes_counts_and_percentages(value, canonical):
    assert rollout_batch(value) == canonical == checks.batch_size("x", value)


def test_a_key_twice_in_one_object_is_refused(kept):
    # Round 3: duplicate keys were silently merged (the last one won).
    text = plan_artifact.dump_artifact(kept).replace('"gpus": 8,', '"gpus": 8, "gpus": 4,', 1)
    assert text.count('"gpus": 4') == 1
    with pytest.raises(ValueError, match=r"^plan file %s is not JSON: the key 'gpus' appears twice in one object$"
                       % NAME):
        plan_artifact.load_artifact(text, NAME)
