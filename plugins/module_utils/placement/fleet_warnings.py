# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A fleet plan's warnings: carried as (host, text) inside the planner, formatted once at its edge.

The fleet_plan result (docs/plan.md) lists them as "HOST: text" strings;
inside placement a warning is a HostWarning, so nothing in the planner
reads a host back out of a string.
"""

from __future__ import annotations

from typing import NamedTuple


class HostWarning(NamedTuple):
    host: str
    text: str  # the warning as the host's own plan words it


def format_warnings(warnings):
    """The fleet_plan result's warnings: "HOST: text" per HostWarning, in order."""
    return ["%s: %s" % (w.host, w.text) for w in warnings]
