# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/report_bandwidth.py: a host's measured bandwidth in the audit
report (verdict, bar chart, table, notes), and how the report filters'
checks and the text table carry it."""

from __future__ import annotations

import re
from xml.etree import ElementTree

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_bandwidth
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_html
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_text
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result
from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results
from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes


def figures():
    """Two nodes, one GPU on node 0 (the P100 figures of docs/bandwidth.md)."""
    return {"version": 1, "measured_at": "2025-05-01T12:00:00Z", "python": "/opt/<vllm>/bin/python", "size_mib": 256,
            "seconds": 0.5,
            "memory": {"method": "torch-triad", "notes": [], "pairs": [
                {"cpu_node": 0, "memory_node": 0, "gbps": 60.0, "threads": 8},
                {"cpu_node": 0, "memory_node": 1, "gbps": 30.0, "threads": 8}]},
            "gpus": {"method": "torch-cuda-pinned", "notes": ["NUMA node 1: not measured: <b>x</b>"], "copies": [
                {"node": 0, "gpu": "0000:04:00.0", "index": 0, "gpu_node": 0, "name": "P100", "h2d_gbps": 12.2,
                 "d2h_gbps": 12.6},
                {"node": 1, "gpu": "0000:04:00.0", "index": 0, "gpu_node": None, "name": "P100", "h2d_gbps": 3.8,
                 "d2h_gbps": 5.1}]}}


def test_rows_mark_local_remote_and_unknown():
    assert report_bandwidth.rows(figures()) == [
        ("memory (torch-triad)", "CPU node 0, memory node 0", 60.0, True),
        ("memory (torch-triad)", "CPU node 0, memory node 1", 30.0, False),
        ("H2D (pinned)", "GPU 0 0000:04:00.0 from node 0", 12.2, True),
        ("H2D (pinned)", "GPU 0 0000:04:00.0 from node 1", 3.8, None),
        ("D2H (pinned)", "GPU 0 0000:04:00.0 from node 0", 12.6, True),
        ("D2H (pinned)", "GPU 0 0000:04:00.0 from node 1", 5.1, None)]


def test_chart_is_well_formed_svg_with_one_bar_per_figure_scaled_per_part():
    svg = report_bandwidth.chart(figures())
    root = ElementTree.fromstring(svg)
    bars = root.findall("{http://www.w3.org/2000/svg}rect")
    assert [b.get("fill") for b in bars] == [report_bandwidth.LOCAL, report_bandwidth.REMOTE, report_bandwidth.LOCAL,
                                             report_bandwidth.UNKNOWN, report_bandwidth.LOCAL, report_bandwidth.UNKNOWN]
    widths = [float(b.get("width")) for b in bars]
    # each part's largest figure is a full bar; the others in proportion
    assert widths[0] == widths[2] == report_bandwidth.BAR_W and widths[1] == report_bandwidth.BAR_W / 2
    assert widths[3] == round(report_bandwidth.BAR_W * 3.8 / 12.2, 1)  # H2D: its own scale
    assert report_bandwidth.chart(dict(figures(), memory={"method": None, "pairs": [], "notes": []},
                                       gpus={"method": None, "copies": [], "notes": []})) == ""


def test_section_shows_verdict_chart_table_and_escaped_notes():
    html = report_bandwidth.section(figures())
    assert html.startswith("<h3>Measured bandwidth</h3>")
    assert "<strong>binding worth 3.2x here (H2D GPU 0 (0000:04:00.0): 12.2 GB/s from node 0, 3.8 GB/s from node 1" in html
    assert "&lt;vllm&gt;" in html and "<vllm>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert html.count("<tr>") == 1 + 6 and "<td>remote</td>" in html and "<td>unknown</td>" in html
    assert report_bandwidth.section(None) == ""


def audited(bandwidth):
    facts, processes = audit_replay.gather_capture(capture_with_processes(DGX2, TRAP_HOLDS))
    result = audit_result.audit_result(facts, processes, "dgx2-a")
    if bandwidth is not None:
        result["bandwidth"] = bandwidth
    return result


def test_report_and_text_table_carry_the_bandwidth_through_the_filters_checks():
    checked = host_results.audit_results([audited(figures()), audited(None)])
    assert checked[0]["bandwidth"] == figures() and "bandwidth" not in checked[1]
    page = report_html.html_report(checked)
    assert page.count("<h3>Measured bandwidth</h3>") == 1
    assert not re.search(r'<[^>]*\b(src|href)\s*=', page)
    lines = report_text.text_table(checked)
    assert "dgx2-a: measured bandwidth: binding worth 3.2x here (H2D GPU 0 (0000:04:00.0): 12.2 GB/s from node 0, " \
           "3.8 GB/s from node 1)" in lines


def test_a_crafted_bandwidth_makes_that_host_invalid_only():
    bad = figures()
    bad["memory"]["pairs"][0]["gbps"] = "<script>"
    checked = host_results.audit_results([audited(bad), audited(figures())])
    assert checked[0]["findings"][0]["code"] == "result_invalid"
    assert "results[0].bandwidth.memory.pairs[0].gbps: must be a number of GB/s" in checked[0]["findings"][0]["message"]
    assert checked[1]["bandwidth"] == figures()
