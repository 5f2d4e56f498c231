# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters variable_errors (every variable of the fleet checked before
anything changes) and listener_clashes (gateways listening where the
proposal's instances serve); module_utils/fleet/variable_check.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import variable_check
from ansible_collections.gpufleet.numa.plugins.plugin_utils import model_config
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain
from ansible_collections.gpufleet.numa.plugins.plugin_utils.role_files import inventory_variables


def variable_errors(hostvars, gpu_hosts, gateway_hosts=()):
    """Every error of the fleet's variables, one string each ([] when none);
    one error of several hosts (a group's variable) is one string naming them."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.variable_errors expects hostvars")
    errors = []
    gpu = dict((str(h), inventory_variables(hostvars, h, errors)) for h in gpu_hosts or [])
    gateways = dict((str(h), inventory_variables(hostvars, h, errors)) for h in gateway_hosts or [])
    # The controller's own variables: the record's store (docs/state.md).
    controller = inventory_variables(hostvars, "localhost", errors) if "localhost" in hostvars else None
    configs, problems = model_config.model_configs(v.get("vllm_model") for v in gpu.values())
    try:
        errors.extend(variable_check.check_fleet(
            gpu, gateways, role_files.spec_names(), role_files.defaults("vllm"), role_files.defaults("gateway"),
            extra_vars=role_files.extra_var_names(), model_configs=configs, controller=controller))
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.variable_errors: %s" % exc)
    # A config.json that is there but unreadable is each of its hosts' error.
    for host, variables in sorted(gpu.items()):
        model = variables.get("vllm_model")
        if isinstance(model, str) and model in problems:
            errors.append("%s: vllm_model: %s" % (host, problems[model]))
    return variable_check.grouped(errors, [str(h) for h in gpu_hosts or []], [str(h) for h in gateway_hosts or []])


def listener_clashes(backends, hostvars, gateway_hosts=()):
    """One error per gateway listener on an instance's address:port ([] when none)."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.listener_clashes expects hostvars as its second argument")
    errors = []
    vllm_defaults = role_files.defaults("vllm")
    instances = []
    # Once per host, not per instance: a host's variables are templated
    # whole, and a 1,000-GPU host has hundreds of instances.
    listen = {}
    for backend in plain(backends) or []:
        host = backend["host"]
        if host not in listen:
            own = inventory_variables(hostvars, host, errors, ("vllm_",)) if host in hostvars else {}
            listen[host] = str(variable_check.role_variables(vllm_defaults, own, {})["vllm_listen_host"])
        instances.append(dict(backend, listen=listen[host]))
    gateways = {}
    for host in gateway_hosts or []:
        merged = role_files.host_role_variables(hostvars, host, "gateway", errors, prefixes=("gateway_",))
        listeners = [("gateway_listen_address", merged["gateway_listen_address"], merged["gateway_listen_port"]),
                     ("gateway_stats_address", merged["gateway_stats_address"], merged["gateway_stats_port"]),
                     ("gateway_metrics_address", merged["gateway_metrics_address"], merged["gateway_metrics_port"])]
        gateways[str(host)] = [(name, str(address), int(port)) for name, address, port in listeners if int(port)]
    return errors + variable_check.listener_clashes(instances, gateways)


class FilterModule(object):
    def filters(self):
        return {"variable_errors": variable_errors, "listener_clashes": listener_clashes}
