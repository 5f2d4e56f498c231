# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The parser of `nvidia-smi --query-gpu` CSV (QUERY_COMMAND): each GPU's
index, UUID, name, bus id, memory and MIG mode. `nvidia-smi topo -m` is
nvidia_smi_topo.py's.

It returns the partial dict every topology source returns (partial.py,
docs/facts.md) and never raises: text that cannot be read gives an empty
partial and a warning that says why; `error` is None unless the parser
itself failed (a bug), and then names the exception. Values quoted in
warnings are cut (topology_reader.excerpt), and at most
partial.MAX_WARNINGS warnings are kept. Standard library only (runs on
targets).
"""

from __future__ import annotations

import csv
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import MAX_GPUS, normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.partial import (
    bounded_warnings,
    empty_partial,
    gave_up,
    new_gpu,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt

QUERY_FIELDS = ("index", "uuid", "name", "pci.bus_id", "memory.total", "mig.mode.current")
QUERY_COMMAND = (
    "nvidia-smi --query-gpu=" + ",".join(QUERY_FIELDS) + " --format=csv,noheader,nounits"
)


def _query_int(text):
    match = re.match(r"^\s*(\d{1,18})(?!\d)", text or "", re.ASCII)
    return int(match.group(1)) if match else None


def parse_query_gpu(text):
    """Parse the CSV of QUERY_COMMAND into a partial. Never raises."""
    try:
        partial = _parse_query_gpu(text)
    except Exception as exc:  # pylint: disable=broad-except
        return gave_up("nvidia-smi --query-gpu", exc)
    partial["warnings"] = bounded_warnings(partial["warnings"], "nvidia-smi --query-gpu")
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
