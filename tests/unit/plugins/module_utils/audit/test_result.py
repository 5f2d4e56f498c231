# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/result.py: one host's audit result, built on the controller from
what the module read, and the fail_on_severity gate."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import locality
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result
from ansible_collections.gpufleet.numa.plugins.modules import numa_audit as numa_audit_module

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes


def trap():
    facts, processes = audit_replay.gather_capture(capture_with_processes(DGX2, TRAP_HOLDS))
    return audit_result.audit_result(facts, processes, "gpu-a")


def test_audit_result_holds_what_was_read_and_what_was_found():
    result = trap()
    assert result["host"] == "gpu-a" and result["topology"]["gpus"]
    assert [p["pid"] for p in result["processes"]] == sorted(p["pid"] for p in result["processes"])
    assert result["counts"] == {"info": 0, "warning": 2, "error": 0, "critical": 4} and result["worst"] == "critical"
    assert result["summary"][-2].startswith("critical  gpu-a  ") or "no findings" not in result["summary"]


def test_gate_fails_at_or_above_the_severity_only():
    result = trap()
    assert audit_result.gate(result, "none") == (False, None)
    failed, msg = audit_result.gate(result, "critical")
    assert failed and msg.startswith("gpu-a: 4 finding(s) at or above critical; first: ")
    calm = dict(result, findings=[f for f in result["findings"] if f["severity"] == "warning"])
    assert audit_result.gate(calm, "error") == (False, None)


def test_the_modules_own_severities_are_the_audits():
    # The module spells them out so that it ships no findings code.
    assert numa_audit_module.SEVERITIES == locality.SEVERITIES
    assert numa_audit_module.DEFAULT_MEMORY_THRESHOLD == locality.DEFAULT_MEMORY_THRESHOLD
