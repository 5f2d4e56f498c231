# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The diagram of one audited host, as inline SVG: sockets, NUMA nodes
with their CPUs, GPUs coloured by the process group that holds them, links
by class, NICs, and each process group where its memory and CPUs are
(misplaced ones in red, with lines to their GPUs).

Input: one host result as report_html.py renders it. Pure functions;
controller only.
"""

from __future__ import annotations

import html

from ansible_collections.gpufleet.numa.plugins.module_utils.audit.report_text import instance_state_text

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7",
           "#86bcb6", "#d4a6c8", "#8cd17d", "#bab0ac")
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


def escape(value):
    return html.escape("" if value is None else str(value), quote=True)


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
    links, height = _svg_links(layout)
    body = _svg_boxes(layout) + _svg_gpus(layout)
    if layout.unbound:
        body.append('<text x="%d" y="%d" class="small">not bound to a node:</text>' % (PAD, PAD - 1))
    width = layout.width + PAD
    return ('<svg xmlns="http://www.w3.org/2000/svg" class="host-diagram" viewBox="0 0 %d %d" width="%d" height="%d" '
            'role="img" aria-label="%s">%s%s%s</svg>' % (
                width, height, width, height, escape("topology of %s" % result["host"]), "".join(body), "".join(links),
                "".join(_svg_chips(layout))))


def _svg_links(layout):
    """(SVG parts, diagram height): the links band below the sockets, arcs
    by class, or one bar for a switch fabric that joins every GPU pair."""
    fabric, drawn = _links_to_draw(layout)
    parts = []
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
                         ' stroke-dasharray="%s"' % dash if dash else "", escape("%s - %s: %s" % (a, b, cls))))
    height = base + band + 10
    if fabric:
        xs = [layout.pos[g][0] for g in layout.pos]
        colour = _link_style(fabric)[0]
        parts.append('<rect x="%d" y="%d" width="%d" height="10" rx="4" fill="%s" opacity="0.85"><title>%s</title></rect>' % (
            min(xs), base + 4, max(xs) + GPU_W - min(xs), colour, escape("every GPU pair: %s (switch fabric)" % fabric)))
        parts.append('<text x="%d" y="%d" class="small">%s fabric: every GPU pair</text>' % (min(xs), base + 28, escape(fabric)))
        height = max(height, base + 36)
    return parts, height


def _svg_boxes(layout):
    """SVG parts: socket and NUMA node boxes with their labels, and NICs."""
    body = []
    for kind, x, y, w, h, key in [b for b in layout.boxes if b[0] == "socket"]:
        label = "socket %s" % key[1] if key[0] == "socket" else (
            "NUMA node %s (socket unknown)" % key[1] if key[0] == "node" else "NUMA node unknown")
        body.append('<rect class="socket" x="%d" y="%d" width="%d" height="%d" rx="8"/>' % (x, y, w, h))
        body.append('<text x="%d" y="%d" class="socket-label">%s</text>' % (x + 8, y + 15, escape(label)))
    for kind, x, y, w, h, nid in [b for b in layout.boxes if b[0] == "node"]:
        node = layout.nodes.get(nid) or {}
        body.append('<rect class="node" x="%d" y="%d" width="%d" height="%d" rx="6"/>' % (x, y, w, h))
        title = "NUMA node %s" % nid if nid is not None else "GPUs without a NUMA node"
        cpus = node.get("cpus")
        mem = node.get("memory_mb")
        detail = "CPUs %s" % (cpus if cpus else ("none (memory only)" if cpus == "" else "unknown"))
        if mem:
            detail += " \u00b7 %d GiB" % round(mem / 1024.0)
        body.append('<text x="%d" y="%d" class="node-label">%s</text>' % (x + 6, y + 14, escape(title)))
        body.append('<text x="%d" y="%d" class="small">%s</text>' % (x + 6, y + 28, escape(detail)))
    for nic in layout.nics:
        if nic["id"] not in layout.nic_pos:
            continue
        x, y = layout.nic_pos[nic["id"]]
        name = (nic.get("interfaces") or [nic["id"]])[0]
        body.append('<g class="nic"><rect x="%d" y="%d" width="%d" height="%d" rx="3"/><text x="%d" y="%d" class="tiny">%s</text>'
                    '<title>%s</title></g>' % (x, y, NIC_W, NIC_H, x + 4, y + 12, escape("NIC " + name[:9]),
                                               escape("NIC %s %s" % (nic["id"], ", ".join(nic.get("interfaces") or [])))))
    return body


def _svg_gpus(layout):
    """SVG parts: each GPU, coloured by the group holding it, with the
    planned instance's name above it."""
    body = []
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
            tip += "\nplanned: %s (%s)" % (inst["name"], instance_state_text(inst))
        text_class = "gpu-text on" if group else "gpu-text"
        body.append('<g class="gpu"><rect x="%d" y="%d" width="%d" height="%d" rx="4" fill="%s" stroke="%s" stroke-width="%s"%s/>'
                    '<text x="%d" y="%d" class="%s">%s</text><text x="%d" y="%d" class="tiny %s">%s</text>'
                    '<title>%s</title></g>' % (
                        x, y, GPU_W, GPU_H, fill, stroke, 3 if group and group.get("misplaced") else 1.2, dash,
                        x + 5, y + 16, text_class, escape(index), x + 5, y + 30, text_class, escape(_short_bus(gpu)), escape(tip)))
        if inst:
            body.append('<text x="%d" y="%d" class="tiny inst">%s</text>' % (x + 2, y - 3, escape(inst["name"])))
    return body


def _svg_chips(layout):
    """SVG parts: a chip per process group where its memory (else its CPUs)
    is, with lines to its GPUs; red dashes to a GPU on another node."""
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
                           cx + 9, cy + 15, escape(label), escape(tip)))
    return overlay
