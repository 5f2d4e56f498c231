# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit_report: the console table and the self-contained HTML/SVG report."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import gather as audit_gather
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report as audit_report

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes, pid_of

SVG = "{http://www.w3.org/2000/svg}"


def trap_result(host="gpu-a", holds=None, machine=DGX2):
    facts, processes = audit_gather.gather_capture(capture_with_processes(machine, holds or TRAP_HOLDS))
    return audit_gather.audit_result(facts, processes, host)


def test_text_table_summary_rows_and_fixes():
    lines = audit_report.text_table([trap_result()])
    assert lines[0] == "gpu-a: 4 critical, 0 error, 2 warning, 0 info; 6 GPU process(es) (nvidia-smi)"
    assert lines[1].split() == ["SEVERITY", "HOST", "CODE", "SUBJECT", "FINDING"]
    assert lines[2].startswith("critical  gpu-a  gpus_span_sockets")
    assert lines[3].startswith("    fix: run it on the GPUs of one socket")
    assert len(lines) == 2 + 2 * 6


def test_text_table_without_findings():
    result = trap_result(holds={"bound_cpu0_mem0": ["0000:34:00.0"]})
    assert audit_report.text_table([result])[-1] == "no findings"


@pytest.mark.parametrize("bad", [None, {}])
def test_bad_results_raise_value_error(bad):
    with pytest.raises(ValueError, match="audit results"):
        audit_report.text_table(bad)


@pytest.mark.parametrize("bad,host", [({"host": "x"}, "x"), ("text", "results[0]")])
def test_bad_host_result_is_an_invalid_host_not_an_error(bad, host):
    lines = audit_report.text_table([bad])
    assert lines[0].startswith("%s: 0 critical, 1 error" % host)
    assert "result_invalid" in lines[2]


def test_host_svg_is_well_formed_with_every_gpu_and_misplaced_marks():
    result = trap_result()
    svg = ET.fromstring(audit_report.host_svg(result))
    assert svg.tag == SVG + "svg"
    gpus = [g for g in svg.iter(SVG + "g") if g.get("class") == "gpu"]
    assert len(gpus) == 16
    chips = [g for g in svg.iter(SVG + "g") if (g.get("class") or "").startswith("chip")]
    misplaced = [g for g in chips if "misplaced" in g.get("class")]
    assert len(chips) == 5 and len(misplaced) == 3
    labels = [t.text for t in svg.iter(SVG + "text")]
    assert "socket 0" in labels and "socket 1" in labels and "NUMA node 1" in labels
    assert "NV6 fabric: every GPU pair" in labels
    # a misplaced process's line to a GPU on another node is red and dashed
    red = [l for l in svg.iter(SVG + "line") if l.get("stroke") == audit_report.MISPLACED]
    assert len(red) == 4  # 9017 -> GPU 8, 9018 -> GPU 9, the TP group (one chip, on node 0) -> GPUs 10, 11


def test_host_svg_draws_pcie_links_by_class():
    # RTX 4090 quads: PIX inside each switch; no process source, so no chips
    facts, processes = audit_gather.gather_capture(capture_with_processes("rtx4090_8gpu_pcie_switch_quads", {}))
    svg = audit_report.host_svg(audit_gather.audit_result(facts, processes, "gpu-b"))
    links = re.findall(r'<path class="link"[^>]*stroke="([^"]+)"', svg)
    assert links and set(links) == {audit_report.LINK_STYLES["PIX"][0]}


def test_html_report_is_self_contained_and_escapes_names():
    result = trap_result()
    result["groups"][0]["name"] = "<script>alert(1)</script>"
    result["findings"][0]["message"] = "<img src=x onerror=alert(1)>"
    page = audit_report.html_report([result], generated="2026-01-01T00:00:00Z")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;" in page
    # nothing is fetched: no external references of any kind
    assert not re.search(r'<[^>]*\b(src|href)\s*=|url\(|@import|<link', page, re.I)
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"]
    assert page.count("<svg") >= 2 and "2026-01-01T00:00:00Z" in page


def test_html_report_worst_host_first():
    calm = trap_result("calm", holds={"bound_cpu0_mem0": ["0000:34:00.0"]})
    page = audit_report.html_report([calm, trap_result("trap")])
    assert page.index('id="host-trap"') < page.index('id="host-calm"')
    assert "no findings" in page


def test_all_findings_worst_first_across_hosts():
    found = audit_report.all_findings([trap_result("b"), trap_result("a")])
    assert [f["host"] for f in found[:2]] == ["a", "a"]
    assert found[0]["severity"] == "critical" and found[-1]["severity"] == "warning"
    assert pid_of("tp_server") in found[0]["pids"]
