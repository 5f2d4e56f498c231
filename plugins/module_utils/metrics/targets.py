# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Prometheus scrape targets of a fleet, in file_sd form.

vllm_targets() turns the deployed plan (the kept record's routed plan)
into one target group per instance that serves the API, labelled with
where the instance was placed: host, instance, model, device, GPUs, NUMA
nodes, socket, binding mode and memory policy. gateway_targets() lists
each gateway's HAProxy exporter (PROMEX). Both return what Prometheus
reads from a file_sd JSON file: [{"targets": ["address:port"], "labels":
{...}}]. The plan is read through placement/contract.py and the
gateway's naming (deploy/gateway/backends.py), so a target is the
instance the gateway routes to. Pure functions, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import backends as gateway_backends
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract

# Labels of a vLLM target, in the order docs/metrics.md lists them.
VLLM_LABELS = ("host", "instance", "model", "device", "gpus", "gpu_ids", "numa_nodes", "socket", "binding",
               "memory_policy")


def _join(values):
    return ",".join(str(v) for v in values)


def scrape_address(who, variable, listen, reach):
    """Where Prometheus reaches a listener of WHO ("gateway gw", "host
    gpu-a"): its listen address (VARIABLE, checked), or REACH, the host's own
    address (ansible_host, else its name), when it listens on every address
    (0.0.0.0, ::): a wildcard is no place to connect to."""
    address = checks.address("%s %s" % (who, variable), listen)
    if checks.address_scope(address) == "unspecified":
        address = reach_address(who, reach)
    return address


def reach_address(who, reach):
    """The host's own address (ansible_host, else its name) as a scrape
    target: a wildcard there (ansible_host: 0.0.0.0) is refused, naming WHO."""
    return checks.connect_address("%s address (ansible_host)" % who, reach, "Prometheus")


def _placement_labels(instance):
    """The labels that say where an instance runs, from its plan entry."""
    binding = contract.binding(instance) or {}
    gpus = instance.get("gpus") or []
    return {
        "device": contract.device(instance),
        "gpus": _join(instance.get("gpu_indices") or []),
        "gpu_ids": _join(g.get("id") or "" for g in gpus if isinstance(g, dict)),
        "numa_nodes": _join(instance.get("numa_nodes") or []),
        "socket": _join(instance.get("sockets") or []),
        "binding": str(binding.get("mode") or "process"),
        "memory_policy": str(binding.get("policy") or instance.get("memory_policy") or ""),
    }


def vllm_targets(plan, addresses):
    """One file_sd target group per API-serving instance of the plan.

    addresses: inventory host -> the address its instances listen on (as
    for the gateway's backends; a host without one is an error naming it).
    The `instance` label is "<host>/<instance name>" (unique in the fleet,
    stable across re-plans: docs/plan.md "Stable identity"); `host` the
    inventory host.
    """
    by_server = {}
    for instance in contract.instances(plan, "vllm_targets"):
        if isinstance(instance, dict) and contract.is_head(instance):
            by_server[contract.server_name(instance.get("host"), instance.get("name"))] = instance
    groups = []
    for backend in gateway_backends.gateway_backends(plan, addresses):
        instance = by_server[backend["name"]]
        labels = {"host": backend["host"], "instance": "%s/%s" % (backend["host"], instance["name"]),
                  "model": backend["model"]}
        labels.update(_placement_labels(instance))
        groups.append({"targets": [gateway_settings.socket(backend["address"], backend["port"])],
                       "labels": dict((k, labels[k]) for k in VLLM_LABELS)})
    return groups


def gateway_targets(gateways):
    """One file_sd target group per gateway whose exporter is on.

    gateways: inventory host -> {"listen": the exporter's listen address
    (gateway_metrics_address), "port": its port (gateway_metrics_port, 0:
    off), "reach": the host's own address (ansible_host, else its name)}.
    Prometheus scrapes the listen address, or the host's address when the
    exporter listens on every address (0.0.0.0, ::). Each group is
    labelled with the gateway's host and `instance` "<host>/gateway".
    """
    if not isinstance(gateways, dict):
        raise ValueError("gateway_targets: expects a mapping of gateway host -> {listen, port, reach} (got %s)"
                         % checks.show(gateways))
    groups = []
    for host in sorted(gateways):
        entry = gateways[host]
        if not isinstance(entry, dict):
            raise ValueError("gateway_targets: gateway %s: expects {listen, port, reach} (got %s)"
                             % (host, checks.show(entry)))
        port = checks.port("gateway %s gateway_metrics_port" % host, entry.get("port"), allow_zero=True)
        if port == 0:
            continue
        address = scrape_address("gateway %s" % host, "gateway_metrics_address", entry.get("listen"), entry.get("reach"))
        groups.append({"targets": [gateway_settings.socket(address, port)],
                       "labels": {"host": host, "instance": "%s/gateway" % host}})
    return groups
