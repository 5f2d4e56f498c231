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

from ansible_collections.gpufleet.numa.plugins.module_utils.audit.report_labels import (
    FONT, TEXT_PAD, UNBOUND_LABEL, chip_label, escape, gpu_labels, nic_label, node_labels, socket_label, text_width, ceil_px)
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

# The smallest boxes; a box grows to hold its label.
GPU_W, GPU_H, GAP = 58, 42, 8
CHIP_W, CHIP_H = 140, 22
CHIP_GAP = 40  # room between a process chip and the GPU row for its lines
NIC_W, NIC_H = 66, 18
PAD = 10
HEADER_H = 40  # a NUMA node's name and its CPUs
INST_H = 14    # the planned instance's name above a GPU
NODE_MIN_W = 250
UNBOUND_H = 16  # the "not bound to a node:" line above the chips of processes bound to no node


def _link_style(cls):
    cls = str(cls or "")
    for prefix in ("XGMI", "NV"):
        if cls.startswith(prefix):
            return LINK_STYLES[prefix]
    return LINK_STYLES.get(cls)


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

    def _measure(self):
        """Each label's text, and the box widths (whole px) that hold them."""
        self.gpu_w = max([GPU_W] + [ceil_px(2 * TEXT_PAD + text_width(t, FONT["gpu"] if i == 0 else FONT["tiny"]))
                                    for g in self.gpus for i, t in enumerate(gpu_labels(g))])
        self.inst_label = {}
        for gpu in self.gpus:
            inst = self.planned.get(gpu.get("pci_bus_id")) or self.planned.get(gpu["id"])
            if inst:
                self.inst_label[gpu["id"]] = str(inst["name"])
        inst_w = max([0] + [ceil_px(2 * 2 + text_width(t, FONT["tiny"])) for t in self.inst_label.values()])
        self.gpu_step = max(self.gpu_w, inst_w) + GAP
        self.nic_w = dict((n["id"], max(NIC_W, ceil_px(2 * 4 + text_width(nic_label(n), FONT["tiny"])))) for n in self.nics)
        self.chip_w = dict((g["key"], max(CHIP_W, ceil_px(2 * 9 + text_width(chip_label(g), FONT["chip"]))))
                           for g in self.groups)

    def _place(self):
        self._measure()
        self.pos = {}       # gpu id -> (x, y)
        self.nic_pos = {}
        self.chip_pos = {}
        self.boxes = []     # (kind, x, y, w, h, key)
        x = PAD
        top = PAD + (UNBOUND_H + CHIP_H + PAD if self.unbound else 0)
        node_h = 0
        for dummy_key, nids in self.sockets:
            for nid in nids:
                gpus, nics, chips = self._node_items(nid)
                rows = HEADER_H + (NIC_H + GAP if nics else 0) + (CHIP_H + CHIP_GAP if chips else 0) + (
                    INST_H if self.inst_label else 0) + GPU_H + PAD
                node_h = max(node_h, rows)
        socket_h = node_h + 2 * PAD + 18
        for key, nids in self.sockets:
            sx = x
            x += PAD
            for nid in nids:
                gpus, nics, chips = self._node_items(nid)
                title, detail = node_labels(nid, self.nodes.get(nid) or {})
                width = max(NODE_MIN_W, ceil_px(2 * TEXT_PAD + text_width(title, FONT["node-label"])),
                            ceil_px(2 * TEXT_PAD + text_width(detail, FONT["small"])),
                            len(gpus) * self.gpu_step + GAP, sum(self.chip_w[g["key"]] + GAP for g in chips) + GAP,
                            sum(self.nic_w[n["id"]] + GAP for n in nics) + GAP)
                ny = top + 18 + PAD
                self.boxes.append(("node", x, ny, width, node_h, nid))
                row = ny + HEADER_H
                if nics:
                    nx = x + GAP
                    for nic in nics:
                        self.nic_pos[nic["id"]] = (nx, row)
                        nx += self.nic_w[nic["id"]] + GAP
                    row += NIC_H + GAP
                if chips:
                    cx = x + GAP
                    for group in chips:
                        self.chip_pos[group["key"]] = (cx, row + GAP)
                        cx += self.chip_w[group["key"]] + GAP
                gy = ny + node_h - PAD - GPU_H
                for i, gpu in enumerate(gpus):
                    self.pos[gpu["id"]] = (x + GAP + i * self.gpu_step, gy)
                x += width + PAD
            x = max(x, sx + ceil_px(2 * 8 + text_width(socket_label(key), FONT["socket-label"])))
            self.boxes.append(("socket", sx, top, x - sx, socket_h, key))
            x += PAD
        ux = PAD
        for group in self.unbound:
            self.chip_pos[group["key"]] = (ux, PAD + UNBOUND_H)
            ux += self.chip_w[group["key"]] + GAP
        self.width = max(x, ux + PAD, ceil_px(2 * PAD + text_width(UNBOUND_LABEL, FONT["small"])) if self.unbound else 0)
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
    links, height, links_width = _svg_links(layout)
    body = _svg_boxes(layout) + _svg_gpus(layout)
    if layout.unbound:
        body.append('<text x="%d" y="%d" class="small">%s</text>' % (PAD, PAD + 11, UNBOUND_LABEL))
    width = ceil_px(max(layout.width, links_width)) + PAD
    return ('<svg xmlns="http://www.w3.org/2000/svg" class="host-diagram" viewBox="0 0 %d %d" width="%d" height="%d" '
            'role="img" aria-label="%s">%s%s%s</svg>' % (
                width, height, width, height, escape("topology of %s" % result["host"]), "".join(body), "".join(links),
                "".join(_svg_chips(layout))))


