# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The totals of a fleet plan (docs/plan.md), one way for fleet_plan and the kept plan."""

from __future__ import annotations


def count_instances(instances):
    """Distinct instances among plan entries: a multi-node instance has an
    entry on each of its hosts and counts once, by its head (node_rank 0)."""
    return sum(1 for i in instances if not isinstance(i.get("multinode"), dict) or i["multinode"].get("node_rank") == 0)


def plan_totals(hosts, gpus, instances):
    """totals of a plan of `hosts` hosts holding `gpus` GPUs, with these instance entries."""
    used = sum(len(i["gpus"]) for i in instances)
    return {"hosts": hosts, "instances": count_instances(instances), "gpus": gpus, "gpus_used": used,
            "gpus_unused": gpus - used}
