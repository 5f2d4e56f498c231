# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Each GPU server's own placement settings, read from its inventory variables.

`gpufleet_tp_size` and the other `gpufleet_*` placement variables may
differ per host or group (docs/deploy.md). host_settings() reads them for
every host to plan, checks them, and returns host -> fleet_plan options, so
that the planner takes each host's own values instead of one host's.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import (
    DEVICE_CLASSES,
    FLEET_OPTIONS,
    WORKER_BINDINGS,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract

# option -> (inventory variable, kind); defaults are the planner's own
# (placement_options.FLEET_OPTIONS), except tp_size: the deploy plans one
# GPU per instance when gpufleet_tp_size is not set.
SETTINGS = (
    ("tp_size", "gpufleet_tp_size", "positive"),
    ("pp_size", "gpufleet_pp_size", "positive"),
    ("allow_span", "gpufleet_allow_span", "bool"),
    ("reserved_cpus_per_socket", "gpufleet_reserved_cpus_per_socket", "count"),
    ("exclude_gpus", "gpufleet_exclude_gpus", "gpus"),
    ("max_instances_per_host", "gpufleet_max_instances_per_host", "positive_or_none"),
    ("worker_binding", "gpufleet_worker_binding", "worker_binding"),
    ("device_class", "gpufleet_device_class", "device_class"),
    ("base_port", "gpufleet_base_port", "port"),
    ("port_stride", "gpufleet_port_stride", "positive"),
    ("dist_port_base", "gpufleet_dist_port_base", "port"),
    ("dist_port_stride", "gpufleet_dist_port_stride", "positive"),
    ("nodes_per_instance", "gpufleet_nodes_per_instance", "positive"),
    ("master_port", "gpufleet_master_port", "port"),
)
DEFAULTS = dict(FLEET_OPTIONS, tp_size=1)


def _check(kind, name, value, host):
    if kind == "positive":
        return checks.integer(name, value, minimum=1)
    if kind == "positive_or_none":
        return None if value is None else checks.integer(name, value, minimum=1)
    if kind == "count":
        return checks.integer(name, value, minimum=0)
    if kind == "port":
        return checks.port(name, value)
    if kind == "bool":
        return checks.boolean(name, value)
    if kind == "worker_binding":
        return checks.choice(name, value, WORKER_BINDINGS)
    if kind == "device_class":
        return checks.choice(name, value, DEVICE_CLASSES)
    # exclude_gpus: a list of GPU indices, bus ids, UUIDs or GPU<n>, or a mapping host -> list
    # (placement/exclude.py resolves them against the host's GPUs)
    if isinstance(value, dict):
        value = value.get(host) or []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        checks.fail(name, "must be a list of GPU indices, PCI bus ids, UUIDs or GPU<n> "
                    "(or a mapping host -> list)", value)
    return [_gpu_entry("%s[%d]" % (name, i), item) for i, item in enumerate(value)]


def _gpu_entry(name, item):
    if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
        return int(item)
    if isinstance(item, str):
        return checks.text(name, item)
    return checks.fail(name, "must be a GPU index (0, 1, ...), a PCI bus id, a UUID or GPU<n>", item)


def check_option(option, value, host, name):
    """One fleet_plan option as a kept plan records it for `host`
    (hosts.HOST.options); raises ValueError("NAME: RULE (got VALUE)")."""
    kinds = dict((o, kind) for o, dummy, kind in SETTINGS)
    if option not in kinds:
        checks.fail(name, "must be a placement option (%s)" % ", ".join(sorted(kinds)), option)
    return _check(kinds[option], name, value, host)


def host_settings(host_vars, hosts):
    """host -> fleet_plan options from each host's gpufleet_* variables.

    host_vars: mapping host -> its variables (hostvars). A bad value raises
    ValueError naming the host, the variable and the rule.
    """
    out = {}
    for host in hosts:
        variables = host_vars[host]
        options = {}
        for option, variable, kind in SETTINGS:
            default = DEFAULTS[option]
            value = variables.get(variable, default) if hasattr(variables, "get") else default
            if value is None and kind != "positive_or_none":
                value = default
            try:
                options[option] = _check(kind, variable, value, host)
            except ValueError as exc:
                raise ValueError("host %s: %s" % (host, exc))
        out[str(host)] = options
    return out


def plan_groups(settings):
    """Hosts grouped by identical settings, in a stable order: one fleet_plan
    call per group gives every host its own values.

    Excluded GPUs do not split a group: they go in as a mapping host -> list,
    so hosts that differ only in a GPU left out still form multi-node
    instances together (nodes_per_instance).
    """
    groups = {}
    for host in sorted(settings):
        key = tuple((k, tuple(v) if isinstance(v, list) else v)
                    for k, v in sorted(settings[host].items()) if k != "exclude_gpus")
        groups.setdefault(key, []).append(host)
    out = []
    for hosts in sorted(groups.values(), key=min):
        options = dict(settings[hosts[0]])
        options["exclude_gpus"] = dict((h, list(settings[h]["exclude_gpus"]))
                                       for h in hosts if settings[h].get("exclude_gpus"))
        out.append((options, hosts))
    return out


def host_models(host_vars, hosts):
    """host -> {"model", "served_model_name"} from each host's vllm_model and
    vllm_served_model_name (empty: the model itself), for hosts that set
    vllm_model; the plan keeps them per instance, so the gateway knows what
    a host serves even when a run does not reach it. Raises ValueError
    naming the host and the variable."""
    out = {}
    for host in hosts:
        variables = host_vars[host]
        get = variables.get if hasattr(variables, "get") else (lambda name, default=None: default)
        model = get("vllm_model")
        if model is None or model == "":
            continue
        try:
            model = checks.command_word("vllm_model", checks.text("vllm_model", model))
            served = contract.served_name(model, get("vllm_served_model_name") or "")
        except ValueError as exc:
            raise ValueError("host %s: %s" % (host, exc))
        out[str(host)] = {"model": model, "served_model_name": served}
    return out
