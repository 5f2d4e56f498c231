# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The measured bandwidth of one audited host in the HTML report
(docs/bandwidth.md, docs/audit.md "The report"): the verdict, a small bar
chart (inline SVG: each memory pair and each GPU copy, local bars green,
remote ones orange, a shared scale per part) and the table of figures,
from the kept plan's hosts.HOST.bandwidth (checked by the numa_audit
action and again by the report filters). Pure functions; controller only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit.report_svg import escape
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth.verdict import verdict

LOCAL, REMOTE, UNKNOWN = "#2e7d32", "#ef6c00", "#90a4ae"
LABEL_W, BAR_W, ROW_H, HEAD_H, VALUE_W = 250, 300, 18, 22, 80


def rows(bandwidth):
    """[(part, label, GB/s, local: True/False/None)] in the chart's order."""
    out = []
    memory = bandwidth["memory"]
    for pair in memory["pairs"]:
        out.append(("memory (%s)" % memory["method"], "CPU node %d, memory node %d" % (pair["cpu_node"], pair["memory_node"]),
                    pair["gbps"], pair["cpu_node"] == pair["memory_node"]))
    copies = bandwidth["gpus"]["copies"]
    for what, field in (("H2D", "h2d_gbps"), ("D2H", "d2h_gbps")):
        for copy in copies:
            local = None if copy.get("gpu_node") is None else copy["node"] == copy["gpu_node"]
            gpu = copy["gpu"] if copy.get("index") is None else "%s %s" % (copy["index"], copy["gpu"])
            out.append(("%s (pinned)" % what, "GPU %s from node %d" % (gpu, copy["node"]), copy[field], local))
    return out


def chart(bandwidth):
    """The bar chart as inline SVG ("" without figures)."""
    found = rows(bandwidth)
    if not found:
        return ""
    parts = []
    for part, label, gbps, local in found:
        if not parts or parts[-1][0] != part:
            parts.append((part, []))
        parts[-1][1].append((label, gbps, local))
    out, y = [], 0
    for part, entries in parts:
        scale = max(g for dummy, g, dummy2 in entries)
        out.append('<text x="0" y="%d" class="node-label">%s</text>' % (y + 15, escape(part)))
        y += HEAD_H
        for label, gbps, local in entries:
            width = max(1.0, BAR_W * gbps / scale)
            colour = UNKNOWN if local is None else (LOCAL if local else REMOTE)
            out.append('<text x="0" y="%d" class="small">%s</text>' % (y + 13, escape(label)))
            out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %.1f GB/s</title></rect>'
                       % (LABEL_W, y + 2, width, ROW_H - 4, colour, escape(label), gbps))
            out.append('<text x="%.1f" y="%d" class="small">%.1f GB/s</text>' % (LABEL_W + width + 6, y + 13, gbps))
            y += ROW_H
        y += 6
    return ('<svg xmlns="http://www.w3.org/2000/svg" class="bandwidth" width="%d" height="%d" viewBox="0 0 %d %d" '
            'role="img" aria-label="measured bandwidth">%s</svg>' % (
                LABEL_W + BAR_W + VALUE_W, y, LABEL_W + BAR_W + VALUE_W, y, "".join(out)))


def _table(bandwidth):
    found = rows(bandwidth)
    if not found:
        return ""
    body = "".join('<tr><td>%s</td><td>%s</td><td>%.1f</td><td>%s</td></tr>' % (
        escape(part), escape(label), gbps, "unknown" if local is None else ("local" if local else "remote"))
        for part, label, gbps, local in found)
    return ('<table class="bandwidth"><thead><tr><th>measured</th><th>where</th><th>GB/s</th><th>placement</th></tr>'
            '</thead><tbody>%s</tbody></table>' % body)


def section(bandwidth):
    """The host's bandwidth section: heading, verdict, chart, table, notes."""
    if not bandwidth:
        return ""
    notes = [n for part in ("memory", "gpus") for n in bandwidth[part]["notes"]]
    legend = ('<div class="legend"><span><i class="swatch" style="background:%s"></i>local</span>'
              '<span><i class="swatch" style="background:%s"></i>remote</span>'
              '<span><i class="swatch" style="background:%s"></i>GPU node unknown</span></div>' % (LOCAL, REMOTE, UNKNOWN))
    return ('<h3>Measured bandwidth</h3><p class="verdict"><strong>%s</strong> <span class="meta">(measured %s with %s, '
            '%d MiB buffers)</span></p><div class="diagram">%s</div>%s%s%s' % (
                escape(verdict(bandwidth)["text"]), escape(bandwidth["measured_at"]), escape(bandwidth["python"]),
                bandwidth["size_mib"], chart(bandwidth), legend if rows(bandwidth) else "", _table(bandwidth),
                "<ul>%s</ul>" % "".join("<li>%s</li>" % escape(n) for n in notes) if notes else ""))
