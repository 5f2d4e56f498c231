# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The gateway's view of a fleet plan: its backends and the keys it sends them.

gateway_backends() lists one HAProxy server per instance that serves the
API (the plan contract's is_head), named by the contract's server_name;
gateway_api_keys() maps each served model name to the key its instances
take. Both read the plan through placement/contract.py. Pure functions,
standard library only.
"""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as value_checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common import names
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract

# The first host seen serving a name, and the model it serves under it.
Served = namedtuple("Served", ("model", "host"))


def _address(host, addresses):
    address = addresses.get(host)
    if address is None or address == "":
        raise ValueError(
            "host %s has no address in addresses: map it to the address its vLLM instances "
            "listen on (the gateway connects there)" % host)
    return gateway_settings.backend_address("host %s address" % host, address)


def _served_name(host, instance):
    name = instance.get("served_model_name")
    if name is None or name == "":
        raise ValueError(
            "host %s: plan instance %s names no served model: set vllm_model (and optionally "
            "vllm_served_model_name) for the host and plan it again (a plan kept from before the "
            "gateway routed by model lacks it)" % (host, instance.get("name")))
    return contract.check_served_name("host %s vllm_served_model_name" % host, name)


def gateway_backends(plan, addresses):
    """Return the load balancer's backends for every planned instance.

    addresses maps inventory host -> the address its instances listen on
    and the gateway reaches them at (an IP address or DNS name). A planned
    host without one, or with one that is not an address, is an error
    naming the host rather than a guess: loopback would silently work only
    on a single machine. Hosts the plan does not use may be left out.

    Each entry also names the instance's served model name (`model`, from
    the plan instance's served_model_name) and the HAProxy backend of that
    model (`backend`, gateway_settings.backend_name), and the name the
    gateway asks the host's agent about (`agent`: the instance's name;
    deploy/gateway/agent.py). Two hosts serving
    different models under one served name are an error naming both.
    Of a multi-node instance only the head is a backend.
    """
    if not isinstance(addresses, dict):
        raise ValueError("gateway_backends: addresses must be a mapping of inventory host -> address (got %s)"
                         % value_checks.show(addresses))
    backends = []
    for host, instance, entry in _servers(plan, "gateway_backends"):
        address = _address(host, addresses)
        backends.append(dict(entry, address=address, port=gateway_settings.port(
            "host %s instance %s port" % (host, instance.get("name")), instance.get("port")),
            agent=instance.get("name")))
    return [dict((k, b[k]) for k in gateway_settings.BACKEND_KEYS) for b in backends]


def gateway_servers(plan):
    """The gateway's servers of a plan, named as gateway_backends names them
    ({name, host, model, backend}), without their addresses: what a drain
    before a stop needs, also for a host the inventory no longer has."""
    return [entry for _host, _instance, entry in _servers(plan, "gateway_servers")]


def _servers(plan, what):
    """(host, instance, {name, host, model, backend}) of every head instance, in plan order."""
    entries = contract.instances(plan, what)
    served = {}  # served name -> Served
    taken = {}  # served name -> backend name
    for index, instance in enumerate(entries):
        if not isinstance(instance, dict):
            raise ValueError("plan instance %d is not a dict" % index)
        if not contract.is_head(instance):
            continue
        host = names.inventory_host("plan instance %d host" % index, instance.get("host"))
        name = _served_name(host, instance)
        model = instance.get("model") or name
        first = served.setdefault(name, Served(model, host))
        if first.model != model:
            raise ValueError(
                "vllm_served_model_name: hosts %s and %s both serve the name %s but with different models "
                "(%s and %s): give each model its own served name" % (
                    first.host, host, name, value_checks.show(first.model), value_checks.show(model)))
        if name not in taken:
            taken[name] = gateway_settings.backend_name(name, set(taken.values()))
        yield host, instance, {
            "name": value_checks.text("host %s instance name" % host, contract.server_name(host, instance.get("name")),
                                      gateway_settings.SERVER_NAME, gateway_settings.SERVER_NAME_RULE),
            "host": host,
            "model": name,
            "backend": taken[name],
        }


def gateway_api_keys(plan, api_keys):
    """served model name -> the key the gateway sends to its instances.

    api_keys maps inventory host -> its vllm_api_key ('' or missing: the
    host's instances take none). Every host serving one model must have
    the same key (the gateway sends one per model): an error names both
    hosts, never a key. Models whose instances take no key are left out.
    """
    entries = contract.instances(plan, "gateway_api_keys")
    if not isinstance(api_keys, dict):
        raise ValueError("gateway_api_keys: api_keys must be a mapping of inventory host -> vllm_api_key")
    keys = {}
    first = {}
    for instance in entries:
        if not isinstance(instance, dict):
            raise ValueError("plan instance is not a dict")
        host = instance.get("host")
        name = instance.get("served_model_name")
        if not name or not contract.is_head(instance):
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
