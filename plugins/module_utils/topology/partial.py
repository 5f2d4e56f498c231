# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The partial dict every GPU source parser returns (docs/facts.md).

`gpus`, `links`, `numa_nodes`, `warnings`, `error`: always all keys,
explicit None for what the source does not say. The NVML and nvidia-smi
parsers build theirs from these; assemble.py merges them. Standard library
only (runs on targets).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import excerpt

MAX_WARNINGS = 200  # a damaged 1,000-GPU matrix must not give a million


def empty_partial(warnings=None, error=None):
    """The partial with nothing known."""
    return {"gpus": [], "links": {}, "numa_nodes": [], "warnings": list(warnings or []), "error": error}


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


def bounded_warnings(warnings, what):
    """At most MAX_WARNINGS warnings, and a line saying how many were left out."""
    if len(warnings) <= MAX_WARNINGS:
        return warnings
    return warnings[:MAX_WARNINGS] + ["%s: %d more warnings not shown" % (what, len(warnings) - MAX_WARNINGS)]


def gave_up(what, exc):
    """The partial of a parser that failed (a bug): empty, the exception named in `error` and a warning."""
    error = "%s: %s" % (type(exc).__name__, excerpt(str(exc), quote=False))
    return empty_partial(["%s: could not be read (%s)" % (what, error)], error=error)
