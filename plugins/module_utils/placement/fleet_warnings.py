# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A plan's warnings: records with the host, the GPUs and the NUMA nodes they concern.

Inside placement a host's plan words each warning as a Note (its text, and
the GPU ids and NUMA nodes the text names, filled where the text is made);
the fleet names the host. The fleet_plan result (docs/plan.md) lists them
as records {host, text, gpus, nodes}: nothing reads a host, a GPU or a node
back out of the text. "HOST: text" is made only where a person reads the
warnings (format_warning).
"""

from __future__ import annotations

from typing import NamedTuple

WARNING_FIELDS = ("host", "text", "gpus", "nodes")


class Note(NamedTuple):
    """One warning of a host's plan, before the fleet names the host."""

    text: str
    gpus: tuple = ()  # GPU ids (the plan's "id") it concerns
    nodes: tuple = ()  # NUMA node ids it concerns


def note(warning):
    """A Note of a plain text (a warning naming no GPU or node) or of a Note."""
    return warning if isinstance(warning, Note) else Note(str(warning))


def host_warning(host, warning):
    """The plan's record of one warning of HOST (a Note or a plain text)."""
    warning = note(warning)
    return {"host": str(host), "text": warning.text, "gpus": list(warning.gpus),
            "nodes": sorted(set(warning.nodes))}


def host_warnings(host, warnings):
    """The records of a host's warnings, in order."""
    return [host_warning(host, w) for w in warnings]


def texts(warnings):
    """The texts of a host's Notes (socket_local_groups words them so: a host's own plan)."""
    return [note(w).text for w in warnings]


def by_host(warnings):
    """A sort key: a plan lists its warnings by host, each host's in its own order."""
    return sorted(warnings, key=lambda w: w["host"])


def format_warning(warning):
    """A warning record as a person reads it: "HOST: text"."""
    return "%s: %s" % (warning["host"], warning["text"])


def format_warnings(warnings):
    """format_warning of each record, in order."""
    return [format_warning(w) for w in warnings]
