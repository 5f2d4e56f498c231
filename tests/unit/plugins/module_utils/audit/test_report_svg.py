# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/report_svg.py: the diagram of one host, well-formed SVG with every GPU, process
group and link where the topology puts them; for every recorded machine and
the audit's scenarios no label overlaps another, crosses a box or leaves the
drawing, and each NUMA node is named once."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_html
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_svg
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement

from ansible_collections.gpufleet.numa.tests.fixtures import audit_scenarios
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
    red = [line for line in svg.iter(SVG + "line") if line.get("stroke") == report_svg.MISPLACED]
    assert len(red) == 4  # 9017 -> GPU 8, 9018 -> GPU 9, the TP group (one chip, on node 0) -> GPUs 10, 11


def test_host_svg_draws_pcie_links_by_class():
    # RTX 4090 quads: PIX inside each switch; no process source, so no chips
    facts, processes = audit_replay.gather_capture(capture_with_processes("rtx4090_8gpu_pcie_switch_quads", {}))
    svg = report_svg.host_svg(audit_result.audit_result(facts, processes, "gpu-b"))
    links = re.findall(r'<path class="link"[^>]*stroke="([^"]+)"', svg)
    assert links and set(links) == {report_svg.LINK_STYLES["PIX"][0]}


# ---------------------------------------------------------------- layout: no label over another, none clipped

# The diagram of every recorded machine (with the plan the placement gives
# it, so instance labels are drawn), and the audit's process scenarios:
# the DGX-2 in the NUMA trap with a deployed plan (and with three of its
# process groups on no one node), an NDv4-like VM with a TP group across
# nodes and a process bound to no node.
MACHINE_NAMES = sorted(m for m in os.listdir(audit_scenarios.MACHINES)
                       if os.path.exists(os.path.join(audit_scenarios.MACHINES, m, "capture.yml")))


def _planned_result(machine):
    facts, processes = audit_replay.gather_capture(capture_with_processes(machine, {}))
    try:
        deployed = {"options": {"tp_size": 2}, "plan": placement.plan_fleet({machine: facts}, tp_size=2)}
    except ValueError:
        deployed = None  # a machine tp_size 2 fits nowhere on (one GPU per node, no GPUs): drawn without a plan
    return audit_result.audit_result(facts, processes, machine, deployed)


def _scenario(name):
    if name.startswith("dgx2-trap"):
        facts, processes = audit_replay.gather_capture(capture_with_processes(DGX2, TRAP_HOLDS))
        deployed = {"options": {"tp_size": 4}, "plan": placement.plan_fleet({"dgx2-a": facts}, tp_size=4)}
        result = audit_result.audit_result(facts, processes, "dgx2-a", deployed)
        if name == "dgx2-trap-unhomed":
            # processes whose memory and CPUs are on no one node: drawn above the sockets
            for group in result["groups"][:3]:
                group.update(memory_node=None, cpu_nodes=[0, 1])
        return result
    facts, processes = audit_replay.gather_capture(capture_with_processes(
        "azure_ndv4_like", {"tp_server": ["0001:00:00.0", "0002:00:00.0"], "tp_server_worker": ["0003:00:00.0"],
                            "unbound": ["000d:00:00.0"], "interleave_all": ["0004:00:00.0"]}))
    return audit_result.audit_result(facts, processes, "ndv4-b")


DRAWINGS = [("machine", m) for m in MACHINE_NAMES] + [("scenario", "dgx2-trap"), ("scenario", "dgx2-trap-unhomed"),
                                                      ("scenario", "ndv4-tp-across-nodes")]


def _drawing(kind, name):
    return _planned_result(name) if kind == "machine" else _scenario(name)


def _font_sizes():
    """[(classes, font size)] of the report's own CSS rules for SVG text, in order."""
    rules = []
    for selectors, size in re.findall(r"((?:svg \.[\w.-]+,?)+)\{[^}]*font-size:([\d.]+)px", report_html._CSS):
        for selector in selectors.split(","):
            rules.append((frozenset(selector.strip()[len("svg ."):].split(".")), float(size)))
    return rules


FONT_SIZES = _font_sizes()


def _font_size(classes):
    """The font size the browser gives a text: its most specific matching rule, the later of equals."""
    matching = [(len(rule), i, size) for i, (rule, size) in enumerate(FONT_SIZES) if rule <= classes]
    assert matching, "no font size for SVG text of class %s" % sorted(classes)
    return max(matching)[2]


def _text_box(text):
    """A conservative extent of an SVG <text>: 0.6 em per ASCII character and
    1 em per other one (sans serif, bold included), 0.9 em above the
    baseline and 0.25 em below."""
    size = _font_size(frozenset((text.get("class") or "").split()))
    width = size * sum(0.6 if ord(c) < 128 else 1.0 for c in text.text or "")
    x, y = float(text.get("x")), float(text.get("y"))
    left = {"start": x, "middle": x - width / 2.0, "end": x - width}[text.get("text-anchor") or "start"]
    return (left, y - 0.9 * size, left + width, y + 0.25 * size)


def _overlap(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(inner, outer):
    return outer[0] <= inner[0] and inner[2] <= outer[2] and outer[1] <= inner[1] and inner[3] <= outer[3]


def _rect_box(rect):
    x, y = float(rect.get("x")), float(rect.get("y"))
    return (x, y, x + float(rect.get("width")), y + float(rect.get("height")))


def _shapes(svg):
    """([(text, its box, its <g> or None)], [(rect box, its <g> or None)]) of the drawing."""
    texts, rects = [], []

    def walk(element, group):
        for child in element:
            if child.tag == SVG + "text":
                texts.append((child.text, _text_box(child), group))
            elif child.tag == SVG + "rect":
                rects.append((_rect_box(child), group))
            elif child.tag == SVG + "g":
                walk(child, child)
    walk(svg, None)
    return texts, rects


@pytest.mark.parametrize("kind,name", DRAWINGS)
def test_host_svg_labels_neither_overlap_nor_cross_a_box_nor_leave_the_drawing(kind, name):
    svg = ET.fromstring(report_svg.host_svg(_drawing(kind, name)))
    texts, rects = _shapes(svg)
    assert texts
    left, top, width, height = (float(v) for v in svg.get("viewBox").split())
    view = (left, top, left + width, top + height)
    for i, (text, box, group) in enumerate(texts):
        assert _inside(box, view), "%r %s leaves the drawing %s" % (text, box, view)
        for other, other_box, dummy in texts[i + 1:]:
            assert not _overlap(box, other_box), "%r %s overlaps %r %s" % (text, box, other, other_box)
        for rect, rect_group in rects:
            if rect_group is not None and rect_group is group:
                assert _inside(box, rect), "%r %s is clipped by its box %s" % (text, box, rect)
            elif _overlap(box, rect):
                # a box that is not the text's own holds it whole (a socket, a NUMA node), never part of it,
                # and a GPU, NIC or process chip holds no text of another
                assert _inside(box, rect) and rect_group is None, "%r %s crosses or sits under the box %s" % (
                    text, box, rect)


@pytest.mark.parametrize("kind,name", DRAWINGS)
def test_host_svg_names_each_numa_node_once(kind, name):
    result = _drawing(kind, name)
    svg = ET.fromstring(report_svg.host_svg(result))
    texts = [t.text or "" for t in svg.iter(SVG + "text")]
    for node in (result.get("topology") or {}).get("numa_nodes") or []:
        said = [t for t in texts if re.search(r"\bNUMA node %d\b" % node["id"], t)]
        assert len(said) == 1, (node["id"], said)
