# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/report_text.py: the console table, and the findings of every host worst first."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_text
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result
from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes, pid_of


def trap_result(host="gpu-a", holds=None, machine=DGX2):
    facts, processes = audit_replay.gather_capture(capture_with_processes(machine, holds or TRAP_HOLDS))
    return audit_result.audit_result(facts, processes, host)


def test_text_table_summary_rows_and_fixes():
    lines = report_text.text_table([trap_result()])
    assert lines[0] == "gpu-a: 4 critical, 0 error, 2 warning, 0 info; 6 GPU process(es) (nvidia-smi)"
    assert lines[1].split() == ["SEVERITY", "HOST", "CODE", "SUBJECT", "FINDING"]
    assert lines[2].startswith("critical  gpu-a  gpus_span_sockets")
    assert lines[3].startswith("    fix: run it on the GPUs of one socket")
    assert len(lines) == 2 + 2 * 6


def test_text_table_without_findings():
    result = trap_result(holds={"bound_cpu0_mem0": ["0000:34:00.0"]})
    assert report_text.text_table([result])[-1] == "no findings"


def test_all_findings_worst_first_across_hosts():
    found = report_text.all_findings([trap_result("b"), trap_result("a")])
    assert [f["host"] for f in found[:2]] == ["a", "a"]
    assert found[0]["severity"] == "critical" and found[-1]["severity"] == "warning"
    assert pid_of("tp_server") in found[0]["pids"]


@pytest.mark.parametrize("bad", [None, {}])
def test_bad_results_raise_value_error(bad):
    with pytest.raises(ValueError, match="audit results"):
        report_text.text_table(host_results.audit_results(bad))


@pytest.mark.parametrize("bad,host", [({"host": "x"}, "x"), ("text", "results[0]")])
def test_bad_host_result_is_an_invalid_host_not_an_error(bad, host):
    lines = report_text.text_table(host_results.audit_results([bad]))
    assert lines[0].startswith("%s: 0 critical, 1 error" % host)
    assert "result_invalid" in lines[2]


def test_the_kept_bandwidth_line_prints_control_characters_escaped():
    """The kept plan's bandwidth notes (a host's free text) reach the
    audit's console line through the verdict: escaped there too."""
    result = trap_result()
    result["bandwidth"] = {
        "version": 1, "measured_at": "2025-05-01T12:00:00Z", "python": "/opt/vllm/bin/python", "size_mib": 256,
        "seconds": 0.5, "memory": {"method": None, "pairs": [], "notes": ["not measured: \x1b]0;owned\x07\nx"]},
        "gpus": {"method": None, "copies": [], "notes": []}}
    assert report_text.text_table([result])[1] == "gpu-a: measured bandwidth: not measured: \\x1b]0;owned\\x07\\x0ax"
