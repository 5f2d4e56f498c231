# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The deploy run has one owner (docs/deploy.md, "One run"): the playbooks
carry one value between plays, __gpufleet_run, a fact of the controller
made and advanced only by the gpufleet.numa.run_* filters (fleet/run.py),
each once per play on the controller; per-host tasks read their own slice,
never a value templated over the whole fleet."""

from __future__ import annotations

import json
import pathlib
import re

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
RUN_PLAYBOOKS = ("deploy_inference.yml", "decommission.yml")


def _tasks_of(tasks, source):
    for task in tasks or ():
        for block in ("block", "rescue", "always"):
            yield from _tasks_of(task.get(block), source)
        yield source, task
        imported = task.get("ansible.builtin.import_tasks")
        if imported:
            path = (PLAYBOOKS / imported) if "/" in imported else (PLAYBOOKS / "tasks" / imported)
            yield from _tasks_of(yaml.safe_load(path.read_text()), path.name)


def tasks(playbook):
    """(file, task) for every task of the playbook, imported task files included, and its roles as tasks."""
    for play in yaml.safe_load((PLAYBOOKS / playbook).read_text()):
        for section in ("pre_tasks", "tasks", "post_tasks"):
            yield from _tasks_of(play.get(section), playbook)
        for role in play.get("roles") or ():
            yield playbook, dict(role, name="role %s" % role.get("role"))


def roles_of(playbook):
    """role name -> its entry: a play's roles, and the tasks that import one."""
    found = {}
    for _source, task in tasks(playbook):
        if "role" in task:
            found[task["role"]] = task
        elif "ansible.builtin.import_role" in task:
            found[task["ansible.builtin.import_role"]["name"]] = task
    return found


def _events(playbook):
    return [(source, task) for source, task in tasks(playbook)
            # run_report, run_plan_lines, run_host and run_shares read the run, they do not advance it
            if re.search(r"gpufleet\.numa\.run_(?!report|plan_lines|host|shares)", json.dumps(task))]


def test_the_run_is_made_and_advanced_by_the_run_filters_once_per_play_on_the_controller():
    for playbook in RUN_PLAYBOOKS:
        events = _events(playbook)
        assert events, playbook
        for source, task in events:
            where = "%s: %s" % (source, task["name"])
            assert list(task["ansible.builtin.set_fact"]) == ["__gpufleet_run"], where
            assert task.get("run_once") is True, where
            assert task.get("delegate_to") == "localhost" and task.get("delegate_facts") is True, where
    names = [task["name"] for _source, task in _events("deploy_inference.yml")]
    assert names == [
        "Propose a plan (the hosts of this run planned again, every other host as recorded)",
        "Refuse the hosts that cannot bind as planned",
        "Load the kept plan (this run planned nothing)", "Record the hosts of this batch that converged",
        "Forget the hosts taken down",
        "Load the kept plan (this run planned nothing)", "Compute the gateway's backends from the record",
        "Note that the gateways were configured in this run",
        "Load the kept plan (this run planned nothing)"]


def test_no_other_fact_carries_the_run_between_plays():
    """The eleven __gpufleet_run_* facts the run replaced are gone, and no
    task sets a fact of the controller other than the run, and the settings
    of the record's store (docs/state.md), made once, before the lock, and
    never shown (the etcd password is among them)."""
    for playbook in RUN_PLAYBOOKS:
        stores = []
        for source, task in tasks(playbook):
            text = json.dumps(task)
            assert not re.search(r"__gpufleet_run_(?!now\b)\w+", text), (source, task["name"])
            if "ansible.builtin.set_fact" in task and task.get("delegate_facts"):
                if list(task["ansible.builtin.set_fact"]) == ["__gpufleet_host_run"]:
                    # Each GPU host's share, set on that host (not the controller's).
                    assert task["delegate_to"] == "{{ %s.host }}" % task["loop_control"]["loop_var"], (source, task["name"])
                    continue
                if list(task["ansible.builtin.set_fact"]) == ["__gpufleet_state"]:
                    stores.append(source)
                    assert task.get("no_log") is True and task.get("run_once") is True, (source, task["name"])
                    assert task["ansible.builtin.set_fact"]["__gpufleet_state"] == (
                        "{{ hostvars['localhost'] | gpufleet.numa.state_settings(__gpufleet_plan_file) }}")
                    continue
                assert list(task["ansible.builtin.set_fact"]) == ["__gpufleet_run"], (source, task["name"])
        assert stores == ["record_store.yml"], (playbook, stores)


