# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The stale-file cleanup's stop (roles/vllm/tasks/cleanup.yml), templated
by Ansible as the role runs it: the instances' services and the agent's
load reader, then the gateways' agent socket, never the agent's template
unit (it has no instance to stop).
The role's playbook tests run without a service manager, where this task is
skipped."""

from __future__ import annotations

import pathlib

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:  # ansible-core 2.19 templates only text it is told to trust
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - earlier ansible-core trusts all text
    def trust_as_template(text):
        return text

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "vllm"
UNITS = "/etc/systemd/system/"


def stop_loop(stale):
    tasks = yaml.safe_load((ROLE / "tasks" / "cleanup.yml").read_text())
    (task,) = [t for t in tasks if t["name"] == "Stop and disable units no longer planned"]
    return Templar(loader=DataLoader(), variables={"__vllm_stale": stale}).template(trust_as_template(task["loop"]))


def test_the_cleanup_stops_the_instances_then_the_agent_socket():
    stale = [UNITS + "gpufleet-agent-weights.service", UNITS + "gpufleet-agent.socket",
             UNITS + "gpufleet-agent@.service", UNITS + "gpufleet-vllm-1.service",
             UNITS + "gpufleet-vllm-2.service", "/etc/vllm/gpufleet-vllm-1.yaml"]
    assert list(stop_loop(stale)) == [UNITS + "gpufleet-agent-weights.service", UNITS + "gpufleet-vllm-1.service",
                                      UNITS + "gpufleet-vllm-2.service", UNITS + "gpufleet-agent.socket"]
    assert list(stop_loop([UNITS + "gpufleet-vllm-1.service"])) == [UNITS + "gpufleet-vllm-1.service"]
    assert list(stop_loop(["/etc/vllm/gpufleet-vllm-1.yaml", UNITS + "gpufleet-vllm-1.service.d"])) == []
