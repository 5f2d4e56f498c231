# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Crafted numa_audit module results: the action fails that host with a
message naming the host and the field, never a TypeError, KeyError or
AttributeError, and keeps only the audit's fields; the report filters
render a bad host result as invalid and every other host as before.

The module's answer is replaced in the action (what a hostile host could
send back); everything from there on is the real action and filters."""

from __future__ import annotations

import copy
import json
import types

import pytest
from ansible.errors import AnsibleActionFail
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.plugins.action.numa_audit import ActionModule
from ansible_collections.gpufleet.numa.plugins.filter import audit_views
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results
from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes

SOME = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def module_answer():
    """What the module returns on the DGX-2 trap (record=true): what it
    read, nothing judged (the findings are the action's)."""
    facts, processes = audit_replay.gather_capture(capture_with_processes(DGX2, TRAP_HOLDS, hostname="dgx2h"))
    return {"changed": False, "topology": facts, "process_source": processes["source"],
            "processes": processes["processes"], "process_warnings": processes["warnings"], "warnings": [],
            "capture": {"capture_version": 1, "hostname": "dgx2h", "files": {}}}


GOOD = module_answer()


def run_action(answer, host="gpu-a"):
    task = types.SimpleNamespace(args={"record": True}, async_val=0, check_mode=False,
                                 action="gpufleet.numa.numa_audit")
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/nonexistent"))
    action = ActionModule(task, connection, None, None, None)
    action._execute_module = lambda module_args=None, task_vars=None: copy.deepcopy(answer)
    return action.run(task_vars={"inventory_hostname": host})


def crafted(path, value):
    """GOOD with the value at path (a list of keys and indices) replaced; DELETE removes it."""
    answer = copy.deepcopy(GOOD)
    target = answer
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return answer


DELETE = object()
NESTED = {"a": [{"b": [{"c": [[{"d": None}]]}]}]}

# (id, path, value, the field path the message names)
SHAPES = [
    ("topology_missing", ["topology"], DELETE, "result: must have the field topology"),
    ("topology_null", ["topology"], None, "result.topology: must be a mapping (got None)"),
    ("topology_list", ["topology"], [1, 2], "result.topology: must be a mapping"),
    ("gpus_text", ["topology", "gpus"], "0000:1a:00.0", "result.topology.gpus: must be a list"),
    ("gpus_missing", ["topology", "gpus"], DELETE, "result.topology: must have the field gpus"),
    ("gpu_text", ["topology", "gpus", 0], "GPU0", "result.topology.gpus[0]: must be a mapping"),
    ("gpu_id_missing", ["topology", "gpus", 0, "id"], DELETE, "result.topology.gpus[0]: must have the field id"),
    ("gpu_node_text", ["topology", "gpus", 3, "numa_node"], "x", "result.topology.gpus[3].numa_node: must be an integer"),
    ("gpu_node_bool", ["topology", "gpus", 3, "numa_node"], True, "result.topology.gpus[3].numa_node: must be an integer"),
    ("gpu_name_nested", ["topology", "gpus", 0, "name"], NESTED, "result.topology.gpus[0].name: must be a string"),
    ("node_id_text", ["topology", "numa_nodes", 0, "id"], "zero", "result.topology.numa_nodes[0].id: must be an integer"),
    ("node_cpus_junk", ["topology", "numa_nodes", 1, "cpus"], "banana", "result.topology.numa_nodes[1].cpus: must be a CPU"),
    ("socket_nodes_text", ["topology", "sockets", 0, "numa_nodes"], "0", "result.topology.sockets[0].numa_nodes: must be a list"),
    ("links_list", ["topology", "links"], ["NV6"], "result.topology.links: must be a mapping"),
    ("link_class_int", ["topology", "links", "0000:34:00.0", "0000:36:00.0"], 6,
     "result.topology.links['0000:34:00.0']['0000:36:00.0']: must be a string"),
    ("processes_mapping", ["processes"], {"4242": {}}, "result.processes: must be a list"),
    ("process_null", ["processes", 0], None, "result.processes[0]: must be a mapping (got None)"),
    ("pid_text", ["processes", 0, "pid"], "4242", "result.processes[0].pid: must be an integer"),
    ("pid_negative", ["processes", 0, "pid"], -1, "result.processes[0].pid: must be an integer >= 0"),
    ("process_gpus_null", ["processes", 0, "gpus"], None, "result.processes[0].gpus: must be a list (got None)"),
    ("process_gpus_ints", ["processes", 0, "gpus"], [1], "result.processes[0].gpus[0]: must be a string"),
    ("memory_kb_node_text", ["processes", 0, "memory_kb"], {"x": 1}, "result.processes[0].memory_kb: keys must be NUMA node ids"),
    ("environment_nested", ["processes", 0, "environment"], {"CUDA_VISIBLE_DEVICES": NESTED},
     "result.processes[0].environment['CUDA_VISIBLE_DEVICES']: must be a string"),
    ("cpus_allowed_huge", ["processes", 0, "cpus_allowed"], "0-99999999", "result.processes[0].cpus_allowed: must be a CPU"),
    ("processes_huge", ["processes"], [{"pid": 1, "gpus": []}] * (host_results.MAX_ITEMS + 1),
     "result.processes: must hold at most 4096 items"),
    ("argv_word_int", ["processes", 0, "argv"], ["vllm", 7], "result.processes[0].argv[1]: must be a string"),
    ("source_int", ["process_source"], 7, "result.process_source: must be nvml, nvidia-smi or null"),
    ("warnings_text", ["warnings"], "oops", "result.warnings: must be a list"),
    ("process_warnings_int", ["process_warnings"], [7], "result.process_warnings[0]: must be a string"),
    ("capture_text", ["capture"], "files: {}", "capture result.capture must be a mapping"),
    ("capture_files_int", ["capture", "files"], 1, "capture result.capture: files must be a mapping"),
]


@pytest.mark.parametrize("path,value,named", [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_crafted_module_result_fails_that_host_naming_the_field(path, value, named):
    result = run_action(crafted(path, value))
    assert result.get("failed") is True, result
    assert result["msg"].startswith("host gpu-a: numa_audit "), result["msg"]
    assert named in result["msg"], result["msg"]
    assert len(result["msg"]) < 600
    assert set(result) <= {"failed", "msg"}


def test_good_module_result_keeps_only_the_audit_fields():
    answer = dict(GOOD, ansible_facts={"numa_topology": {"gpus": []}, "ansible_ssh_host": "evil"},
                  unknown_key="x", _ansible_verbose_always=True)
    answer["topology"] = dict(answer["topology"], extra={"deep": "junk"})
    answer["processes"] = [dict(p, extra="junk") for p in answer["processes"]]
    result = run_action(answer)
    assert not result.get("failed"), result.get("msg")
    assert "ansible_facts" not in result and "unknown_key" not in result and "_ansible_verbose_always" not in result
    assert "extra" not in result["topology"] and all("extra" not in p for p in result["processes"])
    assert result["findings"] == run_action(GOOD)["findings"]
    assert result["capture"] == GOOD["capture"]


def test_failed_module_answer_keeps_only_its_message():
    result = run_action({"failed": True, "msg": "numa_audit: boom", "ansible_facts": {"x": 1}, "rc": 1})
    assert result == {"failed": True, "msg": "numa_audit: boom"}
    result = run_action({"failed": True, "msg": {"not": "text"}})
    assert result["failed"] and result["msg"].startswith("numa_audit gpu-a: the module failed without a message")


def test_process_warnings_reach_the_result_beside_ansibles_own_warnings():
    # ansible-core 2.19 turns a module's warnings into its own records (not
    # text): the audit's read problems travel as process_warnings.
    record = type("WarningSummary", (), {})()
    answer = dict(GOOD, process_warnings=["nvidia-smi compute apps line 1 is not 'pid, bus id': 'x'"],
                  warnings=[record])
    result = run_action(answer)
    assert not result.get("failed"), result.get("msg")
    assert result["warnings"] == answer["process_warnings"]


def test_the_module_is_sent_only_how_to_read():
    sent = []
    task = types.SimpleNamespace(args={"record": True, "memory_threshold": 30, "fail_on_severity": "critical",
                                       "nvidia_smi": "/opt/bin/nvidia-smi"}, async_val=0, check_mode=False,
                                 action="gpufleet.numa.numa_audit")
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/nonexistent"))
    action = ActionModule(task, connection, None, None, None)
    action._execute_module = lambda module_args=None, task_vars=None: sent.append(module_args) or copy.deepcopy(GOOD)
    result = action.run(task_vars={"inventory_hostname": "gpu-a"})
    assert sent == [{"record": True, "nvidia_smi": "/opt/bin/nvidia-smi"}]
    assert result["failed"] and result["msg"].startswith("gpu-a: 4 finding(s) at or above critical")


# ------------------------------------------------------------ the report filters

def host_result(host):
    return dict(run_action(GOOD, host=host), host=host)


GOOD_HOSTS = [host_result("gpu-a"), host_result("gpu-c")]

REPORT_SHAPES = [
    ("not_a_mapping", "text"),
    ("no_findings", {"host": "gpu-b"}),
    ("findings_mapping", {"host": "gpu-b", "findings": {"a": 1}}),
    ("finding_severity", {"host": "gpu-b", "findings": [dict(GOOD_HOSTS[0]["findings"][0], severity="fatal")]}),
    ("finding_missing_message", {"host": "gpu-b", "findings": [{"host": "gpu-b", "severity": "error"}]}),
    ("groups_pids_text", dict(GOOD_HOSTS[0], host="gpu-b", groups=[dict(GOOD_HOSTS[0]["groups"][0], pids="1")])),
    ("topology_gpu_null", dict(GOOD_HOSTS[0], host="gpu-b", topology={"gpus": [None]})),
    ("counts_list", dict(GOOD_HOSTS[0], host="gpu-b", counts=[1])),
    ("instances_junk", dict(GOOD_HOSTS[0], host="gpu-b", instances=[{"gpus": 1}])),
    ("host_nested", dict(GOOD_HOSTS[0], host=NESTED)),
]


@pytest.mark.parametrize("bad", [s[1] for s in REPORT_SHAPES], ids=[s[0] for s in REPORT_SHAPES])
def test_report_filters_render_every_good_host_beside_a_bad_one(bad):
    results = [GOOD_HOSTS[0], bad, GOOD_HOSTS[1]]
    page = audit_views.audit_html(results)
    table = audit_views.audit_table(results)
    findings = audit_views.audit_findings(results, "error")
    for host in ("gpu-a", "gpu-c"):
        assert 'id="host-%s"' % host in page and "topology of %s" % host in page
        assert any(line.startswith(host + ": 4 critical") for line in table)
    assert page.count("Result invalid: ") == 1
    invalid = [f for f in findings if f["code"] == "result_invalid"]
    assert len(invalid) == 1 and invalid[0]["severity"] == "error"


# ------------------------------------------------------------ property tests

_JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


def _paths(value, prefix=()):
    yield list(prefix)
    if isinstance(value, dict):
        for key in sorted(value, key=str)[:12]:
            yield from _paths(value[key], prefix + (key,))
    elif isinstance(value, list):
        for index in range(min(len(value), 2)):
            yield from _paths(value[index], prefix + (index,))


_MODULE_PATHS = [p for p in _paths({k: GOOD[k] for k in ("topology", "processes", "process_source", "warnings",
                                                         "process_warnings", "capture")}) if p]


@SOME
@given(path=st.sampled_from(_MODULE_PATHS), junk=_JUNK)
def test_any_junk_anywhere_in_the_module_result_is_a_result_or_a_named_failure(path, junk):
    result = run_action(crafted(path, junk))
    if result.get("failed"):
        assert result["msg"].startswith("host gpu-a: numa_audit "), result["msg"]
    else:
        assert "findings" in result and "topology" in result
        audit_views.audit_html([result])


_HOST_PATHS = [p for p in _paths(GOOD_HOSTS[0]) if p and p[0] not in ("today_plan", "summary", "capture")]


@SOME
@given(path=st.sampled_from(_HOST_PATHS), junk=_JUNK)
def test_any_junk_in_one_host_result_leaves_the_other_hosts_report(path, junk):
    bad = copy.deepcopy(GOOD_HOSTS[0])
    bad["host"] = "gpu-b"
    target = bad
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = junk
    results = [GOOD_HOSTS[0], bad, GOOD_HOSTS[1]]
    page = audit_views.audit_html(results)
    table = audit_views.audit_table(results)
    audit_views.audit_findings(results, "info")
    for host in ("gpu-a", "gpu-c"):
        assert "topology of %s" % host in page
        assert any(line.startswith(host + ": 4 critical") for line in table)


# ------------------------------------------------------------ unit names and states

def run_with_plan(tmp_path, instances, answer=None, **args):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"plan": {"instances": instances, "unused": []}}))
    sent = []
    task = types.SimpleNamespace(args=dict(args, plan=str(plan)), async_val=0, check_mode=False,
                                 action="gpufleet.numa.numa_audit")
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/nonexistent"))
    action = ActionModule(task, connection, None, None, None)
    action._execute_module = lambda module_args=None, task_vars=None: sent.append(module_args) or copy.deepcopy(
        answer or GOOD)
    return action.run(task_vars={"inventory_hostname": "gpu-a"}), sent


