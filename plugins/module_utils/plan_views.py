# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Views of a fleet plan: a plain-text table for people to read, the gateway's backends."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils import gateway_settings, value_checks

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


def gateway_backends(plan, addresses):
    """Return the load balancer's backends for every planned instance.

    addresses maps inventory host -> the address its instances listen on
    and the gateway reaches them at (an IP address or DNS name). A planned
    host without one, or with one that is not an address, is an error
    naming the host rather than a guess: loopback would silently work only
    on a single machine. Hosts the plan does not use may be left out.
    """
    if not isinstance(plan, dict) or not isinstance(plan.get("instances"), list):
        raise ValueError("gateway_backends expects the dict returned by fleet_plan (with 'instances')")
    if not isinstance(addresses, dict):
        raise ValueError("gateway_backends: addresses must be a mapping of inventory host -> address (got %s)"
                         % value_checks.show(addresses))
    backends = []
    for index, instance in enumerate(plan["instances"]):
        if not isinstance(instance, dict):
            raise ValueError("plan instance %d is not a dict" % index)
        host = value_checks.text("plan instance %d host" % index, instance.get("host"),
                                 gateway_settings.INVENTORY_HOST, gateway_settings.INVENTORY_HOST_RULE)
        address = addresses.get(host)
        if address is None or address == "":
            raise ValueError(
                "host %s has no address in addresses: map it to the address its vLLM instances "
                "listen on (the gateway connects there)" % host)
        backends.append({
            "name": value_checks.text("host %s instance name" % host, "%s-%s" % (host, instance.get("name")),
                                      gateway_settings.SERVER_NAME, gateway_settings.SERVER_NAME_RULE),
            "host": host,
            "address": gateway_settings.backend_address("host %s address" % host, address),
            "port": gateway_settings.port("host %s instance %s port" % (host, instance.get("name")), instance.get("port")),
        })
    return backends
