# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/rollout.py: stale files and restarting instances, decided in
Python (they were Jinja in roles/vllm/tasks, where no unit test reached them),
what an engine install restarts, and the record of what a host runs."""

import hashlib

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state, rollout
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import INSTANCE, VARIABLES

RESULT = host_state.host_units([INSTANCE, dict(INSTANCE, name="vllm-1", port=8001, dist_port=29100)],
                               dict(VARIABLES, vllm_extra_args={"max-model-len": 8192}))
FILES = {f["label"]: f for f in RESULT["files"]}


def written(*labels):
    """The template loop's results: the named files changed, the others were skipped."""
    return [dict({"__vllm_file": entry}, **({"changed": True} if label in labels else {"skipped": True}))
            for label, entry in FILES.items()]


def test_files_no_longer_planned_are_stale_and_planned_ones_are_not():
    found = [{"path": "/etc/systemd/system/gpufleet-vllm-1.service"}, {"path": "/etc/systemd/system/gpufleet-old.service"},
             {"path": "/etc/vllm/gpufleet-old.yaml"}, {"path": "/etc/vllm/gpufleet-old.yaml"}]
    assert rollout.stale_files(found, RESULT["files"]) == [
        "/etc/systemd/system/gpufleet-old.service", "/etc/vllm/gpufleet-old.yaml"]
    assert rollout.stale_files([], RESULT["files"]) == []


def test_nothing_written_restarts_nothing():
    assert rollout.restarting_instances(RESULT["units"], written()) == []


def test_a_changed_unit_or_option_file_restarts_its_instance_only():
    assert rollout.restarting_instances(RESULT["units"], written("gpufleet-vllm-1.service")) == ["vllm-1"]
    assert rollout.restarting_instances(RESULT["units"], written("gpufleet-vllm-0.yaml",
                                                                 "gpufleet-vllm-0.service")) == ["vllm-0"]


def test_changed_secrets_restart_every_instance():
    assert rollout.restarting_instances(RESULT["units"], written("secrets.env")) == ["vllm-0", "vllm-1"]


# --- what the role's tasks decided in Jinja before -------------------------

UNIT_DIR, CONFIG_DIR = "/etc/systemd/system", "/etc/vllm"


def test_stale_candidates_are_files_of_the_role_names_the_plan_does_not_have():
    existing = {p: {"path": p, "isreg": True} for p in (
        UNIT_DIR + "/gpufleet-vllm-0.service", UNIT_DIR + "/gpufleet-old.service", CONFIG_DIR + "/gpufleet-old.yaml",
        UNIT_DIR + "/sshd.service", CONFIG_DIR + "/secrets.env", "/opt/gpufleet-old.service",
        UNIT_DIR + "/gpufleet-old.service.d")}
    existing[CONFIG_DIR + "/gpufleet-dir.yaml"] = {"path": CONFIG_DIR + "/gpufleet-dir.yaml", "isdir": True}
    assert rollout.stale_candidates(existing, RESULT["files"], (UNIT_DIR, CONFIG_DIR), "gpufleet-") == [
        UNIT_DIR + "/gpufleet-old.service", CONFIG_DIR + "/gpufleet-old.yaml"]
    # The gateways' agent of a host left with no instance is stale too.
    existing[UNIT_DIR + "/gpufleet-agent.socket"] = {"path": UNIT_DIR + "/gpufleet-agent.socket", "isreg": True}
    assert rollout.stale_candidates(existing, [], (UNIT_DIR, CONFIG_DIR), "gpufleet-") == [
        UNIT_DIR + "/gpufleet-agent.socket", UNIT_DIR + "/gpufleet-old.service", UNIT_DIR + "/gpufleet-vllm-0.service",
        CONFIG_DIR + "/gpufleet-old.yaml"]
    # A rerun whose look saw only planned files has none: the role reads no first line.
    planned = {f["path"]: {"path": f["path"], "isreg": True} for f in RESULT["files"]}
    assert rollout.stale_candidates(planned, RESULT["files"], (UNIT_DIR, CONFIG_DIR), "gpufleet-") == []


def test_host_units_carries_the_stale_candidates_and_what_is_installed():
    seen = [{"path": UNIT_DIR + "/gpufleet-vllm-0.service", "isreg": True},
            {"path": UNIT_DIR + "/gpufleet-vllm-7.service", "isreg": True}]
    result = host_state.host_units([INSTANCE], dict(VARIABLES, existing=seen, vllm_install=True))
    assert result["stale_candidates"] == [UNIT_DIR + "/gpufleet-vllm-7.service"]
    assert [u["installed"] for u in result["units"]] == [True]
    missing = [d for d in result["directories"] if not d["as_planned"]]
    assert missing and result["writes"] == missing + result["helpers"] + result["files"]
    seen += [{"path": d["path"], "isdir": True, "mode": d.get("mode"), "pw_name": d.get("owner"),
              "gr_name": d.get("group")} for d in result["directories"]]
    again = host_state.host_units([INSTANCE], dict(VARIABLES, existing=seen, vllm_install=True))
    assert again["writes"] == again["helpers"] + again["files"]
    assert [w["kind"] for w in result["writes"]][-2:] == ["template", "template"]


