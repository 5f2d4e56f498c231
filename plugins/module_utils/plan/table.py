# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A fleet plan as a plain-text table for people to read (the gateway's view
of a plan is deploy/gateway/backends.py)."""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import format_warning

__all__ = ("COLUMNS", "NODE_COLUMN", "plan_table", "plan_warning_lines", "record_diff_table")

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


def _gpus(instance):
    """The instance's GPU indices; "cpu" for a CPU instance (it has none)."""
    if contract.device(instance) == "cpu":
        return "cpu"
    return ",".join(str(x) for x in instance["gpu_indices"])


COLUMNS = (
    Column("HOST", lambda i: i["host"]),
    Column("INSTANCE", lambda i: i["name"]),
    Column("MODEL", _model),
    Column("GPUS", _gpus),
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


def _columns(entries):
    if any(contract.multinode(i) for i in entries):
        return COLUMNS + (NODE_COLUMN,)
    return COLUMNS


def _cells(instance, columns):
    try:
        return [str(column.cell(instance)) for column in columns]
    except (KeyError, TypeError) as exc:
        raise ValueError("plan instance %r lacks field %s" % (instance.get("name") if isinstance(instance, dict) else instance, exc))


def _aligned(rows):
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip() for row in rows]


def plan_table(plan):
    """Return the plan's instances as aligned text lines, then one line per
    unused GPU and a totals line. Raises ValueError for a non-plan."""
    entries = contract.instances(plan, "plan_table")
    columns = _columns(entries)
    lines = _aligned([[column.title for column in columns]] + [_cells(i, columns) for i in entries])
    for gpu in plan.get("unused") or []:
        lines.append("unused: %s GPU %s (%s): %s" % (gpu.get("host"), gpu.get("index"), gpu.get("id"), gpu.get("reason")))
    totals = plan.get("totals") or {}
    if totals:
        lines.append(", ".join("%s %s" % (key.replace("_", " "), value) for key, value in sorted(totals.items())))
    return lines


def plan_warning_lines(plan):
    """The plan's warnings as a person reads them: "warning: HOST: text" each, in the plan's order.
    Raises ValueError for a non-plan."""
    warnings = plan.get("warnings") if isinstance(plan, dict) else None
    if not isinstance(warnings, list):
        raise ValueError("plan_warning_lines expects a fleet plan (a mapping with a warnings list)")
    return ["warning: " + format_warning(w) for w in warnings]


def record_diff_table(before, after, check_mode=False):
    """What changes in the kept record, per instance, as aligned lines: a
    "-" row for an instance as it was, a "+" row as it will be (both for
    one that changed), then how many stay as they are. Instances are
    matched by host and name. Under --check (CHECK_MODE) a first line says
    that the record would change so, and is not written. Raises ValueError
    for a non-plan."""
    old = dict(((i.get("host"), i.get("name")), i) for i in contract.instances(before, "record_diff_table"))
    new = dict(((i.get("host"), i.get("name")), i) for i in contract.instances(after, "record_diff_table"))
    columns = _columns(list(old.values()) + list(new.values()))
    rows = [[""] + [column.title for column in columns]]
    unchanged = 0
    for key in sorted(set(old) | set(new), key=lambda k: (str(k[0]), str(k[1]))):
        if old.get(key) == new.get(key):
            unchanged += 1
            continue
        if key in old:
            rows.append(["-"] + _cells(old[key], columns))
        if key in new:
            rows.append(["+"] + _cells(new[key], columns))
    lines = _aligned(rows) if len(rows) > 1 else []
    head = ["check mode: the record would change so; it is not written"] if check_mode else []
    return head + lines + ["%d instance%s unchanged" % (unchanged, "" if unchanged == 1 else "s")]