def test_the_module_is_sent_the_planned_unit_names_only(tmp_path):
    instances = [{"host": "gpu-a", "name": "vllm-0", "gpus": []}, {"host": "gpu-b", "name": "vllm-1", "gpus": []},
                 {"host": "gpu-a", "name": "vllm-2", "gpus": [], "deployed": {"unit": "llm-2.service"}}]
    result, sent = run_with_plan(tmp_path, instances, unit_prefix="llm-")
    assert sent == [{"units": ["llm-vllm-0.service", "llm-2.service"]}]
    # the names are the action's, from the plan: a task cannot set them
    with pytest.raises(AnsibleActionFail, match="Invalid options for gpufleet.numa.numa_audit: units"):
        run_with_plan(tmp_path, instances, units=["injected.service"])
    assert [(i["name"], i["state"], i["unit"]) for i in result["instances"]] == [
        ("vllm-0", "stopped", "llm-vllm-0.service"), ("vllm-2", "stopped", "llm-2.service")]


@pytest.mark.parametrize("prefix", ["-x", "a b", "gpufleet-\n", "", "x" * 65, 3])
def test_a_bad_unit_prefix_fails_before_the_host_is_read(tmp_path, prefix):
    result, sent = run_with_plan(tmp_path, [{"host": "gpu-a", "name": "vllm-0", "gpus": []}], unit_prefix=prefix)
    assert result["failed"] and result["msg"].startswith("unit_prefix: must be 1-64 characters") and sent == []


