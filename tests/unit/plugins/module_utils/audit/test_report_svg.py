# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/report_svg.py: the diagram of one host, well-formed SVG with every GPU, process
group and link where the topology puts them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_svg
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes


def trap_result(host="gpu-a", holds=None, machine=DGX2):
    facts, processes = audit_replay.gather_capture(capture_with_processes(machine, holds or TRAP_HOLDS))
    return audit_result.audit_result(facts, processes, host)


SVG = "{http://www.w3.org/2000/svg}"


def test_host_svg_is_well_formed_with_every_gpu_and_misplaced_marks():
    result = trap_result()
    svg = ET.fromstring(report_svg.host_svg(result))
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
    red = [l for l in svg.iter(SVG + "line") if l.get("stroke") == report_svg.MISPLACED]
    assert len(red) == 4  # 9017 -> GPU 8, 9018 -> GPU 9, the TP group (one chip, on node 0) -> GPUs 10, 11


def test_host_svg_draws_pcie_links_by_class():
    # RTX 4090 quads: PIX inside each switch; no process source, so no chips
    facts, processes = audit_replay.gather_capture(capture_with_processes("rtx4090_8gpu_pcie_switch_quads", {}))
    svg = report_svg.host_svg(audit_result.audit_result(facts, processes, "gpu-b"))
    links = re.findall(r'<path class="link"[^>]*stroke="([^"]+)"', svg)
    assert links and set(links) == {report_svg.LINK_STYLES["PIX"][0]}
