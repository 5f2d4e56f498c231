# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Module results from hosts are data: the numa_facts action's live path
(and numa_audit's failure path) keep the fields the modules define and
nothing else, so a compromised host cannot set a variable on the
controller. The seam is _execute_module, which returns what the host sent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.action import numa_audit as numa_audit_action
from ansible_collections.gpufleet.numa.plugins.action import numa_facts as numa_facts_action
from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results

REPO = fixture_paths.REPO
BIN = os.path.dirname(sys.executable)
SOME = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOPOLOGY = {"schema_version": 1, "hostname": "gpu-a", "gpus": [], "numa_nodes": [], "warnings": []}
# What the hostile host claimed.
HOSTILE_FACTS = {"vllm_served_model_name": "beta", "vllm_listen_host": "10.9.9.9",
                 "gpufleet_plan_file": "/some/dir/plan.json"}
ALLOWED_TOP = set(host_results.NUMA_FACTS_FIELDS)


def action(plugin, host_result, args=None, interpreter_key=None):
    """The action with the host's answer in place of running the module."""
    name = "gpufleet.numa.%s" % plugin.__name__.rsplit(".", 1)[-1]
    task = Task.load({"action": name, "args": args or {}})
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/nonexistent"))
    loader = DataLoader()
    instance = plugin.ActionModule(task=task, connection=connection, play_context=PlayContext(), loader=loader,
                                   templar=Templar(loader=loader), shared_loader_obj=None)
    if interpreter_key:
        instance._discovered_interpreter_key = interpreter_key
        instance._discovered_interpreter = "/usr/bin/python3"
    instance._execute_module = lambda *args, **kwargs: host_result
    return instance


def run_facts(host_result, **kwargs):
    return action(numa_facts_action, host_result, **kwargs).run(task_vars={"inventory_hostname": "gpu-a"})


def test_numa_facts_live_drops_facts_the_module_does_not_define():
    result = run_facts({"changed": False, "summary": ["gpu-a: 0 GPU(s)"],
                        "ansible_facts": dict(HOSTILE_FACTS, numa_topology=TOPOLOGY)})
    assert result["ansible_facts"] == {"numa_topology": TOPOLOGY}
    assert result["summary"] == ["gpu-a: 0 GPU(s)"] and not result.get("failed")
    warning = [w for w in result["warnings"] if "ansible_facts" in w]
    assert len(warning) == 1
    for key in HOSTILE_FACTS:
        assert repr(key) in warning[0]
    # Names only: a value chosen by the host is not echoed.
    assert "10.9.9.9" not in warning[0] and "beta" not in warning[0] and "/some/dir" not in warning[0]


def test_numa_facts_live_drops_top_level_keys_the_module_does_not_define():
    result = run_facts({"changed": False, "ansible_facts": {"numa_topology": TOPOLOGY},
                        "ansible_stats": {"data": {"x": 1}}, "add_host": {"host_name": "evil"},
                        "vllm_listen_host": "10.9.9.9", "x" * 500: 1})
    assert set(result) == {"changed", "ansible_facts", "warnings"}
    assert "'ansible_stats'" in result["warnings"][0] and "and 0 more" not in result["warnings"][0]
    assert "x" * 100 not in result["warnings"][0]  # a long key is cut


def test_numa_facts_live_topology_not_a_mapping_fails_naming_the_field():
    result = run_facts({"changed": False, "ansible_facts": {"numa_topology": ["not", "a", "dict"]}})
    assert result["failed"] is True
    assert "ansible_facts.numa_topology must be a mapping (got ['not', 'a', 'dict'])" in result["msg"]
    assert "ansible_facts" not in result


def test_numa_facts_live_failed_result_keeps_no_facts():
    result = run_facts({"failed": True, "msg": "numa_facts: boom", "ansible_facts": {"numa_topology": TOPOLOGY}})
    assert result["failed"] is True and result["msg"] == "numa_facts: boom"
    assert "ansible_facts" not in result


def test_numa_facts_live_keeps_the_controllers_interpreter_discovery():
    # ansible-core adds its own discovery result; the host's claim to it is replaced.
    key = "discovered_interpreter_python"
    result = run_facts({"changed": False, "ansible_facts": {"numa_topology": TOPOLOGY, key: "/evil/python"}},
                       interpreter_key=key)
    assert result["ansible_facts"] == {"numa_topology": TOPOLOGY, key: "/usr/bin/python3"}
    assert "warnings" not in result


def test_numa_facts_live_result_not_a_mapping_fails():
    result = run_facts(["a", "list"])
    assert result["failed"] is True and "must be a mapping" in result["msg"]


def test_numa_audit_live_failure_passes_no_facts_or_other_keys():
    host = {"failed": True, "msg": "numa_audit: boom", "ansible_facts": HOSTILE_FACTS, "vllm_listen_host": "x"}
    result = action(numa_audit_action, host).run(task_vars={"inventory_hostname": "gpu-a"})
    assert result["failed"] is True and result["msg"] == "numa_audit: boom"
    assert "ansible_facts" not in result and "vllm_listen_host" not in result


# Arbitrary JSON-like results: what a host can send.
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                     max_leaves=12)
_keys = st.one_of(st.sampled_from(sorted(ALLOWED_TOP) + ["ansible_stats", "add_host", "vllm_listen_host",
                                                         "_ansible_notify", "ansible_facts"]),
                  st.text(max_size=12))