@pytest.mark.parametrize("name", ["vllm 0", "x;reboot", "a\nb", "../x"])
def test_a_plan_whose_unit_names_are_not_unit_names_fails_naming_the_instance(tmp_path, name):
    result, sent = run_with_plan(tmp_path, [{"host": "gpu-a", "name": name, "gpus": []}])
    assert result["failed"] and "unit name must be a systemd service name" in result["msg"] and sent == []


def test_the_unit_states_a_host_returns_are_shape_checked(tmp_path):
    instances = [{"host": "gpu-a", "name": "vllm-0", "gpus": []}]
    good = {"source": "systemd", "missing": None, "units": {"gpufleet-vllm-0.service": {
        "id": "gpufleet-vllm-0.service", "load_state": "loaded", "active_state": "failed", "sub_state": "failed",
        "main_pid": 0, "started_monotonic_us": 1}}}
    result, dummy = run_with_plan(tmp_path, instances, answer=dict(GOOD, unit_states=good))
    assert [(i["state"], i["unit_state"]) for i in result["instances"]] == [("failed", "failed (failed)")]
    bad = dict(good, source="evil")
    result, dummy = run_with_plan(tmp_path, instances, answer=dict(GOOD, unit_states=bad))
    assert result["failed"] and result["msg"] == "host gpu-a: numa_audit result.unit_states.source: must be systemd or null (got 'evil')"
    bad = dict(good, units={"u.service": {"id": "u.service", "main_pid": "1"}})
    result, dummy = run_with_plan(tmp_path, instances, answer=dict(GOOD, unit_states=bad))
    assert result["failed"] and "result.unit_states.units['u.service'].main_pid: must be an integer" in result["msg"]
