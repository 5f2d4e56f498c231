# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The tokens of `nvidia-smi topo -m` (nvidia_smi_topo.py reads the matrix
from them): device names of the header, a row's label, its link cells
(merged tokens such as `NODENODE` or `NV180-47` split) and its affinity
tokens. Pure functions of text, linear in it. Standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import is_link_class

# Device column names nvidia-smi prints: GPUs, NICs (new drivers name them
# NIC<n> with a legend, old ones print the RDMA device name itself).
_DEVICE = (r"GPU\d{1,6}|NIC\d{1,6}|mlx\d{1,6}_[a-z]*\d{1,6}|hfi\d{1,6}_\d{1,6}|bnxt_re\d{1,6}|irdma\d{1,6}"
           r"|qedr\d{1,6}|efa_?\d{1,6}")
_DEVICE_RE = re.compile(r"^(?:%s)$" % _DEVICE, re.ASCII)
_DEVICE_SCAN = re.compile(_DEVICE, re.ASCII)
_LABEL = re.compile(r"^(%s)" % _DEVICE, re.ASCII)
# One matrix cell, matched at the start of a (possibly merged) token.
_CELL_SCAN = re.compile(r"X|NV\d+|NODE|SYS|SOC|PHB|PXB|PIX|N/A", re.ASCII)
CPULIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$", re.ASCII)
AFFINITY_TITLES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def link_value(cell):
    """A matrix cell as a link class (SOC is what drivers before ~2017
    called SYS), or None when it is not one."""
    cell = "SYS" if cell == "SOC" else cell
    return cell if is_link_class(cell) and not cell.startswith("XGMI") else None


def _split_devices(token):
    """Split a header token into device names ("NIC8NIC9" -> two); None if
    the token is not made of device names."""
    if _DEVICE_RE.match(token):
        return [token]
    found = _DEVICE_SCAN.findall(token)
    if found and "".join(found) == token:
        return found
    return None


def header_devices(line):
    """Device names of a header line, or None when the line is no header."""
    cut = len(line)
    for title in AFFINITY_TITLES:
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


def split_label(line):
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
        if CPULIST.match(candidate):
            try:
                parse_cpulist(candidate)
            except ValueError:
                continue
            return "NV" + digits[:keep], candidate
    return cell, rest


def read_cells(tokens, count, whole=None):
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


def affinity_tokens(tokens):
    """Split merged affinity tokens such as "0N/A" or "1N/A"."""
    out = []
    for token in tokens:
        parts = re.findall(r"N/A|[\d,\-]+|[^\d,\-N]+|N", token)
        out.extend(p for p in parts if p)
    return out