def test_per_host_tasks_read_their_slice_not_the_fleet():
    """The role's instances, its servers on the gateways and its partners'
    addresses come from the host's slice of the run (computed once per run);
    the gateway's backends are computed once, in the run."""
    roles = roles_of("deploy_inference.yml")
    vllm = roles["gpufleet.numa.vllm"]["vars"]
    # The vllm play takes each host's share of the run once (run_shares), and
    # the role and its `when` (evaluated for every task of the role) read
    # only that host fact: a read of the run through hostvars costs a pass
    # over every fact of the controller.
    shares = [task for _source, task in tasks("deploy_inference.yml")
              if "__gpufleet_host_run" in task.get("ansible.builtin.set_fact", {})]
    assert [list(task["ansible.builtin.set_fact"]) for task in shares] == [["__gpufleet_host_run"]]
    # One task for the batch, each host's fact set on that host: no task
    # result and no worker process per host; every share taken from the run
    # in one pass, when the loop is templated, so that no item reads the run.
    (share,) = shares
    item = share["loop_control"]["loop_var"]
    assert (share["run_once"], share["delegate_facts"], share["loop"]) == (
        True, True, "{{ __gpufleet_run_now | gpufleet.numa.run_shares(ansible_play_batch) }}")
    assert share["delegate_to"] == "{{ %s.host }}" % item
    assert share["ansible.builtin.set_fact"]["__gpufleet_host_run"] == "{{ %s.share }}" % item
    assert roles["gpufleet.numa.vllm"]["when"] == "__gpufleet_host_run.deploys"
    assert vllm["vllm_instances"] == "{{ __gpufleet_host_run.slice.instances }}"
    assert vllm["vllm_gateway_backends"] == "{{ __gpufleet_host_run.slice.drain_servers }}"
    assert vllm["vllm_node_addresses"] == "{{ __gpufleet_host_run.slice.node_addresses }}"
    assert "__gpufleet_run_now" not in json.dumps(vllm) and "__gpufleet_slice" not in json.dumps(vllm)
    for playbook in RUN_PLAYBOOKS:
        roles = roles_of(playbook)
        assert roles["gpufleet.numa.gateway"]["vars"]["gateway_backends"] == "{{ __gpufleet_gateway_backends }}"
    take_down = yaml.safe_load((PLAYBOOKS / "tasks" / "take_down.yml").read_text())[1]["vars"]
    assert take_down == {"vllm_remove_files": "{{ __gpufleet_slice.files }}",
                         "vllm_remove_instances": "{{ __gpufleet_slice.recorded }}",
                         "vllm_gateways": "{{ __gpufleet_gateway_sockets }}",
                         "vllm_gateway_backends": "{{ __gpufleet_slice.drain_servers }}"}
    variables = yaml.safe_load((PLAYBOOKS / "vars" / "deploy_inference.yml").read_text())
    assert variables["__gpufleet_slice"] == "{{ __gpufleet_run_now.slices[inventory_hostname] }}"
    assert "__gpufleet_node_addresses" not in variables and "__gpufleet_drain_servers" not in variables
    # Computed in the run (run_proposed, run_routed), never per host or per role.
    for path in list(PLAYBOOKS.rglob("*.yml")) + list((REPO / "roles").rglob("*.yml")) + list(
            (REPO / "roles").rglob("*.j2")):
        assert "gpufleet.numa.gateway_backends(" not in path.read_text(), path
    for path in PLAYBOOKS.rglob("*.yml"):
        assert "selectattr('host', 'equalto', inventory_hostname)" not in path.read_text(), path
