# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/replay.py: a capture replays as the same (facts, processes) pair
the live path returns, and gathering judges nothing."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes


def test_gather_capture_returns_facts_and_processes_only():
    facts, processes = audit_replay.gather_capture(capture_with_processes(DGX2, TRAP_HOLDS, hostname="dgx2h"))
    assert facts["hostname"] == "dgx2h" and len(facts["gpus"]) == 16
    assert set(processes) == {"source", "processes", "warnings"} and processes["source"] == "nvidia-smi"
    assert len(processes["processes"]) == 6
    assert "findings" not in facts and all("findings" not in p for p in processes["processes"])
