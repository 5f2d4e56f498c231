# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters preflight_errors (every variable of the fleet checked before
anything changes) and listener_clashes (gateways listening where the
proposal's instances serve); module_utils/plan/preflight.py."""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import preflight
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain
from ansible_collections.gpufleet.numa.plugins.plugin_utils.role_files import inventory_variables


CONFIG_MAX_BYTES = 4 * 1024 * 1024


def _config_path(model):
    """Where the model's config.json is on the controller: a local path, or
    the snapshot of the Hugging Face cache's refs/main; None when not at hand."""
    if os.path.isabs(model):
        return os.path.join(model, "config.json")
    if model.count("/") != 1:
        return None
    cache = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    repo = os.path.join(cache, "models--" + model.replace("/", "--"))
    try:
        with open(os.path.join(repo, "refs", "main")) as handle:
            revision = handle.read().strip()
    except OSError:
        return None
    return os.path.join(repo, "snapshots", revision, "config.json")


def _model_configs(models):
    """model -> (path, parsed config.json or None when it does not parse), for those at hand."""
    configs = {}
    for model in sorted(set(m for m in models if isinstance(m, str) and m)):
        path = _config_path(model)
        if path is None or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as handle:
                configs[model] = (path, json.loads(handle.read(CONFIG_MAX_BYTES).decode("utf-8")))
        except (OSError, ValueError):
            configs[model] = (path, None)
    return configs


def preflight_errors(hostvars, gpu_hosts, gateway_hosts=()):
    """Every error of the fleet's variables, one string each ([] when none)."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.preflight_errors expects hostvars")
    errors = []
    gpu = dict((str(h), inventory_variables(hostvars, h, errors)) for h in gpu_hosts or [])
    gateways = dict((str(h), inventory_variables(hostvars, h, errors)) for h in gateway_hosts or [])
    try:
        errors.extend(preflight.check_fleet(
            gpu, gateways, role_files.spec_names(), role_files.defaults("vllm"), role_files.defaults("gateway"),
            extra_vars=role_files.extra_var_names(),
            model_configs=_model_configs(v.get("vllm_model") for v in gpu.values())))
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.preflight_errors: %s" % exc)
    return errors


def listener_clashes(backends, hostvars, gateway_hosts=()):
    """One error per gateway listener on an instance's address:port ([] when none)."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.listener_clashes expects hostvars as its second argument")
    errors = []
    vllm_defaults = role_files.defaults("vllm")
    instances = []
    for backend in plain(backends) or []:
        own = inventory_variables(hostvars, backend["host"], errors) if backend["host"] in hostvars else {}
        merged = preflight.role_variables(vllm_defaults, own, {})
        instances.append(dict(backend, listen=str(merged["vllm_listen_host"])))
    gateways = {}
    for host in gateway_hosts or []:
        merged = role_files.host_role_variables(hostvars, host, "gateway", errors)
        listeners = [("gateway_listen_address", merged["gateway_listen_address"], merged["gateway_listen_port"]),
                     ("gateway_stats_address", merged["gateway_stats_address"], merged["gateway_stats_port"]),
                     ("gateway_metrics_address", merged["gateway_metrics_address"], merged["gateway_metrics_port"])]
        gateways[str(host)] = [(name, str(address), int(port)) for name, address, port in listeners if int(port)]
    return errors + preflight.listener_clashes(instances, gateways)


class FilterModule(object):
    def filters(self):
        return {"preflight_errors": preflight_errors, "listener_clashes": listener_clashes}
