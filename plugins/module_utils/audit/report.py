# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Render audit results for people: a plain-text table for the console and
one self-contained HTML page (inline CSS and SVG, nothing fetched) with a
diagram per host and the findings.

Input: a list of host results as the numa_audit module returns them
(host, topology, findings, groups, instances, counts, worst, warnings).
Pure functions, standard library only.
"""

from __future__ import annotations

import html

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_shape
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.findings import SEVERITIES, severity_rank

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7",
           "#86bcb6", "#d4a6c8", "#8cd17d", "#bab0ac")
SEVERITY_COLOURS = {"critical": "#b71c1c", "error": "#e65100", "warning": "#f9a825", "info": "#546e7a"}
# link class -> (colour, width, dash pattern); "NV"/"XGMI" stand for NV<n>/XGMI<n>
LINK_STYLES = {
    "NV": ("#2e7d32", 3.0, ""),
    "XGMI": ("#2e7d32", 3.0, ""),
    "PIX": ("#1565c0", 2.0, ""),
    "PXB": ("#1565c0", 2.0, "6 3"),
    "PHB": ("#6a1b9a", 1.5, "6 3"),
    "NODE": ("#ef6c00", 1.5, "3 3"),
    "SYS": ("#c62828", 2.0, "2 3"),
}
MISPLACED = "#c62828"

GPU_W, GPU_H, GAP = 58, 42, 8
CHIP_W, CHIP_H = 140, 22
CHIP_GAP = 40  # room between a process chip and the GPU row for its lines
NIC_W, NIC_H = 66, 18
PAD = 10
HEADER_H = 34
NODE_MIN_W = 250


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def invalid_result(result, index, problem):
    """A host result that cannot be read, as a result that says so: one
    error finding (code result_invalid) and nothing else of it."""
    name = result.get("host") if isinstance(result, dict) else None
    host = name if isinstance(name, str) and name and len(name) <= 255 else "results[%d]" % index
    finding = {"host": host, "severity": "error", "code": "result_invalid", "subject": host,
               "message": "the audit result of %s is not a numa_audit host result: %s" % (host, problem),
               "fix": "rerun the audit on this host; a result of this shape did not come from gpufleet.numa.numa_audit",
               "pids": [], "gpus": [], "instance": None}
    counts = dict((s, 0) for s in SEVERITIES)
    counts["error"] = 1
    return {"host": host, "invalid": problem, "findings": [finding], "counts": counts, "worst": "error",
            "groups": [], "instances": [], "topology": {}, "warnings": [], "process_source": None}


def _check_results(results):
    """Each host result checked (audit_shape.host_result); one that fails
    becomes invalid_result(), so the other hosts still render."""
    if not isinstance(results, list):
        raise ValueError("audit results must be a list of host results, got %s" % type(results).__name__)
    checked = []
    for i, result in enumerate(results):
        try:
            checked.append(audit_shape.host_result(result, i))
        except ValueError as exc:
            checked.append(invalid_result(result, i, str(exc)))
    return checked


def all_findings(results):
    """Every finding of every host, worst first, then by host."""
    found = [f for r in _check_results(results) for f in r["findings"]]
    return sorted(found, key=lambda f: (-severity_rank(f["severity"]), f["host"], f["code"], f["subject"]))


# ---------------------------------------------------------------- text


def text_table(results):
    """Lines: a summary per host, then one row per finding (worst first)
    with its fix on the next line."""
    results = _check_results(results)
    lines = []
    for r in results:
        counts = r.get("counts") or {}
        lines.append("%s: %s; %d GPU process(es) (%s)" % (
            r["host"], ", ".join("%d %s" % (counts.get(s, 0), s) for s in reversed(SEVERITIES)),
            sum(len(g.get("pids") or []) for g in r.get("groups") or []), r.get("process_source") or "no process source"))
    findings = all_findings(results)
    if not findings:
        lines.append("no findings")
        return lines
    rows = [("SEVERITY", "HOST", "CODE", "SUBJECT")] + [(f["severity"], f["host"], f["code"], f["subject"]) for f in findings]
    widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
    lines.append("  ".join(str(c).ljust(w) for c, w in zip(rows[0], widths)) + "  FINDING")
    for f, row in zip(findings, rows[1:]):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + f["message"])
        lines.append("    fix: " + f["fix"])
    return lines


# ---------------------------------------------------------------- SVG


def _link_style(cls):
    cls = str(cls or "")
    for prefix in ("XGMI", "NV"):
        if cls.startswith(prefix):
            return LINK_STYLES[prefix]
    return LINK_STYLES.get(cls)


def _short_bus(gpu):
    bus = gpu.get("pci_bus_id")
    if not bus:
        return gpu["id"]
    return bus[5:] if bus.startswith("0000:") else bus


class _Layout(object):
    """Where each socket, node, GPU, NIC and process chip of one host goes."""

    def __init__(self, result):
        topo = result.get("topology") or {}
        self.topo = topo
        self.gpus = list(topo.get("gpus") or [])
        self.nics = list(topo.get("nics") or [])
        nodes = list(topo.get("numa_nodes") or [])
        node_ids = [n["id"] for n in nodes]
        for g in self.gpus + self.nics:
            if g.get("numa_node") is not None and g["numa_node"] not in node_ids:
                node_ids.append(g["numa_node"])
                nodes.append({"id": g["numa_node"], "cpus": g.get("local_cpus"), "memory_mb": None, "socket": None})
        self.nodes = dict((n["id"], n) for n in nodes)
        socket_of = {}
        for s in topo.get("sockets") or []:
            for n in s.get("numa_nodes") or []:
                socket_of[n] = s["id"]
        for n in nodes:
            if n.get("socket") is not None:
                socket_of[n["id"]] = n["socket"]
        self.socket_of = socket_of
        sockets = {}
        for nid in sorted(self.nodes):
            key = ("socket", socket_of[nid]) if socket_of.get(nid) is not None else ("node", nid)
            sockets.setdefault(key, []).append(nid)
        if any(g.get("numa_node") is None for g in self.gpus + self.nics):
            sockets[("unknown", None)] = [None]
        self.sockets = sorted(sockets.items(), key=lambda kv: (kv[0][0] == "unknown", kv[0][0] != "socket", kv[0][1] or 0))
        self.groups = list(result.get("groups") or [])
        self.colour = {}
        for i, group in enumerate(self.groups):
            self.colour[group["key"]] = PALETTE[i % len(PALETTE)]
        self.holder = {}
        for group in self.groups:
            for gid in group.get("gpu_ids") or []:
                self.holder[gid] = group
        self.planned = {}
        for inst in result.get("instances") or []:
            for key in inst.get("gpus") or []:
                self.planned[key] = inst
        # chips: groups live where their memory (else their CPUs) is
        self.chip_node = {}
        self.unbound = []
        for group in self.groups:
            home = group.get("memory_node")
            cpu_nodes = group.get("cpu_nodes") or []
            if home is None and len(cpu_nodes) == 1:
                home = cpu_nodes[0]
            if home is not None and home in self.nodes:
                self.chip_node[group["key"]] = home
            else:
                self.unbound.append(group)
        self._place()

    def _node_items(self, nid):
        gpus = [g for g in self.gpus if g.get("numa_node") == nid]
        nics = [n for n in self.nics if n.get("numa_node") == nid]
        chips = [g for g in self.groups if self.chip_node.get(g["key"]) == nid] if nid is not None else []
        return gpus, nics, chips

    def _place(self):
        self.pos = {}       # gpu id -> (x, y)
        self.nic_pos = {}
        self.chip_pos = {}
        self.boxes = []     # (kind, x, y, w, h, label lines)
        x = PAD
        top = PAD + (CHIP_H + 2 * PAD if self.unbound else 0)
        node_h = 0
        for dummy_key, nids in self.sockets:
            for nid in nids:
                gpus, nics, chips = self._node_items(nid)
                rows = HEADER_H + (NIC_H + GAP if nics else 0) + (CHIP_H + CHIP_GAP if chips else 0) + GPU_H + PAD
                node_h = max(node_h, rows)
        socket_h = node_h + 2 * PAD + 18
        for key, nids in self.sockets:
            sx = x
            x += PAD
            for nid in nids:
                gpus, nics, chips = self._node_items(nid)
                width = max(NODE_MIN_W, len(gpus) * (GPU_W + GAP) + GAP, len(chips) * (CHIP_W + GAP) + GAP,
                            len(nics) * (NIC_W + GAP) + GAP)
                ny = top + 18 + PAD
                self.boxes.append(("node", x, ny, width, node_h, nid))
                row = ny + HEADER_H
                if nics:
                    for i, nic in enumerate(nics):
                        self.nic_pos[nic["id"]] = (x + GAP + i * (NIC_W + GAP), row)
                    row += NIC_H + GAP
                if chips:
                    for i, group in enumerate(chips):
                        self.chip_pos[group["key"]] = (x + GAP + i * (CHIP_W + GAP), row + GAP)
                gy = ny + node_h - PAD - GPU_H
                for i, gpu in enumerate(gpus):
                    self.pos[gpu["id"]] = (x + GAP + i * (GPU_W + GAP), gy)
                x += width + PAD
            self.boxes.append(("socket", sx, top, x - sx, socket_h, key))
            x += PAD
        self.width = max(x, 2 * PAD + len(self.unbound) * (CHIP_W + GAP))
        for i, group in enumerate(self.unbound):
            self.chip_pos[group["key"]] = (PAD + i * (CHIP_W + GAP), PAD)
        self.links_top = top + socket_h + 6
        self.height = self.links_top


def _fabric(topo, gpus):
    """The one NV/XGMI class joining every GPU pair, or None."""
    links = topo.get("links") or {}
    classes = set()
    ids = [g["id"] for g in gpus]
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            classes.add((links.get(a) or {}).get(b))
    if len(ids) > 2 and len(classes) == 1:
        cls = classes.pop()
        if cls and (str(cls).startswith("NV") or str(cls).startswith("XGMI")):
            return cls
    return None


def _links_to_draw(layout):
    topo = layout.topo
    links = topo.get("links") or {}
    fabric = _fabric(topo, layout.gpus)
    drawn = []
    ids = [g["id"] for g in layout.gpus if g["id"] in layout.pos]
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            cls = (links.get(a) or {}).get(b) or (links.get(b) or {}).get(a)
            if not cls:
                continue
            same = layout.holder.get(a) is not None and layout.holder.get(a) is layout.holder.get(b)
            strong = str(cls).startswith(("NV", "XGMI")) or cls in ("PIX", "PXB")
            if (same or strong) and not fabric:
                drawn.append((a, b, cls, same))
    return fabric, drawn


def host_svg(result):
    """An SVG diagram of one host: sockets, NUMA nodes with their CPUs, GPUs
    coloured by process group, links by class, NICs, processes where their
    memory and CPUs are (misplaced ones in red, with lines to their GPUs)."""
    layout = _Layout(result)
    fabric, drawn = _links_to_draw(layout)
    parts = []
    # links band below the sockets
    band = 0
    base = layout.links_top
    for a, b, cls, same in drawn:
        ax = layout.pos[a][0] + GPU_W / 2.0
        bx = layout.pos[b][0] + GPU_W / 2.0
        depth = min(24 + abs(bx - ax) * 0.18, 150)
        band = max(band, depth / 2.0 + 12)
        colour, width, dash = _link_style(cls) or ("#777", 1.0, "2 2")
        parts.append('<path class="link" d="M%.1f %.1f Q%.1f %.1f %.1f %.1f" stroke="%s" stroke-width="%.1f"%s fill="none">'
                     '<title>%s</title></path>' % (
                         ax, base, (ax + bx) / 2.0, base + depth, bx, base, colour, width + (1 if same else 0),
                         ' stroke-dasharray="%s"' % dash if dash else "", _e("%s - %s: %s" % (a, b, cls))))
    height = base + band + 10
    if fabric:
        xs = [layout.pos[g][0] for g in layout.pos]
        colour = _link_style(fabric)[0]
        parts.append('<rect x="%d" y="%d" width="%d" height="10" rx="4" fill="%s" opacity="0.85"><title>%s</title></rect>' % (
            min(xs), base + 4, max(xs) + GPU_W - min(xs), colour, _e("every GPU pair: %s (switch fabric)" % fabric)))
        parts.append('<text x="%d" y="%d" class="small">%s fabric: every GPU pair</text>' % (min(xs), base + 28, _e(fabric)))
        height = max(height, base + 36)
    body = []
    for kind, x, y, w, h, key in [b for b in layout.boxes if b[0] == "socket"]:
        label = "socket %s" % key[1] if key[0] == "socket" else (
            "NUMA node %s (socket unknown)" % key[1] if key[0] == "node" else "NUMA node unknown")
        body.append('<rect class="socket" x="%d" y="%d" width="%d" height="%d" rx="8"/>' % (x, y, w, h))
        body.append('<text x="%d" y="%d" class="socket-label">%s</text>' % (x + 8, y + 15, _e(label)))
    for kind, x, y, w, h, nid in [b for b in layout.boxes if b[0] == "node"]:
        node = layout.nodes.get(nid) or {}
        body.append('<rect class="node" x="%d" y="%d" width="%d" height="%d" rx="6"/>' % (x, y, w, h))
        title = "NUMA node %s" % nid if nid is not None else "GPUs without a NUMA node"
        cpus = node.get("cpus")
        mem = node.get("memory_mb")
        detail = "CPUs %s" % (cpus if cpus else ("none (memory only)" if cpus == "" else "unknown"))
        if mem:
            detail += " \u00b7 %d GiB" % round(mem / 1024.0)
        body.append('<text x="%d" y="%d" class="node-label">%s</text>' % (x + 6, y + 14, _e(title)))
        body.append('<text x="%d" y="%d" class="small">%s</text>' % (x + 6, y + 28, _e(detail)))
    for nic in layout.nics:
        if nic["id"] not in layout.nic_pos:
            continue
        x, y = layout.nic_pos[nic["id"]]
        name = (nic.get("interfaces") or [nic["id"]])[0]
        body.append('<g class="nic"><rect x="%d" y="%d" width="%d" height="%d" rx="3"/><text x="%d" y="%d" class="tiny">%s</text>'
                    '<title>%s</title></g>' % (x, y, NIC_W, NIC_H, x + 4, y + 12, _e("NIC " + name[:9]),
                                               _e("NIC %s %s" % (nic["id"], ", ".join(nic.get("interfaces") or [])))))
    for gpu in layout.gpus:
        if gpu["id"] not in layout.pos:
            continue
        x, y = layout.pos[gpu["id"]]
        group = layout.holder.get(gpu["id"])
        inst = layout.planned.get(gpu.get("pci_bus_id")) or layout.planned.get(gpu["id"])
        fill = layout.colour[group["key"]] if group else "#eceff1"
        stroke = MISPLACED if group and group.get("misplaced") else ("#37474f" if group else "#90a4ae")
        dash = ' stroke-dasharray="4 3"' if inst and not group else ""
        index = "GPU %s" % gpu["index"] if gpu.get("index") is not None else "GPU"
        tip = "%s %s %s" % (index, gpu.get("pci_bus_id") or gpu["id"], gpu.get("name") or "")
        if group:
            tip += "\nheld by %s (pids %s)" % (group["name"], ",".join(str(p) for p in group["pids"]))
        if inst:
            tip += "\nplanned: %s (%s)" % (inst["name"], inst.get("state"))
        text_class = "gpu-text on" if group else "gpu-text"
        body.append('<g class="gpu"><rect x="%d" y="%d" width="%d" height="%d" rx="4" fill="%s" stroke="%s" stroke-width="%s"%s/>'
                    '<text x="%d" y="%d" class="%s">%s</text><text x="%d" y="%d" class="tiny %s">%s</text>'
                    '<title>%s</title></g>' % (
                        x, y, GPU_W, GPU_H, fill, stroke, 3 if group and group.get("misplaced") else 1.2, dash,
                        x + 5, y + 16, text_class, _e(index), x + 5, y + 30, text_class, _e(_short_bus(gpu)), _e(tip)))
        if inst:
            body.append('<text x="%d" y="%d" class="tiny inst">%s</text>' % (x + 2, y - 3, _e(inst["name"])))
    overlay = []
    for group in layout.groups:
        if group["key"] not in layout.chip_pos:
            continue
        cx, cy = layout.chip_pos[group["key"]]
        colour = layout.colour[group["key"]]
        home = layout.chip_node.get(group["key"])
        for gid in group.get("gpu_ids") or []:
            if gid not in layout.pos:
                continue
            gx, gy = layout.pos[gid]
            gpu_node = next((g.get("numa_node") for g in layout.gpus if g["id"] == gid), None)
            # red: the GPU is on another node than the process; grey dashes: the process has no home node
            far = home is not None and gpu_node != home
            stroke = MISPLACED if far else ("#78909c" if home is None else colour)
            overlay.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%s"%s opacity="0.9"/>' % (
                cx + CHIP_W / 2.0, cy + CHIP_H, gx + GPU_W / 2.0, gy, stroke,
                2.2 if far else 1.4, ' stroke-dasharray="5 3"' if far or home is None else ""))
        mark = "\u26a0 " if group.get("misplaced") else ""
        label = "%s%s %s" % (mark, group["name"][:9], group["leader"])
        if len(group["pids"]) > 1:
            label += " +%d" % (len(group["pids"]) - 1)
        tip = "%s pids %s; GPUs %s; CPUs on nodes %s; memory mostly on node %s%s" % (
            group["name"], ",".join(str(p) for p in group["pids"]), ", ".join(group.get("gpus") or []),
            ",".join(str(n) for n in group.get("cpu_nodes") or []) or "?",
            group.get("memory_node") if group.get("memory_node") is not None else "?",
            "; instance %s" % group["instance"] if group.get("instance") else "")
        overlay.append('<g class="chip%s"><rect x="%d" y="%d" width="%d" height="%d" rx="11" fill="%s" stroke="%s" stroke-width="%s"/>'
                       '<text x="%d" y="%d" class="chip-text">%s</text><title>%s</title></g>' % (
                           " misplaced" if group.get("misplaced") else "", cx, cy, CHIP_W, CHIP_H, colour,
                           MISPLACED if group.get("misplaced") else "#37474f", 3 if group.get("misplaced") else 1,
                           cx + 9, cy + 15, _e(label), _e(tip)))
    if layout.unbound:
        body.append('<text x="%d" y="%d" class="small">not bound to a node:</text>' % (PAD, PAD - 1))
    width = layout.width + PAD
    return ('<svg xmlns="http://www.w3.org/2000/svg" class="host-diagram" viewBox="0 0 %d %d" width="%d" height="%d" '
            'role="img" aria-label="%s">%s%s%s</svg>' % (
                width, height, width, height, _e("topology of %s" % result["host"]), "".join(body), "".join(parts),
                "".join(overlay)))


# ---------------------------------------------------------------- HTML

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
        items.append('<span><i class="swatch" style="background:%s"></i>%s</span>' % (colour, _e(what)))
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
        cells = (f["severity"], _e(f["severity"]), _e(f["code"]), _e(f["subject"]), _e(f["message"]), _e(f["fix"]))
        rows.append('<tr><td><span class="badge %s">%s</span></td><td><code>%s</code></td><td>%s</td><td>%s</td>'
                    '<td class="fix">%s</td></tr>' % cells)
    return ('<table class="findings"><thead><tr><th>severity</th><th>code</th><th>subject</th><th>finding</th><th>fix</th>'
            '</tr></thead><tbody>%s</tbody></table>' % "".join(rows))


def _instances_table(instances):
    if not instances:
        return ""
    rows = "".join('<tr><td>%s</td><td><code>%s</code></td><td>%s</td><td><code>%s</code></td><td>%s</td><td>%s</td></tr>' % (
        _e(i["name"]), _e(", ".join(i.get("gpus") or [])), _e(",".join(str(n) for n in i.get("numa_nodes") or [])),
        _e(i.get("cpus")), _e(i.get("state")), _e(",".join(str(p) for p in i.get("pids") or [])))
        for i in instances)
    return ('<h3>Deployed plan</h3><table><thead><tr><th>instance</th><th>GPUs</th><th>NUMA nodes</th><th>CPUs</th>'
            '<th>state</th><th>pids</th></tr></thead><tbody>%s</tbody></table>' % rows)


def html_report(results, title="GPU / NUMA topology audit", generated=None):
    """One self-contained HTML page: totals, then per host its diagram,
    findings, deployed-plan state and warnings."""
    results = _check_results(results)
    totals = dict((s, 0) for s in SEVERITIES)
    for r in results:
        for f in r["findings"]:
            totals[f["severity"]] = totals.get(f["severity"], 0) + 1
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>%s</title><style>%s</style></head><body>" % (_e(title), _CSS),
           "<h1>%s</h1>" % _e(title),
           '<div class="meta">%d host(s)%s &nbsp; %s</div>' % (
               len(results), " \u00b7 generated %s" % _e(generated) if generated else "", _badges(totals))]
    for r in sorted(results, key=lambda r: (-severity_rank(r["worst"]) if r.get("worst") else 1, r["host"])):
        out.append('<section class="host" id="host-%s"><h2>%s %s</h2>' % (_e(r["host"]), _e(r["host"]), _badges(r.get("counts") or {})))
        if r.get("invalid"):
            out.append('<p class="invalid">Result invalid: %s</p>%s</section>' % (_e(r["invalid"]), _findings_table(r["findings"])))
            continue
        topo = r.get("topology") or {}
        out.append('<div class="meta">%d NUMA node(s), %d socket(s), %d GPU(s), %d NIC(s); topology from %s; processes from %s</div>' % (
            len(topo.get("numa_nodes") or []), len(topo.get("sockets") or []), len(topo.get("gpus") or []),
            len(topo.get("nics") or []), _e(", ".join(topo.get("sources") or []) or "nothing"),
            _e(r.get("process_source") or "nothing (NVML and nvidia-smi did not answer)")))
        out.append('<div class="diagram">%s</div>' % host_svg(r))
        out.append(_legend(r))
        out.append(_findings_table(r["findings"]))
        out.append(_instances_table(r.get("instances")))
        warnings = list(r.get("warnings") or []) + list(topo.get("warnings") or [])
        if warnings:
            out.append("<details><summary>%d warning(s)</summary><ul>%s</ul></details>" % (
                len(warnings), "".join("<li>%s</li>" % _e(w) for w in warnings)))
        out.append("</section>")
    out.append("</body></html>\n")
    return "".join(out)