def test_write_needed_only_where_kind_mode_owner_or_content_differs():
    directory = {"kind": "directory", "path": "/etc/vllm", "as_planned": True}
    assert rollout.write_needed(directory) is False
    assert rollout.write_needed(dict(directory, as_planned=False)) is True
    unit = {"kind": "template", "path": UNIT_DIR + "/gpufleet-vllm-0.service", "as_planned": True, "checksum": "ab"}
    assert rollout.write_needed(unit, "ab") is False
    assert rollout.write_needed(unit, "cd") is True
    assert rollout.write_needed(dict(unit, as_planned=False), "ab") is True
    # Missing on the host: find gave no checksum.
    assert rollout.write_needed(dict(unit, checksum=""), "ab") is True


def test_the_unit_entries_carry_the_checkers_validate_command():
    units = [f for f in RESULT["files"] if f.get("verify")]
    assert [f["validate"] for f in units] == [
        "/usr/local/libexec/gpufleet/gpufleet-verify-unit gpufleet-vllm-0.service %s",
        "/usr/local/libexec/gpufleet/gpufleet-verify-unit gpufleet-vllm-1.service %s"]
    secrets = FILES["secrets.env"]
    assert (secrets["owner"], secrets["group"], secrets["mode"]) == ("vllm", "vllm", "0600")


def test_the_service_manager_is_gathered_only_for_auto_when_unknown():
    assert rollout.wants_service_manager("auto", "") is True
    assert rollout.wants_service_manager(" AUTO ", "") is True
    assert rollout.wants_service_manager("auto", "systemd") is False
    for value in (True, False, "true", "no", "maybe", None):
        assert rollout.wants_service_manager(value, "") is False, value


def unit(name, hosts=None):
    return {"name": name, "multinode": {"hosts": hosts} if hosts else None, "installed": True}


def wrote(*names):
    """The write loop's results: the units of these instances changed."""
    return [{"__vllm_file": {"unit": {"name": n}, "secret": False}, "changed": True} for n in names]


def test_ordinals_are_the_most_units_of_the_batch_and_hosts_with_fewer_sit_out():
    states = {"a": {"units": [unit("vllm-0"), unit("vllm-1")], "written": []},
              "b": {"units": [unit("vllm-0")], "written": wrote("vllm-0")},
              "c": {"units": [unit("vllm-0")] * 3, "written": []}}
    rolled = rollout.batch_rollout(states, ["a", "b"])["b"]
    assert rolled["ordinals"] == 2
    assert [s and (s["name"], s["restart"]) for s in rolled["steps"]] == [("vllm-0", True), None]
    assert rollout.batch_rollout(states, ["a", "b"])["a"]["steps"][1]["restart"] is False
    # A host outside the batch (another serial batch) does not count.
    assert rollout.batch_rollout(states, ["a", "b", "c"])["a"]["ordinals"] == 3
    assert rollout.batch_rollout({}, ["a"])["a"] == {"agents": [], "ordinals": 0, "steps": []}


def test_a_multinode_instance_restarts_on_every_host_when_it_does_on_one():
    pair = ["a", "b"]
    states = {"a": {"units": [unit("vllm-0", pair), unit("vllm-1")], "written": []},
              "b": {"units": [unit("vllm-0", pair)], "written": wrote("vllm-0")}}
    steps = rollout.batch_rollout(states, pair)["a"]["steps"]
    assert [(s["name"], s["restart"]) for s in steps] == [("vllm-0", True), ("vllm-1", False)]
    # A partner that has not run the role (not in states) changes nothing.
    assert rollout.batch_rollout({"a": states["a"]}, pair)["a"]["steps"][0]["restart"] is False


def test_check_mode_starts_only_units_the_host_already_has():
    states = {"a": {"units": [unit("vllm-0"), dict(unit("vllm-1"), installed=False)], "written": wrote("vllm-1")}}
    steps = rollout.batch_rollout(states, ["a"], check_mode=True)["a"]["steps"]
    assert steps[0]["name"] == "vllm-0" and steps[1] is None
    assert rollout.batch_rollout(states, ["a"])["a"]["steps"][1]["restart"] is True


