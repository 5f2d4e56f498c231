# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The parser of `nvidia-smi topo -m`: the link matrix between GPUs (and
NICs) and each GPU's CPU and NUMA affinity, as a partial (partial.py) plus
`nics`, the NIC columns. Never raises (a parser bug is named in `error`);
linear in the text; values in warnings cut; at most MAX_WARNINGS kept.

The matrix is read the way people paste it into bug reports: tabs or
spaces, indentation, NIC columns, a legend, `N/A` cells, and rows damaged
by copy and paste (`NODENODE`, `NIC8NIC9`, `PIX0-35`). Each row is read
from both ends: link cells from the left (as many as the header names
devices), affinity cells from the right. Standard library only.
"""

from __future__ import annotations

import re
from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import MAX_GPUS, worse_link
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi_cells import (
    AFFINITY_TITLES,
    CPULIST,
    affinity_tokens,
    header_devices,
    link_value,
    read_cells,
    split_label,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.partial import (
    bounded_warnings,
    empty_partial,
    gave_up,
    new_gpu,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt

TOPO_COMMAND = "nvidia-smi topo -m"

_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_UNSEEN = object()

# The header: the line it is on, the device names of its columns (GPUs
# spelled GPU<index>), the affinity titles it has, in order.
Header = namedtuple("Header", "line devices titles")
# One GPU or NIC row: its link cells (None when they could not be read)
# and the affinity tokens after them.
MatrixRow = namedtuple("MatrixRow", "cells affinity")
_NO_ROW = MatrixRow(None, None)


def _numa_of(text, label, warnings):
    """NUMA Affinity cell -> (node or None)."""
    if text is None:
        return None
    if text == "N/A":
        warnings.append("%s: NUMA Affinity is N/A; NUMA node unknown" % label)
        return None
    try:
        nodes = parse_cpulist(text)
    except ValueError:
        warnings.append("%s: unreadable NUMA Affinity %s" % (label, excerpt(text)))
        return None
    if len(nodes) == 1:
        return nodes[0]
    if len(nodes) > 1:
        warnings.append(
            "%s: NUMA Affinity %s names several nodes; NUMA node unknown" % (label, excerpt(text))
        )
    return None


def _gpu_numa_id(text, label, warnings):
    """GPU NUMA ID cell -> the GPU's memory node, or None (N/A on GPUs whose memory is no NUMA node)."""
    if text is None or text == "N/A":
        return None
    if text.isascii() and text.isdigit() and len(text) <= 9:
        return int(text)
    warnings.append("%s: unreadable GPU NUMA ID %s" % (label, excerpt(text)))
    return None


def _cpus_of(text, label, warnings):
    """CPU Affinity cell -> cpulist string or None."""
    if text is None or text == "N/A":
        return None
    try:
        cpus = parse_cpulist(text)
    except ValueError as exc:
        warnings.append("%s: unreadable CPU Affinity (%s)" % (label, exc))
        return None
    return format_cpulist(cpus) if cpus else None


def parse_topo_matrix(text):
    """Parse `nvidia-smi topo -m` output into a partial. Never raises."""
    try:
        partial = _parse_topo_matrix(text)
    except Exception as exc:  # pylint: disable=broad-except
        # A parser bug must not take the fact module down: report and go on.
        return gave_up(TOPO_COMMAND, exc)
    partial["warnings"] = bounded_warnings(partial["warnings"], TOPO_COMMAND)
    return partial


def _find_header(lines):
    """The Header of the matrix, or None when no line is one."""
    for number, line in enumerate(lines):
        devices = header_devices(line)
        if devices:
            # "GPU00" (a damaged paste) is GPU 0: one spelling per index, so
            # that links and GPUs are keyed alike.
            devices = ["GPU%d" % int(d[3:]) if d.startswith("GPU") else d for d in devices]
            return Header(number, devices, [t for t in AFFINITY_TITLES if t in line])
    return None


def _read_rows(lines, header, column, warnings):
    """({label: MatrixRow}, {NIC<n>: device name from the legend}) of the lines below the header."""
    nic_names = {}
    rows = {}
    whole = {}
    count = len(header.devices)
    for line in lines[header.line + 1:]:
        legend = _NIC_LEGEND.match(line)
        if legend:
            nic_names[legend.group(1)] = legend.group(2)
            continue
        label, rest = split_label(line)
        if label is not None and label.startswith("GPU") and label[3:].isdigit():
            label = "GPU%d" % int(label[3:])
        if label is None or label not in column or label in rows:
            continue
        cells, remaining = read_cells(rest.split(), count, whole)
        if len(cells) != count:
            warnings.append(
                "nvidia-smi topo -m: row %s has %d of %d link cells; its links were not read"
                % (label, len(cells), count)
            )
            cells = None
        elif cells[column[label]] != "X":
            warnings.append(
                "nvidia-smi topo -m: row %s has no X on the diagonal; its links were not read" % label
            )
            cells = None
        rows[label] = MatrixRow(cells, affinity_tokens(remaining))
    return rows, nic_names


def _affinity_values(label, affinity, titles, warnings):
    """{title: cell text or None} of a GPU row's affinity tokens."""
    values = dict.fromkeys(titles)
    if len(affinity) > len(titles):
        warnings.append(
            "nvidia-smi topo -m: row %s has unexpected cells %s"
            % (label, excerpt(" ".join(affinity[: len(affinity) - len(titles)]), quote=False))
        )
        affinity = affinity[len(affinity) - len(titles):]
    # Cells are filled from the left: an empty cell (lost in the paste)
    # is a missing one at the end, and GPU NUMA ID is the least needed.
    for title, value in zip(titles, affinity):
        values[title] = value
    if len(affinity) < len(titles) and titles:
        warnings.append(
            "nvidia-smi topo -m: row %s has %d of %d affinity cells"
            % (label, len(affinity), len(titles))
        )
    return values


