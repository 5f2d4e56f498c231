# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/rollout.py: stale files and restarting instances, decided in
Python (they were Jinja in roles/vllm/tasks, where no unit test reached them)."""

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
