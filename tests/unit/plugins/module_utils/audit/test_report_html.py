# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/report_html.py: one self-contained HTML page, worst host first, names escaped."""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_html
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes


def trap_result(host="gpu-a", holds=None, machine=DGX2):
    facts, processes = audit_replay.gather_capture(capture_with_processes(machine, holds or TRAP_HOLDS))
    return audit_result.audit_result(facts, processes, host)


def test_html_report_is_self_contained_and_escapes_names():
    result = trap_result()
    result["groups"][0]["name"] = "<script>alert(1)</script>"
    result["findings"][0]["message"] = "<img src=x onerror=alert(1)>"
    page = report_html.html_report([result], generated="2026-01-01T00:00:00Z")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;" in page
    # nothing is fetched: no external references of any kind
    assert not re.search(r'<[^>]*\b(src|href)\s*=|url\(|@import|<link', page, re.I)
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"]
    assert page.count("<svg") >= 2 and "2026-01-01T00:00:00Z" in page


def test_html_report_worst_host_first():
    calm = trap_result("calm", holds={"bound_cpu0_mem0": ["0000:34:00.0"]})
    page = report_html.html_report([calm, trap_result("trap")])
    assert page.index('id="host-trap"') < page.index('id="host-calm"')
    assert "no findings" in page