_fact_keys = st.one_of(st.sampled_from(["numa_topology"] + sorted(HOSTILE_FACTS)), st.text(max_size=12))
_facts = st.one_of(st.dictionaries(_fact_keys, st.one_of(_json, st.just(TOPOLOGY)), max_size=5), _json)
_results = st.one_of(
    st.dictionaries(_keys, _json, max_size=8).flatmap(
        lambda top: st.builds(lambda facts: dict(top, ansible_facts=facts), _facts) | st.just(top)),
    _json)


@SOME
@given(_results)
@example({"changed": False, "ansible_facts": dict(HOSTILE_FACTS, numa_topology=TOPOLOGY)})
@example({"failed": "yes", "warnings": "not a list", "ansible_facts": {"numa_topology": None}})
def test_numa_facts_live_keeps_only_defined_fields(host_result):
    result = run_facts(host_result)  # no exception escapes
    assert set(result) <= ALLOWED_TOP
    assert set(result.get("ansible_facts", {})) <= {"numa_topology"}
    if "numa_topology" in result.get("ansible_facts", {}):
        assert isinstance(result["ansible_facts"]["numa_topology"], dict)
    for key, kinds in host_results.NUMA_FACTS_FIELDS.items():
        if key in result:
            assert host_results._has_type(result[key], kinds), key
    assert all(isinstance(warning, str) for warning in result.get("warnings", []))  # JSON gives text or containers


def test_numa_facts_playbook_host_with_its_own_python_sets_no_variable(tmp_path):
    # A compromised host answers with whatever its python3 prints: here a
    # python that gives the numa_facts module the hostile result.
    interpreter = tmp_path / "python3"
    interpreter.write_text(textwrap.dedent("""\
        #!%s
        import json, subprocess, sys
        payload = sys.stdin.buffer.read()
        if b"numa_facts" in payload or any("AnsiballZ_numa_facts" in arg for arg in sys.argv[1:]):
            print(json.dumps({"changed": False, "summary": ["hostile"],
                              "ansible_facts": dict(%r, numa_topology={"schema_version": 1})}))
            sys.exit(0)
        sys.exit(subprocess.run([sys.executable] + sys.argv[1:], input=payload).returncode)
        """) % (sys.executable, HOSTILE_FACTS))
    interpreter.chmod(0o755)
    (tmp_path / "hosts.ini").write_text("gpu-a ansible_connection=local ansible_python_interpreter=%s "
                                        "vllm_listen_host=127.0.0.9\n" % interpreter)
    (tmp_path / "play.yml").write_text(textwrap.dedent("""\
        - hosts: all
          gather_facts: false
          tasks:
            - gpufleet.numa.numa_facts:
            - ansible.builtin.debug:
                msg: "listen={{ vllm_listen_host }} model={{ vllm_served_model_name | default('unset') }}
                      plan={{ gpufleet_plan_file | default('unset') }} schema={{ ansible_facts.numa_topology.schema_version }}"
        """))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "hosts.ini"),
                           str(tmp_path / "play.yml")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout
    assert "listen=127.0.0.9 model=unset plan=unset schema=1" in proc.stdout
    assert "dropped (a result from a host is data, never a variable)" in proc.stdout
