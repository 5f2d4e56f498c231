# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What each box of an audited host's diagram (report_svg.py) says, and
how wide that text is: the diagram sizes every box from its label, so
that no label overprints another or leaves its box.

Pure functions; controller only.
"""

from __future__ import annotations

import html
import math

# Font sizes (px) of the report's CSS (report_html._CSS) for each kind of text.
FONT = {"socket-label": 12, "node-label": 12, "small": 11, "tiny": 9.5, "gpu": 11, "chip": 11}
# Text extents, estimated without a font: a conservative advance per
# character in em (system-ui sans, bold included, is narrower: digits
# about 0.56, lower case less), any other character as wide as a symbol.
CHAR_EM, WIDE_EM = 0.62, 1.1
TEXT_PAD = 6  # between a label and the edge of its box


def ceil_px(value):
    """VALUE (px) rounded up to a whole pixel."""
    return int(math.ceil(value))


def text_width(text, size):
    """The width, in px, reserved for TEXT at font SIZE."""
    return size * sum(CHAR_EM if ord(c) < 128 else WIDE_EM for c in text)


def escape(value):
    return html.escape("" if value is None else str(value), quote=True)


def _short_bus(gpu):
    bus = gpu.get("pci_bus_id")
    if not bus:
        return gpu["id"]
    return bus[5:] if bus.startswith("0000:") else bus


UNBOUND_LABEL = "not bound to a node:"


def socket_label(key):
    """The label of a socket's box; a NUMA node's own box names the node."""
    if key[0] == "socket":
        return "socket %s" % key[1]
    return "socket unknown" if key[0] == "node" else "NUMA node unknown"


def node_labels(nid, node):
    """(title, CPUs and memory) of a NUMA node's box."""
    title = "NUMA node %s" % nid if nid is not None else "GPUs without a NUMA node"
    cpus = node.get("cpus")
    mem = node.get("memory_mb")
    detail = "CPUs %s" % (cpus if cpus else ("none (memory only)" if cpus == "" else "unknown"))
    if mem:
        detail += " \u00b7 %d GiB" % round(mem / 1024.0)
    return title, detail


def gpu_labels(gpu):
    """(index, bus id) written in a GPU's box."""
    return ("GPU %s" % gpu["index"] if gpu.get("index") is not None else "GPU"), _short_bus(gpu)


def nic_label(nic):
    return "NIC " + str((nic.get("interfaces") or [nic["id"]])[0])


def chip_label(group):
    mark = "\u26a0 " if group.get("misplaced") else ""
    label = "%s%s %s" % (mark, group["name"][:9], group["leader"])
    if len(group["pids"]) > 1:
        label += " +%d" % (len(group["pids"]) - 1)
    return label
