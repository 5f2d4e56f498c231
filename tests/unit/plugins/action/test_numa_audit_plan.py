# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The plan file numa_audit reads: the kept plan is JSON and is read as
JSON (YAML 1.1 read 1e-05 as a string, and the host's bandwidth section
was dropped from the report); a YAML plan is still read as YAML; a file
that cannot be read fails naming it."""

from __future__ import annotations

import copy
import json
import types

import pytest

from ansible_collections.gpufleet.numa.plugins.action import numa_audit
from ansible_collections.gpufleet.numa.tests.unit.plugins.action.test_numa_audit_shapes import GOOD

INSTANCES = [{"host": "gpu-a", "name": "vllm-0", "gpus": []}]


def bandwidth(gbps):
    return {"version": 1, "measured_at": "2025-05-01T12:00:00Z", "python": "/opt/vllm/bin/python", "size_mib": 256,
            "seconds": 0.5, "gpus": {"method": None, "copies": [], "notes": []},
            "memory": {"method": "stdlib-copy", "notes": [],
                       "pairs": [{"cpu_node": 0, "memory_node": 0, "gbps": gbps},
                                 {"cpu_node": 0, "memory_node": 1, "gbps": 5e-324}]}}


def run(path):
    task = types.SimpleNamespace(args={"record": True, "plan": str(path)}, async_val=0, check_mode=False,
                                 action="gpufleet.numa.numa_audit")
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/nonexistent"))
    action = numa_audit.ActionModule(task, connection, None, None, None)
    action._execute_module = lambda module_args=None, task_vars=None: copy.deepcopy(GOOD)
    return action.run(task_vars={"inventory_hostname": "gpu-a"})


@pytest.mark.parametrize("gbps", [1e-05, 5e-324, 2.5e3])
def test_the_kept_plans_bandwidth_figures_are_json_numbers(tmp_path, gbps):
    """The probe: a kept plan (JSON, as plan/artifact.py writes it) whose
    figures json.dumps writes with an exponent."""
    path = tmp_path / "gpufleet-plan.json"
    path.write_text(json.dumps({"plan": {"instances": INSTANCES, "unused": []},
                                "hosts": {"gpu-a": {"bandwidth": bandwidth(gbps)}}}, sort_keys=True, indent=1))
    result = run(path)
    assert not result.get("failed"), result.get("msg")
    assert result["bandwidth"]["memory"]["pairs"][0]["gbps"] == gbps
    assert not [w for w in result.get("warnings") or [] if "not shown" in w]


def test_a_yaml_plan_is_still_read(tmp_path):
    path = tmp_path / "deployed-plan.yml"
    path.write_text("plan:\n  instances:\n    - {host: gpu-a, name: vllm-0, gpus: []}\n  unused: []\n")
    assert numa_audit.load_plan(str(path)) == {"plan": {"instances": INSTANCES, "unused": []}}


@pytest.mark.parametrize("text, problem", [
    ('{"plan": ' * 40 + "{}" + "}" * 40, "nests lists or objects deeper than 32 levels: not read"),
    ('{"plan": ' * 100000 + "{}" + "}" * 100000, "nests lists or objects deeper than 32 levels: not read"),
    ('{"plan": {"instances": []},}', "is not JSON: "),
])
def test_a_json_plan_that_cannot_be_read_is_named(tmp_path, text, problem):
    path = tmp_path / "gpufleet-plan.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="^plan %s %s" % (path, problem)):
        numa_audit.load_plan(str(path))
