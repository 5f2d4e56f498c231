# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The totals of a fleet plan now live in the plan contract (placement/contract.py);
these names stay importable for the planner (placement/fleet.py, placement/multinode.py)."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement.contract import count_instances, plan_totals

__all__ = ("count_instances", "plan_totals")
