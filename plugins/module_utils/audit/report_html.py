# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The audit for people: one self-contained HTML page (inline CSS and SVG,
nothing fetched) with a diagram per host and its findings.

Input: host results as result.audit_result() makes them, or as
plugin_utils/host_results.audit_results() keeps them of what a playbook
passes (host, topology, findings, groups, instances, counts, worst,
warnings; a result of the wrong shape is then marked invalid).
Pure functions; controller only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_bandwidth
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.locality import SEVERITIES, severity_rank
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.report_text import instance_state_text
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.report_svg import LINK_STYLES, MISPLACED, PALETTE, escape, host_svg


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#212121;background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 6px}
.meta{color:#616161;margin-bottom:14px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;font-weight:600;margin-right:4px}
.critical{background:#b71c1c}.error{background:#e65100}.warning{background:#f9a825;color:#212121}.info{background:#546e7a}
.ok{background:#2e7d32}
.host{background:#fff;border:1px solid #e0e0e0;border-radius:8px;padding:12px 16px;margin-bottom:20px}
.diagram{overflow-x:auto;margin:8px 0}.diagram svg{max-width:100%;height:auto}
table{border-collapse:collapse;width:100%;margin:8px 0}
th,td{border-bottom:1px solid #e0e0e0;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-weight:600}td.fix{color:#1b5e20}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:4px}
svg .socket{fill:#f3f6f9;stroke:#78909c;stroke-width:1.5}
svg .node{fill:#fff;stroke:#b0bec5}
svg text{font-family:system-ui,sans-serif;fill:#263238}
svg .socket-label{font-size:12px;font-weight:700}svg .node-label{font-size:12px;font-weight:600}
svg .small{font-size:11px}svg .tiny{font-size:9.5px}
svg .gpu-text{font-size:11px;font-weight:600}svg .gpu-text.tiny{font-size:9.5px;font-weight:400}
svg .gpu-text.on{fill:#fff}svg .inst{fill:#455a64}
svg .nic rect{fill:#e8eaf6;stroke:#7986cb}
svg .chip-text{font-size:11px;font-weight:600;fill:#fff}
"""


def _badges(counts):
    shown = [(s, counts.get(s, 0)) for s in reversed(SEVERITIES) if counts.get(s, 0)]
    if not shown:
        return '<span class="badge ok">no findings</span>'
    return "".join('<span class="badge %s">%d %s</span>' % (s, n, s) for s, n in shown)


def _legend(result):
    layout_groups = result.get("groups") or []
    items = []
    for i, group in enumerate(layout_groups):
        colour = PALETTE[i % len(PALETTE)]
        what = "%s pid %s" % (group["name"], ",".join(str(p) for p in group["pids"]))
        if group.get("instance"):
            what += " = %s" % group["instance"]
        if group.get("misplaced"):
            what = "\u26a0 " + what
        items.append('<span><i class="swatch" style="background:%s"></i>%s</span>' % (colour, escape(what)))
    for name, style in (("NV/XGMI", "NV"), ("PIX", "PIX"), ("PXB", "PXB"), ("PHB", "PHB"), ("NODE", "NODE"), ("SYS", "SYS")):
        colour, width, dash = LINK_STYLES[style]
        items.append('<span><svg width="28" height="8"><line x1="0" y1="4" x2="28" y2="4" stroke="%s" stroke-width="%s"%s/></svg> %s</span>' % (
            colour, width, ' stroke-dasharray="%s"' % dash if dash else "", name))
    items.append('<span><i class="swatch" style="background:#fff;border:2px solid %s"></i>misplaced process (red dashed line: '
                 'GPU on another node)</span>' % MISPLACED)
    return '<div class="legend">%s</div>' % "".join(items)


def _findings_table(findings):
    if not findings:
        return "<p>No findings.</p>"
    rows = []
    for f in findings:
        cells = (f["severity"], escape(f["severity"]), escape(f["code"]), escape(f["subject"]), escape(f["message"]), escape(f["fix"]))
        rows.append('<tr><td><span class="badge %s">%s</span></td><td><code>%s</code></td><td>%s</td><td>%s</td>'
                    '<td class="fix">%s</td></tr>' % cells)
    return ('<table class="findings"><thead><tr><th>severity</th><th>code</th><th>subject</th><th>finding</th><th>fix</th>'
            '</tr></thead><tbody>%s</tbody></table>' % "".join(rows))


def _instances_table(instances):
    if not instances:
        return ""
    rows = "".join('<tr><td>%s</td><td><code>%s</code></td><td>%s</td><td><code>%s</code></td><td>%s</td><td><code>%s</code> %s</td>'
                   '<td>%s</td></tr>' % (
                       escape(i["name"]), escape(", ".join(i.get("gpus") or [])),
                       escape(",".join(str(n) for n in i.get("numa_nodes") or [])), escape(i.get("cpus")),
                       escape(instance_state_text(i)), escape(i.get("unit") or ""), escape(i.get("unit_state") or "not read"),
                       escape(",".join(str(p) for p in i.get("pids") or [])))
                   for i in instances)
    return ('<h3>Deployed plan</h3><table><thead><tr><th>instance</th><th>GPUs</th><th>NUMA nodes</th><th>CPUs</th>'
            '<th>state</th><th>unit</th><th>pids</th></tr></thead><tbody>%s</tbody></table>' % rows)


def html_report(results, title="GPU / NUMA topology audit", generated=None):
    """One self-contained HTML page: totals, then per host its diagram,
    findings, deployed-plan state, measured bandwidth and warnings."""
    totals = dict((s, 0) for s in SEVERITIES)
    for r in results:
        for f in r["findings"]:
            totals[f["severity"]] = totals.get(f["severity"], 0) + 1
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>%s</title><style>%s</style></head><body>" % (escape(title), _CSS),
           "<h1>%s</h1>" % escape(title),
           '<div class="meta">%d host(s)%s &nbsp; %s</div>' % (
               len(results), " \u00b7 generated %s" % escape(generated) if generated else "", _badges(totals))]
    for r in sorted(results, key=lambda r: (-severity_rank(r["worst"]) if r.get("worst") else 1, r["host"])):
        out.append('<section class="host" id="host-%s"><h2>%s %s</h2>' % (escape(r["host"]), escape(r["host"]), _badges(r.get("counts") or {})))
        if r.get("invalid"):
            out.append('<p class="invalid">Result invalid: %s</p>%s</section>' % (escape(r["invalid"]), _findings_table(r["findings"])))
            continue
        topo = r.get("topology") or {}
        out.append('<div class="meta">%d NUMA node(s), %d socket(s), %d GPU(s), %d NIC(s); topology from %s; processes from %s</div>' % (
            len(topo.get("numa_nodes") or []), len(topo.get("sockets") or []), len(topo.get("gpus") or []),
            len(topo.get("nics") or []), escape(", ".join(topo.get("sources") or []) or "nothing"),
            escape(r.get("process_source") or "nothing (NVML and nvidia-smi did not answer)")))
        out.append('<div class="diagram">%s</div>' % host_svg(r))
        out.append(_legend(r))
        out.append(_findings_table(r["findings"]))
        out.append(_instances_table(r.get("instances")))
        out.append(report_bandwidth.section(r.get("bandwidth")))
        warnings = list(r.get("warnings") or []) + list(topo.get("warnings") or [])
        if warnings:
            out.append("<details><summary>%d warning(s)</summary><ul>%s</ul></details>" % (
                len(warnings), "".join("<li>%s</li>" % escape(w) for w in warnings)))
        out.append("</section>")
    out.append("</body></html>\n")
    return "".join(out)
