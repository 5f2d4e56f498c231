# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A fleet plan as a plain-text table for people to read (the gateway's view
of a plan is deploy/gateway/backends.py)."""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract

__all__ = ("COLUMNS", "NODE_COLUMN", "plan_table")

# A column: its title, and how an instance entry shows in it.
Column = namedtuple("Column", ("title", "cell"))


def _node(instance):
    multinode = contract.multinode(instance)
    if multinode is None:
        return "-"
    return "%d/%d %s" % (multinode["node_rank"], multinode["nnodes"], multinode["head"])


def _model(instance):
    """The name clients ask for the instance's model by (the model itself
    when no served name is set; '-' in a plan made without models)."""
    return instance.get("served_model_name") or instance.get("model") or "-"


COLUMNS = (
    Column("HOST", lambda i: i["host"]),
    Column("INSTANCE", lambda i: i["name"]),
    Column("MODEL", _model),
    Column("GPUS", lambda i: ",".join(str(x) for x in i["gpu_indices"])),
    Column("NUMA", lambda i: ",".join(str(n) for n in i["numa_nodes"])),
    Column("CPUS", lambda i: i["cpus"]),
    Column("MEMORY", lambda i: i["memory_policy"]),
    Column("LINK", lambda i: i["worst_link"] or "-"),
    Column("TPxPP", lambda i: "%sx%s" % (i["tp_size"], i["pp_size"])),
    Column("PORT", lambda i: str(i["port"])),
)
# Shown when the plan has multi-node instances: this host's rank of the
# instance's hosts, and its head.
NODE_COLUMN = Column("NODE", _node)


def plan_table(plan):
    """Return the plan's instances as aligned text lines, then one line per
    unused GPU and a totals line. Raises ValueError for a non-plan."""
    entries = contract.instances(plan, "plan_table")
    columns = COLUMNS
    if any(contract.multinode(i) for i in entries):
        columns = COLUMNS + (NODE_COLUMN,)
    rows = [[column.title for column in columns]]
    for instance in entries:
        try:
            rows.append([str(column.cell(instance)) for column in columns])
        except (KeyError, TypeError) as exc:
            raise ValueError("plan instance %r lacks field %s" % (instance.get("name") if isinstance(instance, dict) else instance, exc))
    widths = [max(len(row[c]) for row in rows) for c in range(len(columns))]
    lines = ["  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip() for row in rows]
    for gpu in plan.get("unused") or []:
        lines.append("unused: %s GPU %s (%s): %s" % (gpu.get("host"), gpu.get("index"), gpu.get("id"), gpu.get("reason")))
    totals = plan.get("totals") or {}
    if totals:
        lines.append(", ".join("%s %s" % (key.replace("_", " "), value) for key, value in sorted(totals.items())))
    return lines
