# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Render a fleet plan as a plain-text table for people to read."""

from __future__ import annotations

COLUMNS = (
    ("HOST", lambda i: i["host"]),
    ("INSTANCE", lambda i: i["name"]),
    ("GPUS", lambda i: ",".join(str(x) for x in i["gpu_indices"])),
    ("NUMA", lambda i: ",".join(str(n) for n in i["numa_nodes"])),
    ("CPUS", lambda i: i["cpus"]),
    ("MEMORY", lambda i: i["memory_policy"]),
    ("LINK", lambda i: i["worst_link"] or "-"),
    ("TPxPP", lambda i: "%sx%s" % (i["tp_size"], i["pp_size"])),
    ("PORT", lambda i: str(i["port"])),
)


def plan_table(plan):
    """Return the plan's instances as aligned text lines, then one line per
    unused GPU and a totals line. Raises ValueError for a non-plan."""
    if not isinstance(plan, dict) or not isinstance(plan.get("instances"), list):
        raise ValueError("plan_table expects the dict returned by fleet_plan (with 'instances')")
    rows = [[title for title, dummy in COLUMNS]]
    for instance in plan["instances"]:
        try:
            rows.append([str(get(instance)) for dummy, get in COLUMNS])
        except (KeyError, TypeError) as exc:
            raise ValueError("plan instance %r lacks field %s" % (instance.get("name") if isinstance(instance, dict) else instance, exc))
    widths = [max(len(row[c]) for row in rows) for c in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip() for row in rows]
    for gpu in plan.get("unused") or []:
        lines.append("unused: %s GPU %s (%s): %s" % (gpu.get("host"), gpu.get("index"), gpu.get("id"), gpu.get("reason")))
    totals = plan.get("totals") or {}
    if totals:
        lines.append(", ".join("%s %s" % (key.replace("_", " "), value) for key, value in sorted(totals.items())))
    return lines


def gateway_backends(plan, host_vars, address_var="vllm_listen_host"):
    """Return the load balancer's backends for every planned instance.

    host_vars maps inventory host -> its variables; each instance's address
    is that host's `address_var` (the address its vLLM instances listen on
    and the gateway reaches them at). A host without it is an error rather
    than a guess: loopback would silently work only on a single machine.
    """
    if not isinstance(plan, dict) or not isinstance(plan.get("instances"), list):
        raise ValueError("gateway_backends expects the dict returned by fleet_plan (with 'instances')")
    backends = []
    for instance in plan["instances"]:
        host = instance.get("host")
        try:
            address = host_vars[host][address_var]
        except (KeyError, TypeError):
            raise ValueError(
                "host %s has no %s: set it to the address its vLLM instances listen on "
                "(the gateway connects there)" % (host, address_var)
            )
        if not address:
            raise ValueError("host %s has an empty %s" % (host, address_var))
        backends.append({
            "name": "%s-%s" % (host, instance["name"]),
            "host": host,
            "address": str(address),
            "port": int(instance["port"]),
        })
    return backends
