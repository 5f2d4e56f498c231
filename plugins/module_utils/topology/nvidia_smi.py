# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Parsers for nvidia-smi output: the `topo -m` matrix and `--query-gpu` CSV.

Both return the partial dict every topology source returns (see
docs/facts.md): `gpus`, `links`, `numa_nodes`, `warnings`, `error`, always
all keys, explicit None for what the source does not say. They never raise:
text that cannot be read gives an empty partial and a warning that says
why; `error` is None unless the parser itself failed (a bug), and then
names the exception. Work is linear in the size of the text, values quoted
in warnings are cut (topology_reader.excerpt), and at most MAX_WARNINGS
warnings are kept.

`nvidia-smi topo -m` is read the way people paste it into bug reports:
tabs or spaces, indentation, NIC columns, a legend, `N/A` cells, and rows
damaged by copy and paste (`NODENODE`, `NIC8NIC9`, `PIX0-35`). Each row is
read from both ends: link cells from the left (as many as the header names
devices), affinity cells from the right.
"""

from __future__ import absolute_import, division, print_function

import csv
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import (
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import MAX_GPUS, is_link_class, normalize_bus_id, worse_link
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt

__metaclass__ = type

TOPO_COMMAND = "nvidia-smi topo -m"
QUERY_FIELDS = ("index", "uuid", "name", "pci.bus_id", "memory.total", "mig.mode.current")
QUERY_COMMAND = (
    "nvidia-smi --query-gpu=" + ",".join(QUERY_FIELDS) + " --format=csv,noheader,nounits"
)

# Device column names nvidia-smi prints: GPUs, NICs (new drivers name them
# NIC<n> with a legend, old ones print the RDMA device name itself).
_DEVICE = (r"GPU\d{1,6}|NIC\d{1,6}|mlx\d{1,6}_[a-z]*\d{1,6}|hfi\d{1,6}_\d{1,6}|bnxt_re\d{1,6}|irdma\d{1,6}"
           r"|qedr\d{1,6}|efa_?\d{1,6}")
_DEVICE_RE = re.compile(r"^(?:%s)$" % _DEVICE, re.ASCII)
_DEVICE_SCAN = re.compile(_DEVICE, re.ASCII)
_LABEL = re.compile(r"^(%s)" % _DEVICE, re.ASCII)
# One matrix cell, matched at the start of a (possibly merged) token.
_CELL_SCAN = re.compile(r"X|NV\d+|NODE|SYS|SOC|PHB|PXB|PIX|N/A", re.ASCII)
_CPULIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$", re.ASCII)
_AFFINITY_TITLES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
MAX_WARNINGS = 200  # a damaged 1,000-GPU matrix must not give a million
_UNSEEN = object()


def empty_partial(warnings=None, error=None):
    """The partial with nothing known."""
    return {"gpus": [], "links": {}, "numa_nodes": [], "warnings": list(warnings or []), "error": error}


def _bounded(warnings, what):
    """At most MAX_WARNINGS warnings, and a line saying how many were left out."""
    if len(warnings) <= MAX_WARNINGS:
        return warnings
    return warnings[:MAX_WARNINGS] + ["%s: %d more warnings not shown" % (what, len(warnings) - MAX_WARNINGS)]


def _link_value(cell):
    """A matrix cell as a link class (SOC is what drivers before ~2017
    called SYS), or None when it is not one."""
    cell = "SYS" if cell == "SOC" else cell
    return cell if is_link_class(cell) and not cell.startswith("XGMI") else None


def new_gpu(index=None):
    """A GPU entry of the partial with every field present and unknown."""
    return {
        "index": index,
        "pci_bus_id": None,
        "uuid": None,
        "name": None,
        "memory_mb": None,
        "numa_node": None,
        "local_cpus": None,
        "mig_mode": None,
        "pcie": None,
        "vendor": "nvidia",
        "memory_numa_node": None,
    }


def _split_devices(token):
    """Split a header token into device names ("NIC8NIC9" -> two); None if
    the token is not made of device names."""
    if _DEVICE_RE.match(token):
        return [token]
    found = _DEVICE_SCAN.findall(token)
    if found and "".join(found) == token:
        return found
    return None


def _header_devices(line):
    """Device names of a header line, or None when the line is no header."""
    cut = len(line)
    for title in _AFFINITY_TITLES:
        pos = line.find(title)
        if pos != -1:
            cut = min(cut, pos)
    names = []
    for token in line[:cut].split():
        parts = _split_devices(token)
        if parts is None:
            return None
        names.extend(parts)
    if not names or not names[0].startswith("GPU"):
        return None
    return names


def _split_label(line):
    """Return (label, rest) when the line is a matrix row, else (None, None)."""
    stripped = line.strip()
    match = _LABEL.match(stripped)
    if not match:
        return None, None
    label = match.group(1)
    rest = stripped[match.end():]
    # "GPU10" must not read as GPU1 + "0": the label ends at whitespace or
    # where a cell begins.
    if rest and not rest[0].isspace() and not _CELL_SCAN.match(rest):
        return None, None
    if rest.lstrip().startswith(":"):
        return None, None  # a NIC legend line ("NIC0: mlx5_0")
    return label, rest


def _split_nv_from_cpulist(cell, rest):
    """"NV180-47,96-143" is NV18 followed by CPU affinity 0-47,96-143: give
    back the digits the greedy match took, as few as make a valid cpulist."""
    digits = cell[2:]
    # NV<n> has at most three digits: the search stays short on long tokens.
    for keep in range(min(len(digits) - 1, 3), 0, -1):
        candidate = digits[keep:] + rest
        if _CPULIST.match(candidate):
            try:
                parse_cpulist(candidate)
            except ValueError:
                continue
            return "NV" + digits[:keep], candidate
    return cell, rest


def _read_cells(tokens, count, whole=None):
    """Take up to `count` link cells from the left of `tokens`, splitting
    merged tokens; return (cells, remaining tokens). whole: a dict the
    caller keeps, token -> whether it is exactly one cell."""
    if whole is not None and len(tokens) >= count:
        # The common case, a clean row: each of the first `count` tokens
        # is one cell (checked once per distinct token).
        for token in tokens[:count]:
            known = whole.get(token)
            if known is None:
                match = _CELL_SCAN.match(token)
                known = whole[token] = bool(match) and match.end() == len(token)
            if not known:
                break
        else:
            return tokens[:count], tokens[count:]
    cells = []
    at, pos = 0, 0  # token index, position in that token: no copies
    tokens = list(tokens)
    while at < len(tokens) and len(cells) < count:
        token = tokens[at]
        match = _CELL_SCAN.match(token, pos)
        if not match:
            break
        cell, pos = match.group(0), match.end()
        if cell.startswith("NV") and token[pos:pos + 1] in ("-", ",") and len(cells) + 1 == count:
            cell, rest = _split_nv_from_cpulist(cell, token[pos:])
            tokens[at], pos = rest, 0
        cells.append(cell)
        if pos >= len(tokens[at]):
            at, pos = at + 1, 0
    remaining = tokens[at:]
    if remaining and pos:
        remaining[0] = remaining[0][pos:]
    return cells, remaining


def _affinity_tokens(tokens):
    """Split merged affinity tokens such as "0N/A" or "1N/A"."""
    out = []
    for token in tokens:
        parts = re.findall(r"N/A|[\d,\-]+|[^\d,\-N]+|N", token)
        out.extend(p for p in parts if p)
    return out


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


def _gave_up(what, exc):
    error = "%s: %s" % (type(exc).__name__, excerpt(str(exc), quote=False))
    return empty_partial(["%s: could not be read (%s)" % (what, error)], error=error)


def parse_topo_matrix(text):
    """Parse `nvidia-smi topo -m` output into a partial. Never raises."""
    try:
        partial = _parse_topo_matrix(text)
    except Exception as exc:  # pylint: disable=broad-except
        # A parser bug must not take the fact module down: report and go on.
        return _gave_up("nvidia-smi topo -m", exc)
    partial["warnings"] = _bounded(partial["warnings"], "nvidia-smi topo -m")
    return partial


def _parse_topo_matrix(text):
    if not isinstance(text, str):
        return empty_partial(["nvidia-smi topo -m: no text to read (got %s)" % type(text).__name__])
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    header_at = None
    devices = None
    for number, line in enumerate(lines):
        devices = _header_devices(line)
        if devices:
            header_at = number
            break
    if header_at is None:
        return empty_partial(["nvidia-smi topo -m: no header row with GPU columns found"])
    if sum(1 for d in devices if d.startswith("GPU")) > MAX_GPUS:
        return empty_partial(["nvidia-smi topo -m: the header names more than %d GPUs; not read" % MAX_GPUS])
    warnings = []
    # "GPU00" (a damaged paste) is GPU 0: one spelling per index, so that
    # links and GPUs are keyed alike.
    devices = ["GPU%d" % int(d[3:]) if d.startswith("GPU") else d for d in devices]
    header = lines[header_at]
    titles = [t for t in _AFFINITY_TITLES if t in header]
    column = {}
    for position, name in enumerate(devices):
        column.setdefault(name, position)
    if len(column) != len(devices):
        warnings.append("nvidia-smi topo -m: repeated column names in the header")
    nic_names = {}
    rows = {}
    whole = {}
    for line in lines[header_at + 1:]:
        legend = _NIC_LEGEND.match(line)
        if legend:
            nic_names[legend.group(1)] = legend.group(2)
            continue
        label, rest = _split_label(line)
        if label is not None and label.startswith("GPU") and label[3:].isdigit():
            label = "GPU%d" % int(label[3:])
        if label is None or label not in column or label in rows:
            continue
        cells, remaining = _read_cells(rest.split(), len(devices), whole)
        if len(cells) != len(devices):
            warnings.append(
                "nvidia-smi topo -m: row %s has %d of %d link cells; its links were not read"
                % (label, len(cells), len(devices))
            )
            cells = None
        elif cells[column[label]] != "X":
            warnings.append(
                "nvidia-smi topo -m: row %s has no X on the diagonal; its links were not read" % label
            )
            cells = None
        rows[label] = (cells, _affinity_tokens(remaining))

    partial = empty_partial()
    gpu_labels = [d for d in devices if d.startswith("GPU")]
    node_cpus = {}
    for label in gpu_labels:
        gpu = new_gpu(int(label[3:]))
        if label not in rows:
            warnings.append("nvidia-smi topo -m: no row for %s" % label)
            partial["gpus"].append(gpu)
            continue
        affinity = rows[label][1]
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
        cpu_text = values.get("CPU Affinity")
        if cpu_text is not None and not (cpu_text == "N/A" or _CPULIST.match(cpu_text)):
            warnings.append("%s: unreadable CPU Affinity %s" % (label, excerpt(cpu_text)))
            cpu_text = None
        gpu["local_cpus"] = _cpus_of(cpu_text, label, warnings)
        gpu["numa_node"] = _numa_of(values.get("NUMA Affinity"), label, warnings)
        # "GPU NUMA ID" is the GPU's own memory node (Grace Hopper/Blackwell:
        # a NUMA node without CPUs), not CPU locality: kept apart.
        gpu["memory_numa_node"] = _gpu_numa_id(values.get("GPU NUMA ID"), label, warnings)
        if gpu["numa_node"] is not None and gpu["local_cpus"]:
            node_cpus.setdefault(gpu["numa_node"], set()).update(parse_cpulist(gpu["local_cpus"]))
        partial["gpus"].append(gpu)

    # Each row's own cells first, then the two directions of every pair
    # reconciled (a damaged matrix may disagree: the worse wins, with a
    # warning). Two passes over the cells, a dict lookup each.
    value_of = {}  # cell -> link class or None, computed once per distinct cell
    gpu_columns = [(b, column[b]) for b in gpu_labels]
    direct = {}
    order = dict((label, i) for i, label in enumerate(gpu_labels))
    for a in gpu_labels:
        cells = rows.get(a, (None, None))[0]
        if cells is None:
            continue
        row = direct[a] = {}
        for b, position in gpu_columns:
            cell = cells[position]
            value = value_of.get(cell, _UNSEEN)
            if value is _UNSEEN:
                value = value_of[cell] = _link_value(cell)
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
    partial["links"] = links
    partial["numa_nodes"] = [
        {"id": node, "cpus": format_cpulist(cpus)} for node, cpus in sorted(node_cpus.items())
    ]
    nics = []
    for label in devices:
        if label.startswith("GPU"):
            continue
        entry = {"name": label, "device": nic_names.get(label, None if label.startswith("NIC") else label), "links": {}}
        for gpu_label in gpu_labels:
            cells = rows.get(gpu_label, (None, None))[0]
            value = None if cells is None else _link_value(cells[column[label]])
            if value is not None:
                entry["links"][gpu_label] = value
        nics.append(entry)
    partial["nics"] = nics
    partial["warnings"] = warnings
    return partial


def _query_int(text):
    match = re.match(r"^\s*(\d{1,18})(?!\d)", text or "", re.ASCII)
    return int(match.group(1)) if match else None


def parse_query_gpu(text):
    """Parse the CSV of QUERY_COMMAND into a partial. Never raises."""
    try:
        partial = _parse_query_gpu(text)
    except Exception as exc:  # pylint: disable=broad-except
        return _gave_up("nvidia-smi --query-gpu", exc)
    partial["warnings"] = _bounded(partial["warnings"], "nvidia-smi --query-gpu")
    return partial


def _parse_query_gpu(text):
    if not isinstance(text, str):
        return empty_partial(["nvidia-smi --query-gpu: no text to read (got %s)" % type(text).__name__])
    partial = empty_partial()
    warnings = partial["warnings"]
    rows = [r for r in csv.reader(text.splitlines(), skipinitialspace=True) if r and any(c.strip() for c in r)]
    for number, row in enumerate(rows, 1):
        row = [c.strip() for c in row]
        if row[0].lower() == "index":
            continue  # a header line (run without noheader)
        if len(row) != len(QUERY_FIELDS):
            warnings.append(
                "nvidia-smi --query-gpu: line %d has %d fields, expected %d: %s"
                % (number, len(row), len(QUERY_FIELDS), excerpt(", ".join(row)))
            )
            continue
        index, uuid, name, bus_id, memory, mig = row
        if not re.match(r"^\d{1,6}$", index, re.ASCII):
            warnings.append("nvidia-smi --query-gpu: line %d: index %s is not a number" % (number, excerpt(index)))
            continue
        if len(partial["gpus"]) >= MAX_GPUS:
            warnings.append("nvidia-smi --query-gpu: more than %d GPUs; the rest is not read" % MAX_GPUS)
            break
        gpu = new_gpu(int(index))
        gpu["uuid"] = uuid if uuid.startswith(("GPU-", "MIG-")) else None
        gpu["name"] = name or None
        try:
            gpu["pci_bus_id"] = normalize_bus_id(bus_id)
        except ValueError:
            warnings.append("nvidia-smi --query-gpu: GPU %s: bus id %s not readable" % (index, excerpt(bus_id)))
        gpu["memory_mb"] = _query_int(memory)
        mig = mig.lower()
        gpu["mig_mode"] = mig if mig in ("enabled", "disabled") else None
        partial["gpus"].append(gpu)
    if not partial["gpus"] and not warnings:
        warnings.append("nvidia-smi --query-gpu: no GPU lines")
    return partial
