# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A fleet-wide error (a group's bad variable, a fleet that cannot be
planned) is said once, by one task, in its own words: never once per host
of a group, never inside ansible-core's "Finalization of task args ...
filter plugin failed" (docs/deploy.md, "Checked before anything changes"),
on the demo fleet with the real playbook."""

from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    A6000, H100, demo_copy, run_playbook, write_inventory)

# ansible-core 2.19's default callback prints a failed task's message twice:
# "[ERROR]: Task failed: Action failed: MESSAGE" and the fatal result's msg.
SHOWN = 2


def failed_tasks(out):
    return out.count("FAILED!")


def test_a_groups_bad_variable_is_one_line_naming_every_host(tmp_path):
    fleet = demo_copy(tmp_path)

    def change(groups):
        for host in groups["gpu_servers"]["hosts"].values():
            host["gpufleet_tp_size"] = "four"
    out = run_playbook(fleet, "deploy_inference.yml", write_inventory(fleet, "four.yml", change), rc=2)
    assert "every GPU server (3 hosts): gpufleet_tp_size: must be an integer (got 'four')" in out, out[-3000:]
    assert out.count("gpufleet_tp_size: must be an integer") == SHOWN  # the fatal msg quotes it (got ''four'')
    assert failed_tasks(out) == 1 and not (fleet["staging"] / "gpufleet-plan.json").exists()


def test_a_fleet_that_cannot_be_planned_is_said_once_in_its_own_words(tmp_path):
    fleet = demo_copy(tmp_path)

    def change(groups):
        groups["gpu_servers"]["hosts"][H100]["vllm_model"] = "meta-llama/Llama-3.1-70B-Instrcut"
    out = run_playbook(fleet, "deploy_inference.yml", write_inventory(fleet, "typo.yml", change), rc=2)
    message = ("The fleet cannot be planned; nothing was deployed: vllm_served_model_name: hosts %s and %s both serve "
               "the name llama-3.1-70b but with different models" % (A6000, H100))
    assert "TASK [Stop when the fleet cannot be planned]" in out, out[-3000:]
    assert "Finalization of task args" not in out and "filter plugin" not in out
    assert out.count("both serve the name llama-3.1-70b") == SHOWN and out.count(message) == SHOWN
    assert failed_tasks(out) == 1 and not (fleet["staging"] / "gpufleet-plan.json").exists()
