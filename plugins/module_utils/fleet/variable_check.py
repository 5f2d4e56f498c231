# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The fleet's variables, checked together before anything changes.

check_fleet() takes every GPU host's and every gateway's inventory
variables (plain dicts, host -> {name: value}) and returns every error it
finds as "HOST: VARIABLE: RULE (got VALUE)": the role vllm's variables
(deploy/vllm/variables.check_variables, without what needs the host), the
role gateway's (deploy/gateway/settings.check_settings, with a placeholder
backend), the gpufleet_* placement settings, and names with one of the
collection's prefixes that nothing reads. Messages never show a secret
(the checks hide keys; an unknown name is shown, never its value).
Pure functions, standard library only.
"""

from __future__ import annotations

import difflib
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import settings as bandwidth_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import variables as vllm_variables
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import rules as metrics_rules
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import policy as host_preflight
from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock as state_lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state import store as state_store

PREFIXES = ("gpufleet_", "vllm_", "gateway_", "numa_", "audit_")

# Variables the playbooks read besides the roles' (docs/deploy.md
# "Playbook variables", playbooks/*.yml), and those the collection's own
# inventories define for their staging directory (inventories/demo).
PLAYBOOK_VARIABLES = (
    "numa_capture", "gpufleet_node_address", "gpufleet_socket_ifname", "gpufleet_become", "gpufleet_plan_file",
    "gpufleet_decommission", "audit_plan", "audit_report", "audit_fail_on", "audit_memory_threshold",
    "audit_unit_prefix", "audit_become", "gpufleet_preflight", "numa_preflight_capture",
    "gpufleet_metrics_dir", "gpufleet_node_exporter_port", "gpufleet_alert_down_for", "audit_textfile_dir",
    "gpufleet_lock_timeout",
) + state_store.VARIABLES + tuple(variable for option, variable, kind in host_settings.SETTINGS) + tuple(
    sorted(bandwidth_settings.VARIABLES.values()))  # playbooks/measure_bandwidth.yml
INVENTORY_VARIABLES = ("gpufleet_repo", "gpufleet_fixtures", "gpufleet_staging")

# Inputs of a play keyword (serial): play keywords do not see inventory
# variables, so one set there is silently ignored.
PLAY_KEYWORD_VARIABLES = ("gpufleet_rollout_hosts_at_once",)

# Facts the collection sets itself (set_fact, numa_facts); hostvars mixes
# them with the inventory's variables, so a playbook run twice in one
# ansible-playbook (an upgrade after a deploy) sees them on the second run.
FACTS = ("vllm_deployed", "vllm_removed", "numa_topology", "numa_summary")

# What the role vllm gets from the playbook, not from the inventory, and
# what needs the host (the plan's instances, the service manager).
VLLM_FROM_PLAYBOOK = {
    "vllm_instances": [], "vllm_gateways": {}, "vllm_gateway_backends": [], "vllm_node_addresses": {},
    "vllm_rollout_hosts": [],
}
GATEWAY_FROM_PLAYBOOK = {
    "gateway_backends": [{"name": "preflight", "address": "127.0.0.1", "port": 1, "model": "preflight"}],
    "gateway_backend_api_keys": {},
}

# Stands in for a key the check found wrong or missing, so that the checks
# after it still run (never shown: the name is, not the value).
PLACEHOLDER_KEY = "preflight-placeholder-key"
SECRET_NAMES = ("vllm_api_key", "vllm_hf_token", "gateway_api_key")

_NAME = re.compile(r"[a-z][a-z0-9_]*")


def derived_defaults(variables):
    """The role defaults that defaults/main.yml derives from other variables
    (Jinja there), derived the same way from VARIABLES (the host's values
    over the role's defaults)."""
    def number(name, add):
        try:
            return int(str(variables.get(name)).strip()) + add
        except ValueError:
            return variables.get(name)
    return {
        "vllm_hf_home": "%s/hf" % variables.get("vllm_state_dir"),
        "vllm_cache_dir": "%s/cache" % variables.get("vllm_state_dir"),
        "vllm_download_python": "%s/bin/python" % variables.get("vllm_venv"),
        "vllm_rollout_hosts": [],
        "vllm_timeout_start_sec": number("vllm_engine_ready_timeout", 900),
        "vllm_timeout_stop_sec": number("vllm_shutdown_timeout", 60),
    }


def role_variables(defaults, variables, from_playbook):
    """The role's variables as the play gives them: the defaults (templated
    ones derived), the host's own values over them, the playbook's last."""
    merged = dict(defaults)
    merged.update(variables)
    derived = derived_defaults(merged)
    for name, value in defaults.items():
        if name not in variables and isinstance(value, str) and "{{" in value:
            merged[name] = derived.get(name, value)
    merged.update(from_playbook)
    return merged


def _named(message):
    """The variable an error message names first (VARIABLE: ..., VARIABLE[0]..., VARIABLE key...)."""
    match = _NAME.match(message)
    return match.group(0) if match else ""


def all_errors(check, variables, stand_in):
    """Every error CHECK(variables) raises, one per variable: after each, the
    variable it names takes a value that passes (STAND_IN(name)), and the
    check runs again; a name met twice, or one it does not take, ends it."""
    variables = dict(variables)
    errors = []
    seen = set()
    for dummy in range(len(variables) + 1):
        try:
            check(variables)
            return errors
        except ValueError as exc:
            message = str(exc)
        if message in errors:  # the stand-in did not pass either: said once
            return errors
        errors.append(message)
        name = _named(message)
        if name in seen or name not in variables:
            return errors
        seen.add(name)
        variables[name] = stand_in(name)
    return errors


def vllm_errors(variables, defaults):
    """The role vllm's errors for one GPU host (check_variables)."""
    merged = role_variables(defaults, variables, VLLM_FROM_PLAYBOOK)
    merged.setdefault("vllm_model", None)
    merged["vllm_socket_ifname"] = variables.get("gpufleet_socket_ifname", "")
    # The host's device class decides what the role allows (deploy/vllm/devices.py):
    # one set in the inventory is known before the host's facts are.
    if variables.get("gpufleet_device_class") in ("amd", "cpu"):
        merged["vllm_instances"] = [{"device": variables["gpufleet_device_class"]}]

    def stand_in(name):
        if name in SECRET_NAMES:
            return PLACEHOLDER_KEY
        if name == "vllm_model":
            return "preflight/model"
        return role_variables(defaults, {}, VLLM_FROM_PLAYBOOK).get(name, defaults.get(name))
    return all_errors(vllm_variables.check_variables, merged, stand_in)


def affinity_placeholders(value):
    """A placeholder backend of each well-formed model name of gateway_affinity."""
    if not isinstance(value, dict):
        return []
    placeholders = []
    for index, name in enumerate(sorted(value, key=str)):
        try:
            checks.served_model_name("gateway_affinity key", name)
        except ValueError:
            continue
        placeholders.append({"name": "preflight-%d" % index, "address": "127.0.0.1", "port": 2 + index,
                             "model": name})
    return placeholders


def gateway_errors(variables, defaults):
    """The role gateway's errors for one gateway (check_settings), backends a placeholder."""
    merged = role_variables(defaults, variables, GATEWAY_FROM_PLAYBOOK)
    merged = dict((name, merged.get(name)) for name in gateway_settings.VARIABLES)
    # The plan's models are not known yet: each model gateway_affinity
    # names gets a placeholder backend, so that its settings are checked.
    merged["gateway_backends"] = merged["gateway_backends"] + affinity_placeholders(merged["gateway_affinity"])

    def stand_in(name):
        return PLACEHOLDER_KEY if name in SECRET_NAMES else defaults.get(name)
    return all_errors(gateway_settings.check_settings, merged, stand_in)


def placement_errors(host, variables):
    """The gpufleet_* placement settings of one GPU host, each checked, and
    its host preflight policy (gpufleet_preflight)."""
    errors = []
    if host_preflight.VARIABLE in variables:
        try:
            host_preflight.check_policy(variables[host_preflight.VARIABLE])
        except ValueError as exc:
            errors.append(str(exc))
    for option, variable, kind in host_settings.SETTINGS:
        if variable not in variables:
            continue
        try:
            host_settings.host_settings({host: {variable: variables[variable]}}, [host])
        except ValueError as exc:
            errors.append(str(exc).split(": ", 1)[1] if str(exc).startswith("host ") else str(exc))
    return errors


def unknown_errors(variables, known, extra_vars=()):
    """Names with the collection's prefixes that no role or playbook reads
    (with the nearest known name), and play keyword inputs set in the
    inventory (given with -e they are in EXTRA_VARS, and fine)."""
    errors = []
    for name in sorted(inventory_names(variables)):
        if name in PLAY_KEYWORD_VARIABLES:
            if name not in extra_vars:
                errors.append("%s: is a play keyword input (serial), which inventory variables do not reach: "
                              "give it with -e or in the playbook's vars" % name)
        elif name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            errors.append("%s: is no variable of the collection%s" % (
                name, " (did you mean %s?)" % near[0] if near else ""))
    return errors


def inventory_names(names):
    """The names with the collection's prefixes that are not facts it sets."""
    return [str(name) for name in names
            if isinstance(name, str) and name.startswith(PREFIXES) and name not in FACTS]


def known_names(spec_names):
    """Every name the collection reads: the roles' argument specs (SPEC_NAMES), the playbooks', the inventories'."""
    return set(spec_names) | set(PLAYBOOK_VARIABLES) | set(INVENTORY_VARIABLES) | set(PLAY_KEYWORD_VARIABLES)


def model_errors(variables, model_configs):
    """tp and pp against the model's attention heads and layers, when its
    config.json is at hand (model_configs: model -> (where, config)):
    vLLM refuses a tp that does not divide the heads, and a pp above the
    layers, only when it starts."""
    model = variables.get("vllm_model")
    if not isinstance(model, str) or model not in model_configs:
        return []
    where, config = model_configs[model]
    if not isinstance(config, dict):
        return ["vllm_model: %s is not a JSON object: vLLM cannot read the model" % where]
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    errors = []
    for variable, field, rule, holds in (
            ("gpufleet_tp_size", "num_attention_heads", "must divide the model's %d attention heads",
             lambda size, count: count % size == 0),
            ("gpufleet_pp_size", "num_hidden_layers", "must be at most the model's %d layers",
             lambda size, count: size <= count)):
        size, count = variables.get(variable, 1), text.get(field)
        if _positive(size) and _positive(count) and not holds(size, count):
            errors.append("%s: %s (%s): vLLM refuses it at start (got %d)" % (variable, rule % count, where, size))
    return errors


def _positive(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# Playbook variables whose values are checked with the rest, so that the
# files the run writes at its end cannot fail on them (docs/metrics.md).
PLAYBOOK_CHECKS = (
    ("gpufleet_alert_down_for", metrics_rules.duration),
    ("gpufleet_node_exporter_port", checks.port),
    ("gpufleet_lock_timeout", state_lock.check_timeout),
)


def playbook_errors(variables):
    """The values of PLAYBOOK_CHECKS' variables a host has, each checked."""
    errors = []
    for name, check in PLAYBOOK_CHECKS:
        if name in variables:
            try:
                check(name, variables[name])
            except ValueError as exc:
                errors.append(str(exc))
    return errors


def store_errors(controller):
    """The record's store settings of the controller's variables
    (state/store.settings): its first error, or none."""
    try:
        state_store.settings(controller)
    except ValueError as exc:
        return [str(exc)]
    return []


# What the run reads from the controller's variables alone (hostvars
# ['localhost']): the record's store and the plan file's path.
CONTROLLER_VARIABLES = state_store.VARIABLES + ("gpufleet_plan_file",)


def not_the_controllers(variables, controller):
    """The controller's variables (CONTROLLER_VARIABLES) a host has with
    another value than the controller's: the run reads the controller's
    alone (values never shown)."""
    return ["%s: is read from the controller's variables (group_vars/all, host_vars/localhost or -e): this host's "
            "own value differs from the controller's and would be ignored; set it for the controller" % name
            for name in CONTROLLER_VARIABLES if name in variables and variables[name] != controller.get(name)]


def check_fleet(gpu_hosts, gateways, spec_names, vllm_defaults, gateway_defaults, extra_vars=(), model_configs=None,
                controller=None):
    """Every error of the fleet, as "HOST: VARIABLE: RULE (got VALUE)", GPU hosts then gateways, each sorted,
    then the controller's (CONTROLLER: localhost's variables, the record's store; None: not checked)."""
    known = known_names(spec_names)
    errors = []

    def own(variables):
        return [] if controller is None else not_the_controllers(variables, controller)
    for host in sorted(gpu_hosts):
        variables = gpu_hosts[host]
        found = unknown_errors(variables, known, extra_vars) + placement_errors(host, variables) + playbook_errors(variables)
        found += own(variables) + vllm_errors(variables, vllm_defaults) + model_errors(variables, model_configs or {})
        errors.extend("%s: %s" % (host, error) for error in found)
    for host in sorted(gateways):
        variables = gateways[host]
        found = [] if host in gpu_hosts else unknown_errors(variables, known, extra_vars) + playbook_errors(variables) \
            + own(variables)
        found += gateway_errors(variables, gateway_defaults)
        errors.extend("%s: %s" % (host, error) for error in found)
    if controller is not None:
        errors.extend("localhost: %s" % error for error in store_errors(controller))
    return errors


# At most this many hosts are named in one line of grouped(); the rest are counted.
NAMED_HOSTS = 8


def _hosts_phrase(hosts, gpu_hosts, gateways):
    if len(hosts) > 1 and set(hosts) == set(gpu_hosts) | set(gateways) and gateways:
        return "every GPU server and gateway (%d hosts)" % len(hosts)
    if len(hosts) > 1 and set(hosts) == set(gpu_hosts):
        return "every GPU server (%d hosts)" % len(hosts)
    if len(hosts) > NAMED_HOSTS:
        return "%s and %d more hosts" % (", ".join(hosts[:NAMED_HOSTS]), len(hosts) - NAMED_HOSTS)
    return ", ".join(hosts)


def grouped(errors, gpu_hosts, gateways=()):
    """ERRORS ("HOST: MESSAGE", as check_fleet returns them), one line per
    distinct MESSAGE naming its hosts: a value set once for a group (or the
    whole inventory) is one error, said once, not once per host. A line
    that names no host of GPU_HOSTS, GATEWAYS or localhost is kept as it is.
    The first line of each message keeps its place."""
    known = sorted(set(gpu_hosts) | set(gateways) | {"localhost"}, key=len, reverse=True)
    order, hosts_of = [], {}
    for error in errors:
        host = next((h for h in known if error.startswith(h + ": ")), None)
        message = error[len(host) + 2:] if host is not None else error
        if message not in hosts_of:
            order.append(message)
            hosts_of[message] = []
        if host is not None and host not in hosts_of[message]:
            hosts_of[message].append(host)
    return ["%s: %s" % (_hosts_phrase(hosts_of[m], gpu_hosts, gateways), m) if hosts_of[m] else m for m in order]


def _wildcard(address):
    return checks.address_scope(address) == "unspecified"


def listener_clashes(instances, gateways):
    """Gateway listeners that take an instance's address:port: the address
    the gateway sends to (instances: [{name, host, address, listen, port}],
    the proposal's backends with each host's vllm_listen_host), or, on the
    instance's own host, the same port on an overlapping address (equal, or
    either a wildcard: checks.address_scope says 'unspecified').
    gateways: {host: [(variable, address, port)]}.
    One message per clash, sorted: HAProxy or the instance would not start."""
    errors = []
    for gateway in sorted(gateways):
        for variable, address, port in gateways[gateway]:
            for inst in instances:
                if port != inst["port"]:
                    continue
                same_host = gateway == inst["host"] and (
                    address == inst["listen"] or _wildcard(address) or _wildcard(inst["listen"]))
                if address == inst["address"] or same_host:
                    errors.append("%s: %s: listens on %s:%d, where backend %s serves (%s:%d on %s): give the "
                                  "gateway another port or address" % (
                                      gateway, variable, address, port, inst["name"],
                                      inst["listen"] if same_host else inst["address"], inst["port"], inst["host"]))
    return sorted(errors)
