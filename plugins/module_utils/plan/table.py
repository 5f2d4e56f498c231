# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Views of a fleet plan: a plain-text table for people to read, the gateway's backends."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as value_checks

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
# Shown when the plan has multi-node instances: this host's rank of the
# instance's hosts, and its head.
NODE_COLUMN = ("NODE", lambda i: "%d/%d %s" % (i["multinode"]["node_rank"], i["multinode"]["nnodes"],
                                               i["multinode"]["head"]) if i.get("multinode") else "-")


def plan_table(plan):
    """Return the plan's instances as aligned text lines, then one line per
    unused GPU and a totals line. Raises ValueError for a non-plan."""
    if not isinstance(plan, dict) or not isinstance(plan.get("instances"), list):
        raise ValueError("plan_table expects the dict returned by fleet_plan (with 'instances')")
    columns = COLUMNS
    if any(isinstance(i, dict) and i.get("multinode") for i in plan["instances"]):
        columns = COLUMNS + (NODE_COLUMN,)
    rows = [[title for title, dummy in columns]]
    for instance in plan["instances"]:
        try:
            rows.append([str(get(instance)) for dummy, get in columns])
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


def is_headless(instance):
    """A rank of a multi-node instance other than its head: it serves no API."""
    multinode = instance.get("multinode") if isinstance(instance, dict) else None
    return isinstance(multinode, dict) and multinode.get("node_rank") != 0


def gateway_backends(plan, addresses):
    """Return the load balancer's backends for every planned instance.

    addresses maps inventory host -> the address its instances listen on
    and the gateway reaches them at (an IP address or DNS name). A planned
    host without one, or with one that is not an address, is an error
    naming the host rather than a guess: loopback would silently work only
    on a single machine. Hosts the plan does not use may be left out.

    Each entry also names the instance's served model name (`model`, from
    the plan instance's served_model_name) and the HAProxy backend of that
    model (`backend`, gateway_settings.backend_name). Two hosts serving
    different models under one served name are an error naming both.
    Of a multi-node instance only the head (rank 0) is a backend.
    """
    if not isinstance(plan, dict) or not isinstance(plan.get("instances"), list):
        raise ValueError("gateway_backends expects the dict returned by fleet_plan (with 'instances')")
    if not isinstance(addresses, dict):
        raise ValueError("gateway_backends: addresses must be a mapping of inventory host -> address (got %s)"
                         % value_checks.show(addresses))
    backends = []
    served = {}  # served name -> (model, host)
    taken = {}  # served name -> backend name
    for index, instance in enumerate(plan["instances"]):
        if not isinstance(instance, dict):
            raise ValueError("plan instance %d is not a dict" % index)
        if is_headless(instance):
            continue
        host = value_checks.text("plan instance %d host" % index, instance.get("host"),
                                 gateway_settings.INVENTORY_HOST, gateway_settings.INVENTORY_HOST_RULE)
        address = addresses.get(host)
        if address is None or address == "":
            raise ValueError(
                "host %s has no address in addresses: map it to the address its vLLM instances "
                "listen on (the gateway connects there)" % host)
        name = instance.get("served_model_name")
        if name is None or name == "":
            raise ValueError(
                "host %s: plan instance %s names no served model: set vllm_model (and optionally "
                "vllm_served_model_name) for the host and plan it again (a plan kept from before the "
                "gateway routed by model lacks it)" % (host, instance.get("name")))
        name = value_checks.served_model_name("host %s vllm_served_model_name" % host, name)
        model = instance.get("model") or name
        if name in served and served[name][0] != model:
            raise ValueError(
                "vllm_served_model_name: hosts %s and %s both serve the name %s but with different models "
                "(%s and %s): give each model its own served name" % (
                    served[name][1], host, name, value_checks.show(served[name][0]), value_checks.show(model)))
        served.setdefault(name, (model, host))
        if name not in taken:
            taken[name] = gateway_settings.backend_name(name, set(taken.values()))
        entry = {
            "name": value_checks.text("host %s instance name" % host, "%s-%s" % (host, instance.get("name")),
                                      gateway_settings.SERVER_NAME, gateway_settings.SERVER_NAME_RULE),
            "host": host,
            "address": gateway_settings.backend_address("host %s address" % host, address),
            "port": gateway_settings.port("host %s instance %s port" % (host, instance.get("name")), instance.get("port")),
            "model": name,
            "backend": taken[name],
        }
        backends.append(entry)
    return backends


def gateway_api_keys(plan, api_keys):
    """served model name -> the key the gateway sends to its instances.

    api_keys maps inventory host -> its vllm_api_key ('' or missing: the
    host's instances take none). Every host serving one model must have
    the same key (the gateway sends one per model): an error names both
    hosts, never a key. Models whose instances take no key are left out.
    """
    if not isinstance(plan, dict) or not isinstance(plan.get("instances"), list):
        raise ValueError("gateway_api_keys expects the dict returned by fleet_plan (with 'instances')")
    if not isinstance(api_keys, dict):
        raise ValueError("gateway_api_keys: api_keys must be a mapping of inventory host -> vllm_api_key")
    keys = {}
    first = {}
    for instance in plan["instances"]:
        if not isinstance(instance, dict):
            raise ValueError("plan instance is not a dict")
        host = instance.get("host")
        name = instance.get("served_model_name")
        if not name or is_headless(instance):
            continue  # gateway_backends names the host
        key = api_keys.get(host)
        key = "" if key is None else key
        if key:
            value_checks.api_key("host %s vllm_api_key" % host, key)
        if name in keys and keys[name] != key:
            raise ValueError(
                "vllm_api_key: hosts %s and %s serve model %s with different keys; the gateway sends one key "
                "to every instance of a model: give them the same vllm_api_key (values hidden)"
                % (first[name], host, name))
        keys.setdefault(name, key)
        first.setdefault(name, host)
    return dict((name, key) for name, key in keys.items() if key)