def test_the_agents_units_start_first_and_restart_when_their_files_changed():
    agents = [{"name": "gpufleet-agent.socket", "restart_on": ["/u/gpufleet-agent.socket"], "installed": True},
              {"name": "gpufleet-agent-weights.service", "installed": False,
               "restart_on": ["/u/gpufleet-agent-weights.service", "/x/gpufleet-agent-weights", "/x/gpufleet_agent.py"]}]
    states = {"a": {"units": [unit("vllm-0")], "written": wrote("vllm-0"), "agents": agents}}
    started = rollout.batch_rollout(states, ["a"])["a"]["agents"]
    assert started == [{"name": "gpufleet-agent.socket", "state": "started"},
                       {"name": "gpufleet-agent-weights.service", "state": "started"}]
    # The reader's program changed (a new release): it restarts; the socket does not.
    program = [{"__vllm_file": {"path": "/x/gpufleet_agent.py"}, "changed": True},
               {"__vllm_file": {"path": "/u/gpufleet-agent.socket"}, "changed": False}]
    states["a"]["written"] = wrote("vllm-0") + program
    assert [a["state"] for a in rollout.batch_rollout(states, ["a"])["a"]["agents"]] == ["started", "restarted"]
    # Check mode: a unit not on the host yet is left out.
    assert rollout.batch_rollout(states, ["a"], check_mode=True)["a"]["agents"] == [
        {"name": "gpufleet-agent.socket", "state": "started"}]


# --- engine upgrades --------------------------------------------------------

def test_a_changed_install_restarts_every_instance_even_when_no_file_changed():
    assert rollout.restarting_instances(RESULT["units"], written(), install_changed=True) == ["vllm-0", "vllm-1"]
    assert rollout.restarting_instances(RESULT["units"], written(), install_changed=False) == []


def test_the_batch_rollout_restarts_every_instance_after_the_install_but_not_in_check_mode():
    states = {"a": {"units": [unit("vllm-0"), unit("vllm-1")], "written": [], "install_changed": True},
              "b": {"units": [unit("vllm-0")], "written": []}}
    steps = rollout.batch_rollout(states, ["a", "b"])["a"]["steps"]
    assert [(s["name"], s["restart"]) for s in steps] == [("vllm-0", True), ("vllm-1", True)]
    assert rollout.batch_rollout(states, ["a", "b"])["b"]["steps"][0]["restart"] is False
    # pip in check mode only says it would install: nothing restarts for it.
    steps = rollout.batch_rollout(states, ["a", "b"], check_mode=True)["a"]["steps"]
    assert [(s["name"], s["restart"]) for s in steps] == [("vllm-0", False), ("vllm-1", False)]


def unit_results(texts):
    """The write loop's results as vllm_files gives them: each unit's content_sha1 (written or found)."""
    results = []
    for label, entry in FILES.items():
        result = {"__vllm_file": entry, "changed": label in texts}
        if label in texts:
            result["content_sha1"] = hashlib.sha1(texts[label].encode()).hexdigest()
        results.append(result)
    return results


def test_deployed_record_names_each_instance_its_unit_sha1_and_engine():
    texts = {"gpufleet-vllm-0.service": "[Service]\nExecStart=/opt/vllm/bin/vllm serve a\n",
             "gpufleet-vllm-1.service": "[Service]\nExecStart=/opt/vllm/bin/vllm serve b\n"}
    record = rollout.deployed_record(RESULT["units"], unit_results(texts), RESULT["engine"])
    engine = "vllm==%s" % VARIABLES["vllm_version"]
    assert record == {"engine": engine, "instances": {
        "vllm-0": {"unit": "gpufleet-vllm-0.service", "engine": engine,
                   "unit_sha1": hashlib.sha1(texts["gpufleet-vllm-0.service"].encode()).hexdigest()},
        "vllm-1": {"unit": "gpufleet-vllm-1.service", "engine": engine,
                   "unit_sha1": hashlib.sha1(texts["gpufleet-vllm-1.service"].encode()).hexdigest()}}}
    # The option files' and secrets' sha1 are not the units'.
    assert rollout.deployed_record([], [], engine) == {"engine": engine, "instances": {}}


def test_deployed_record_refuses_a_unit_without_its_sha1():
    texts = {"gpufleet-vllm-0.service": "x"}
    with pytest.raises(ValueError, match=r"^written: must hold the content_sha1 of every unit "
                                         r"\(got none for gpufleet-vllm-1.service\)$"):
        rollout.deployed_record(RESULT["units"], unit_results(texts), RESULT["engine"])


def test_after_write_includes_each_step_only_when_there_is_something_to_do():
    """Cleanup before the download, each only when needed; the file is
    included at all only for a step or the service the role manages."""
    both = {"steps": ["cleanup", "download"], "include": True}
    assert rollout.after_write(["/etc/vllm/old.yaml"], True, False) == both
    assert rollout.after_write([], True, False) == {"steps": ["download"], "include": True}
    assert rollout.after_write([], False, True) == {"steps": [], "include": True}
    assert rollout.after_write([], False, False) == {"steps": [], "include": False}