def _svg_links(layout):
    """(SVG parts, diagram height, width its label needs): the links band
    below the sockets, arcs by class, or one bar for a switch fabric that
    joins every GPU pair."""
    fabric, drawn = _links_to_draw(layout)
    parts = []
    band = 0
    width = 0
    gpu_w = layout.gpu_w
    base = layout.links_top
    for a, b, cls, same in drawn:
        ax = layout.pos[a][0] + gpu_w / 2.0
        bx = layout.pos[b][0] + gpu_w / 2.0
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
            min(xs), base + 4, max(xs) + gpu_w - min(xs), colour, escape("every GPU pair: %s (switch fabric)" % fabric)))
        label = "%s fabric: every GPU pair" % fabric
        parts.append('<text x="%d" y="%d" class="small">%s</text>' % (min(xs), base + 28, escape(label)))
        height = max(height, base + 36)
        width = min(xs) + text_width(label, FONT["small"])
    return parts, height, width


def _svg_boxes(layout):
    """SVG parts: socket and NUMA node boxes with their labels, and NICs."""
    body = []
    for kind, x, y, w, h, key in [b for b in layout.boxes if b[0] == "socket"]:
        label = socket_label(key)
        body.append('<rect class="socket" x="%d" y="%d" width="%d" height="%d" rx="8"/>' % (x, y, w, h))
        body.append('<text x="%d" y="%d" class="socket-label">%s</text>' % (x + 8, y + 15, escape(label)))
    for kind, x, y, w, h, nid in [b for b in layout.boxes if b[0] == "node"]:
        title, detail = node_labels(nid, layout.nodes.get(nid) or {})
        body.append('<rect class="node" x="%d" y="%d" width="%d" height="%d" rx="6"/>' % (x, y, w, h))
        body.append('<text x="%d" y="%d" class="node-label">%s</text>' % (x + TEXT_PAD, y + 14, escape(title)))
        body.append('<text x="%d" y="%d" class="small">%s</text>' % (x + TEXT_PAD, y + 31, escape(detail)))
    for nic in layout.nics:
        if nic["id"] not in layout.nic_pos:
            continue
        x, y = layout.nic_pos[nic["id"]]
        body.append('<g class="nic"><rect x="%d" y="%d" width="%d" height="%d" rx="3"/><text x="%d" y="%d" class="tiny">%s</text>'
                    '<title>%s</title></g>' % (x, y, layout.nic_w[nic["id"]], NIC_H, x + 4, y + 12,
                                               escape(nic_label(nic)),
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
        index, bus = gpu_labels(gpu)
        tip = "%s %s %s" % (index, gpu.get("pci_bus_id") or gpu["id"], gpu.get("name") or "")
        if group:
            tip += "\nheld by %s (pids %s)" % (group["name"], ",".join(str(p) for p in group["pids"]))
        if inst:
            tip += "\nplanned: %s (%s)" % (inst["name"], instance_state_text(inst))
        text_class = "gpu-text on" if group else "gpu-text"
        body.append('<g class="gpu"><rect x="%d" y="%d" width="%d" height="%d" rx="4" fill="%s" stroke="%s" stroke-width="%s"%s/>'
                    '<text x="%d" y="%d" class="%s">%s</text><text x="%d" y="%d" class="tiny %s">%s</text>'
                    '<title>%s</title></g>' % (
                        x, y, layout.gpu_w, GPU_H, fill, stroke, 3 if group and group.get("misplaced") else 1.2, dash,
                        x + TEXT_PAD, y + 16, text_class, escape(index), x + TEXT_PAD, y + 30, text_class, escape(bus),
                        escape(tip)))
        if gpu["id"] in layout.inst_label:
            body.append('<text x="%d" y="%d" class="tiny inst">%s</text>' % (x + 2, y - 4, escape(layout.inst_label[gpu["id"]])))
    return body


def _svg_chips(layout):
    """SVG parts: a chip per process group where its memory (else its CPUs)
    is, with lines to its GPUs; red dashes to a GPU on another node."""
    overlay = []
    for group in layout.groups:
        if group["key"] not in layout.chip_pos:
            continue
        cx, cy = layout.chip_pos[group["key"]]
        chip_w = layout.chip_w[group["key"]]
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
                cx + chip_w / 2.0, cy + CHIP_H, gx + layout.gpu_w / 2.0, gy, stroke,
                2.2 if far else 1.4, ' stroke-dasharray="5 3"' if far or home is None else ""))
        label = chip_label(group)
        tip = "%s pids %s; GPUs %s; CPUs on nodes %s; memory mostly on node %s%s" % (
            group["name"], ",".join(str(p) for p in group["pids"]), ", ".join(group.get("gpus") or []),
            ",".join(str(n) for n in group.get("cpu_nodes") or []) or "?",
            group.get("memory_node") if group.get("memory_node") is not None else "?",
            "; instance %s" % group["instance"] if group.get("instance") else "")
        overlay.append('<g class="chip%s"><rect x="%d" y="%d" width="%d" height="%d" rx="11" fill="%s" stroke="%s" stroke-width="%s"/>'
                       '<text x="%d" y="%d" class="chip-text">%s</text><title>%s</title></g>' % (
                           " misplaced" if group.get("misplaced") else "", cx, cy, chip_w, CHIP_H, colour,
                           MISPLACED if group.get("misplaced") else "#37474f", 3 if group.get("misplaced") else 1,
                           cx + 9, cy + 15, escape(label), escape(tip)))
    return overlay