def _gpu_entry(label, row, titles, warnings):
    """The partial's GPU of a row label (its affinity read from row, when there is one)."""
    gpu = new_gpu(int(label[3:]))
    if row is None:
        warnings.append("nvidia-smi topo -m: no row for %s" % label)
        return gpu
    values = _affinity_values(label, row.affinity, titles, warnings)
    cpu_text = values.get("CPU Affinity")
    if cpu_text is not None and not (cpu_text == "N/A" or CPULIST.match(cpu_text)):
        warnings.append("%s: unreadable CPU Affinity %s" % (label, excerpt(cpu_text)))
        cpu_text = None
    gpu["local_cpus"] = _cpus_of(cpu_text, label, warnings)
    gpu["numa_node"] = _numa_of(values.get("NUMA Affinity"), label, warnings)
    # "GPU NUMA ID" is the GPU's own memory node (Grace Hopper/Blackwell:
    # a NUMA node without CPUs), not CPU locality: kept apart.
    gpu["memory_numa_node"] = _gpu_numa_id(values.get("GPU NUMA ID"), label, warnings)
    return gpu


def _gpu_links(gpu_labels, column, rows, warnings):
    """{GPU label: {GPU label: link class}} of the GPU rows.

    Each row's own cells first, then the two directions of every pair
    reconciled (a damaged matrix may disagree: the worse wins, with a
    warning). Two passes over the cells, a dict lookup each."""
    value_of = {}  # cell -> link class or None, computed once per distinct cell
    gpu_columns = [(b, column[b]) for b in gpu_labels]
    direct = {}
    order = dict((label, i) for i, label in enumerate(gpu_labels))
    for a in gpu_labels:
        cells = rows.get(a, _NO_ROW).cells
        if cells is None:
            continue
        row = direct[a] = {}
        for b, position in gpu_columns:
            cell = cells[position]
            value = value_of.get(cell, _UNSEEN)
            if value is _UNSEEN:
                value = value_of[cell] = link_value(cell)
            if value is not None:
                row[b] = value
            elif b != a and cell != "N/A":
                warnings.append("nvidia-smi topo -m: %s-%s has cell %s" % (a, b, excerpt(cell)))
        row.pop(a, None)
    links = dict((a, dict(row)) for a, row in direct.items() if row)
    for a, row in direct.items():
        for b, value in row.items():
            back = links.get(b)
            if back is None:
                back = links[b] = {}
            old = back.get(a)
            if old is None:
                back[a] = value
            elif old != value:
                back[a] = worse_link(old, value)
                if order[b] < order[a]:  # once per pair, from the later row
                    warnings.append(
                        "nvidia-smi topo -m: %s-%s reads %s one way and %s the other; using the worse"
                        % (a, b, value, old)
                    )
    return links


def _matrix_nics(devices, gpu_labels, column, rows, nic_names):
    """[{name, device, links}] of the NIC columns: each GPU row's cell in that column."""
    nics = []
    for label in devices:
        if label.startswith("GPU"):
            continue
        entry = {"name": label, "device": nic_names.get(label, None if label.startswith("NIC") else label), "links": {}}
        for gpu_label in gpu_labels:
            cells = rows.get(gpu_label, _NO_ROW).cells
            value = None if cells is None else link_value(cells[column[label]])
            if value is not None:
                entry["links"][gpu_label] = value
        nics.append(entry)
    return nics


def _parse_topo_matrix(text):
    if not isinstance(text, str):
        return empty_partial(["nvidia-smi topo -m: no text to read (got %s)" % type(text).__name__])
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    header = _find_header(lines)
    if header is None:
        return empty_partial(["nvidia-smi topo -m: no header row with GPU columns found"])
    if sum(1 for d in header.devices if d.startswith("GPU")) > MAX_GPUS:
        return empty_partial(["nvidia-smi topo -m: the header names more than %d GPUs; not read" % MAX_GPUS])
    warnings = []
    column = {}
    for position, name in enumerate(header.devices):
        column.setdefault(name, position)
    if len(column) != len(header.devices):
        warnings.append("nvidia-smi topo -m: repeated column names in the header")
    rows, nic_names = _read_rows(lines, header, column, warnings)

    partial = empty_partial()
    gpu_labels = [d for d in header.devices if d.startswith("GPU")]
    node_cpus = {}
    for label in gpu_labels:
        gpu = _gpu_entry(label, rows.get(label), header.titles, warnings)
        if gpu["numa_node"] is not None and gpu["local_cpus"]:
            node_cpus.setdefault(gpu["numa_node"], set()).update(parse_cpulist(gpu["local_cpus"]))
        partial["gpus"].append(gpu)
    partial["links"] = _gpu_links(gpu_labels, column, rows, warnings)
    partial["numa_nodes"] = [
        {"id": node, "cpus": format_cpulist(cpus)} for node, cpus in sorted(node_cpus.items())
    ]
    partial["nics"] = _matrix_nics(header.devices, gpu_labels, column, rows, nic_names)
    partial["warnings"] = warnings
    return partial
