# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The role vllm's variables, checked and in canonical form (check_variables).

Every value that reaches a unit, an option file or a command line passes a
check of plugins/module_utils/common/checks.py first; errors are ValueError
naming the variable and the rule. Pure functions, standard library only.
"""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common import names
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices, engine_checks
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.download import model_source
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract


# Options the unit sets itself (no-numa-bind: numa-bind's other half);
# vllm_extra_args must not repeat them, nor a prefix of one (engine_checks).
RESERVED_OPTIONS = (
    "api-key", "config", "headless", "host", "master-addr", "master-port", "model", "nnodes", "no-numa-bind",
    "node-rank", "numa-bind", "numa-bind-cpus", "numa-bind-nodes", "pipeline-parallel-size", "port",
    "served-model-name", "shutdown-timeout", "tensor-parallel-size",
)

# Set on a multi-node instance's units when vllm_socket_ifname names the interface.
SOCKET_IFNAME_ENVIRONMENT = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")

# Environment variables every unit sets itself; vllm_environment must not
# repeat them (nor the device class's, devices.py).
RESERVED_ENVIRONMENT = (
    "GPUFLEET_ENGINE", "HF_HOME", "HF_TOKEN", "TRITON_CACHE_DIR",
    "VLLM_API_KEY", "VLLM_CACHE_ROOT", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_PORT", "XDG_CACHE_HOME",
)

# [Service] settings the unit writes itself; vllm_hardening must not repeat them.
RESERVED_DIRECTIVES = (
    "CPUAffinity", "Environment", "EnvironmentFile", "Group", "KillMode", "LimitMEMLOCK", "LimitNOFILE",
    "NUMAMask", "NUMAPolicy", "ReadWritePaths", "Restart", "RestartSec", "RuntimeDirectory", "RuntimeDirectoryMode",
    "SyslogIdentifier",
    "TimeoutStartSec", "TimeoutStopSec", "Type", "User", "WorkingDirectory",
)

# HAProxy backend of gateway_backends entries without a `backend` field.
DEFAULT_GATEWAY_BACKEND = "vllm"


_OPTION = r"[a-z0-9][a-z0-9_-]{0,99}"


_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"


_DIRECTIVE = r"[A-Z][A-Za-z]{1,63}"


_VERSION = r"[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}"


_PACKAGE = r"[A-Za-z0-9][A-Za-z0-9.+_:~-]{0,127}"


_PROGRAM = r"[A-Za-z0-9_./+][A-Za-z0-9_./+-]{0,254}"
# NCCL_SOCKET_IFNAME's value: interface names (Linux: up to 15 characters), comma-separated,
# optionally prefixed with ^ (exclude) or = (exact match).


_IFNAMES = r"[\^=]?[A-Za-z0-9_.:@-]{1,15}(?:,[A-Za-z0-9_.:@-]{1,15})*"
# Role variables this module reads, with the check each passes.


# The integers: name -> least and greatest value.
Limit = namedtuple("Limit", "minimum maximum")
INTEGERS = {
    "vllm_engine_ready_timeout": Limit(1, 10 ** 9), "vllm_shutdown_timeout": Limit(0, 10 ** 9),
    "vllm_restart_sec": Limit(0, 10 ** 9), "vllm_limit_nofile": Limit(1, 10 ** 9),
    "vllm_health_timeout": Limit(1, 10 ** 9), "vllm_health_delay": Limit(1, 10 ** 9),
    "vllm_drain_timeout": Limit(0, 10 ** 9), "vllm_timeout_start_sec": Limit(1, 10 ** 9),
    "vllm_timeout_stop_sec": Limit(1, 10 ** 9),
}
PATH_VARIABLES = ("vllm_state_dir", "vllm_hf_home", "vllm_cache_dir", "vllm_config_dir", "vllm_unit_dir",
                  "vllm_libexec_dir", "vllm_venv", "vllm_numactl")


def mapping(name, value):
    if not isinstance(value, dict):
        checks.fail(name, "must be a mapping", value)
    return value


def as_list(name, value):
    if not isinstance(value, (list, tuple)):
        checks.fail(name, "must be a list", value)
    return list(value)


def _yaml_value(name, value, depth=0):
    """A vllm_extra_args value: a scalar, or lists and mappings of them;
    strings on one line."""
    if depth > 4:
        checks.fail(name, "must not nest deeper than 4 levels", value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return checks.text(name, value, allow_empty=True)
    if isinstance(value, (list, tuple)):
        return [_yaml_value("%s[%d]" % (name, i), v, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            checks.text("%s key" % name, key if isinstance(key, str) else repr(key), r"[A-Za-z0-9_.-]{1,100}",
                        "must be a name of [A-Za-z0-9_.-]")
            out[str(key)] = _yaml_value("%s.%s" % (name, key), item, depth + 1)
        return out
    checks.fail(name, "must be a string, number, boolean, list or mapping", value)


def _scalar_text(name, value):
    """A string or number that becomes one line of text."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        checks.fail(name, "must be a string or a number (quote yes, no, true and false)", value)
    return checks.text(name, str(value), allow_empty=True)


def _secret(name, value):
    """A secret on one line; the message never shows the value."""
    try:
        checks.text(name, value, allow_empty=True)
    except ValueError:
        raise ValueError("%s: must be a string on one line without control characters (value hidden)" % name)


def manage_service(value, service_mgr):
    """vllm_manage_service: auto (where systemd is the service manager), true or false."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return service_mgr == "systemd"
    try:
        return checks.boolean("vllm_manage_service", value)
    except ValueError:
        checks.fail("vllm_manage_service", "must be auto, true or false", value)


def role_value(v, name):
    """A role variable's value. The role's defaults/main.yml gives every one
    a value: a missing one is an error naming it, never a default made up here."""
    if name not in v:
        raise ValueError("%s: is required, and roles/vllm/defaults/main.yml sets it: pass every role variable "
                         "(got none)" % name)
    return v[name]


def check_variables(variables):
    """The role's variables, checked and in canonical form (a new dict)."""
    v = variables
    for name in ("vllm_model", "vllm_instances"):
        if name not in v or v[name] is None:
            checks.fail(name, "is required", None)
    # The host's one device class decides the engine, the sandbox's devices
    # and the reserved environment (devices.py).
    out = {"device": devices.host_device(v["vllm_instances"])}
    for step in (_check_model_and_paths, _check_access, _check_install, check_download_variables, _check_timeouts,
                 _check_extra_args, _check_environment, _check_hardening, _check_multinode_variables,
                 devices.check_device_variables):
        out.update(step(v, out))
    out["vllm_gateways"], out["vllm_gateway_backends"] = gateways(
        role_value(v, "vllm_gateways"), role_value(v, "vllm_gateway_backends"))
    return out


def _check_model_and_paths(v, out):
    """What the unit serves, where it listens, how it binds, where its files go."""
    out = {"vllm_model": checks.command_word("vllm_model", v["vllm_model"])}
    served = checks.text("vllm_served_model_name", role_value(v, "vllm_served_model_name"), allow_empty=True)
    contract.served_name(out["vllm_model"], served)
    out["vllm_served_model_name"] = served
    out["vllm_listen_host"] = checks.address("vllm_listen_host", role_value(v, "vllm_listen_host"))
    out["vllm_binding"] = checks.choice("vllm_binding", role_value(v, "vllm_binding"), ("numactl", "systemd"))
    for name in PATH_VARIABLES:
        out[name] = checks.absolute_path(name, role_value(v, name))
    out["vllm_executable"] = checks.absolute_path("vllm_executable", role_value(v, "vllm_executable"), allow_empty=True)
    out["vllm_nvidia_modprobe"] = checks.absolute_path("vllm_nvidia_modprobe", role_value(v, "vllm_nvidia_modprobe"),
                                                       allow_empty=True)
    out["vllm_unit_prefix"] = names.unit_prefix("vllm_unit_prefix", role_value(v, "vllm_unit_prefix"))
    out["vllm_user"] = checks.account("vllm_user", role_value(v, "vllm_user"))
    out["vllm_group"] = checks.account("vllm_group", role_value(v, "vllm_group"))
    return out


def _check_access(v, out):
    """The secrets, and a key for anything that listens beyond loopback."""
    _secret("vllm_hf_token", role_value(v, "vllm_hf_token"))
    api_key = role_value(v, "vllm_api_key")
    # One rule for every API key (checks.api_key): the gateway sends
    # this key to the instances and must place it exactly.
    if api_key not in (None, ""):
        checks.api_key("vllm_api_key", api_key)
    checked = {"vllm_allow_unauthenticated": checks.boolean("vllm_allow_unauthenticated",
                                                            role_value(v, "vllm_allow_unauthenticated"))}
    # Anything that listens beyond loopback needs a key (vLLM checks it on /v1/*).
    if api_key in (None, "") and not checks.is_loopback(out["vllm_listen_host"]) \
            and not checked["vllm_allow_unauthenticated"]:
        raise ValueError(
            "vllm_api_key: is required when vllm_listen_host is not a loopback address (got %s): set it "
            "(from a vault; the gateway passes it on), listen on 127.0.0.1, or set "
            "vllm_allow_unauthenticated: true to let anyone who reaches the port in" % out["vllm_listen_host"])
    return checked


def _check_install(v, out):
    """What the role installs, and whether it manages the account and the service."""
    return dict(devices.check_engine_variables(v), **{
        "vllm_version": checks.text("vllm_version", role_value(v, "vllm_version"), _VERSION,
                                    "must be a version of [0-9A-Za-z.+!_-]"),
        "vllm_python": checks.command_word("vllm_python", checks.text(
            "vllm_python", role_value(v, "vllm_python"), _PROGRAM, "must be a program name or path of [A-Za-z0-9_./+-]")),
        "vllm_packages": [
            checks.text("vllm_packages[%d]" % i, p, _PACKAGE, "must be a package name of [A-Za-z0-9.+_:~-]")
            for i, p in enumerate(as_list("vllm_packages", role_value(v, "vllm_packages")))],
        "vllm_cpu_packages": [
            checks.text("vllm_cpu_packages[%d]" % i, p, _PACKAGE, "must be a package name of [A-Za-z0-9.+_:~-]")
            for i, p in enumerate(as_list("vllm_cpu_packages", role_value(v, "vllm_cpu_packages")))],
        "vllm_install": checks.boolean("vllm_install", role_value(v, "vllm_install")),
        "vllm_manage_user": checks.boolean("vllm_manage_user", role_value(v, "vllm_manage_user")),
        "manage_service": manage_service(role_value(v, "vllm_manage_service"), v.get("service_mgr", "")),
        "vllm_hardening_strict": checks.boolean("vllm_hardening_strict", role_value(v, "vllm_hardening_strict")),
        "vllm_ready_request": checks.boolean("vllm_ready_request", role_value(v, "vllm_ready_request")),
        "vllm_agent_engine_load": checks.boolean("vllm_agent_engine_load", role_value(v, "vllm_agent_engine_load")),
    })


def _check_timeouts(v, out):
    """The integers, each within its limits, and the timeouts that must exceed others."""
    checked = {}
    for name, limit in INTEGERS.items():
        checked[name] = checks.integer(name, role_value(v, name), limit.minimum, limit.maximum)
    for name, inner in (("vllm_timeout_start_sec", "vllm_engine_ready_timeout"),
                        ("vllm_timeout_stop_sec", "vllm_shutdown_timeout")):
        if checked[name] <= checked[inner]:
            checks.fail(name, "must be above %s (%d)" % (inner, checked[inner]), checked[name])
    if checked["vllm_health_timeout"] < checked["vllm_health_delay"]:
        checks.fail("vllm_health_timeout", "must be at least vllm_health_delay (%d)" % checked["vllm_health_delay"],
                    checked["vllm_health_timeout"])
    return checked


def _check_extra_args(v, out):
    """vllm_extra_args: long options of vllm serve, none the unit sets itself,
    with values the engine reads as values (engine_checks)."""
    extra = {}
    for key, value in mapping("vllm_extra_args", role_value(v, "vllm_extra_args")).items():
        key = checks.text("vllm_extra_args key", key if isinstance(key, str) else repr(key), _OPTION,
                          "must be a long option name: lower case, digits, _ and -, no leading dashes")
        engine_checks.check_unreserved(key, RESERVED_OPTIONS)
        extra[key] = engine_checks.check_words(key, _yaml_value("vllm_extra_args.%s" % key, value))
    return {"vllm_extra_args": extra}


def _check_environment(v, out):
    """vllm_environment: variables the role does not set itself."""
    environment = {}
    for key, value in mapping("vllm_environment", role_value(v, "vllm_environment")).items():
        key = checks.text("vllm_environment key", key if isinstance(key, str) else repr(key), _ENV_NAME,
                          "must be a variable name of [A-Za-z0-9_], not starting with a digit")
        if key in RESERVED_ENVIRONMENT:
            checks.fail("vllm_environment key", "must not set what the role sets (%s)"
                        % ", ".join(RESERVED_ENVIRONMENT), key)
        environment[key] = _scalar_text("vllm_environment.%s" % key, value)
    if out["vllm_download_weights"] and model_source(out["vllm_model"]) == "hub" and "HF_HUB_OFFLINE" in environment:
        checks.fail("vllm_environment key", "must not set HF_HUB_OFFLINE while vllm_download_weights is true "
                    "(the role sets it once the weights are local)", "HF_HUB_OFFLINE")
    return {"vllm_environment": environment}


def _check_hardening(v, out):
    """vllm_hardening: sandboxing directives, and with vllm_hardening_strict the strict set on top."""
    hardening = []
    for key, value in sorted(mapping("vllm_hardening", role_value(v, "vllm_hardening")).items()):
        key = checks.text("vllm_hardening key", key if isinstance(key, str) else repr(key), _DIRECTIVE,
                          "must be a [Service] directive name (CamelCase letters)")
        if key in RESERVED_DIRECTIVES or key.startswith("Exec"):
            checks.fail("vllm_hardening key", "must be a sandboxing directive, not one the unit sets itself "
                        "or an Exec*= command", key)
        if isinstance(value, bool):
            value = "yes" if value else "no"
        hardening.append([key, _scalar_text("vllm_hardening.%s" % key, value)])
    if out["vllm_hardening_strict"]:
        # SystemCallFilter= adds up (the allow-list above, then these denials);
        # the other strict directives replace vllm_hardening's.
        strict = devices.strict_hardening(out["device"])
        replaced = set(entry[0] for entry in strict if entry[0] != "SystemCallFilter") | set(["DeviceAllow"])
        hardening = [entry for entry in hardening if entry[0] not in replaced] + strict
    return {"vllm_hardening": hardening}


def _check_multinode_variables(v, out):
    """The head addresses, socket interfaces and rolling hosts of multi-node instances."""
    checked = {"vllm_allow_loopback_master": checks.boolean("vllm_allow_loopback_master",
                                                            role_value(v, "vllm_allow_loopback_master"))}
    checked["vllm_node_addresses"] = dict(
        (names.inventory_host("vllm_node_addresses key", h if isinstance(h, str) else repr(h)), a)
        for h, a in mapping("vllm_node_addresses", role_value(v, "vllm_node_addresses") or {}).items())
    ifname = role_value(v, "vllm_socket_ifname") or ""
    checked["vllm_socket_ifname"] = checks.text("vllm_socket_ifname", ifname, _IFNAMES,
                                                "must be network interface names of [A-Za-z0-9_.:@-] (up to 15 "
                                                "characters each, comma-separated, as NCCL_SOCKET_IFNAME takes them)",
                                                allow_empty=True) if ifname else ""
    if checked["vllm_socket_ifname"]:
        for name in SOCKET_IFNAME_ENVIRONMENT:
            if name in out["vllm_environment"]:
                checks.fail("vllm_environment key", "must not set %s while vllm_socket_ifname is set (the role "
                            "sets it on multi-node units)" % name, name)
    checked["vllm_rollout_hosts"] = [
        names.inventory_host("vllm_rollout_hosts[%d]" % i, h)
        for i, h in enumerate(as_list("vllm_rollout_hosts", role_value(v, "vllm_rollout_hosts") or []))]
    return checked


def check_download_variables(v, out=None):
    """vllm_download_*, checked (an empty vllm_download_python is vllm_venv's)."""
    checked = {"vllm_download_weights": checks.boolean("vllm_download_weights", role_value(v, "vllm_download_weights"))}
    python = role_value(v, "vllm_download_python") or ""
    checked["vllm_download_python"] = checks.absolute_path(
        "vllm_download_python", python, allow_empty=True) or checks.absolute_path(
            "vllm_venv", role_value(v, "vllm_venv")) + "/bin/python"
    checked["vllm_download_timeout"] = checks.integer("vllm_download_timeout", role_value(v, "vllm_download_timeout"),
                                                      1, 10 ** 7)
    checked["vllm_download_poll"] = checks.integer("vllm_download_poll", role_value(v, "vllm_download_poll"), 1, 3600)
    checked["vllm_download_ignore_patterns"] = [
        checks.text("vllm_download_ignore_patterns[%d]" % i, p, r"[^\s].{0,254}", "must be a glob on one line")
        for i, p in enumerate(as_list("vllm_download_ignore_patterns",
                                      role_value(v, "vllm_download_ignore_patterns")))]
    return checked


def gateways(gateways, backends):
    """vllm_gateways {inventory host: admin socket path ('' skips it)} and
    vllm_gateway_backends (gateway_backends entries: name, host, backend)."""
    checked = {}
    for host, socket in sorted(mapping("vllm_gateways", gateways if gateways is not None else {}).items()):
        host = names.inventory_host("vllm_gateways key", host if isinstance(host, str) else repr(host))
        socket = checks.absolute_path("vllm_gateways.%s" % host, socket if socket is not None else "", allow_empty=True)
        if socket:
            checked[host] = socket
    servers = []
    for i, entry in enumerate(as_list("vllm_gateway_backends", backends if backends is not None else [])):
        where = "vllm_gateway_backends[%d]" % i
        entry = mapping(where, entry)
        if "name" not in entry:
            checks.fail(where, "lacks name (gateway_backends entries carry it)", entry)
        server = checks.text(where + ".name", entry["name"], gateway_settings.SERVER_NAME,
                             gateway_settings.SERVER_NAME_RULE)
        host = checks.text(where + ".host", entry.get("host", ""), allow_empty=True)
        backend = checks.text(where + ".backend", entry.get("backend") or DEFAULT_GATEWAY_BACKEND,
                              gateway_settings.SERVER_NAME, "must be an HAProxy backend name of [A-Za-z0-9_.:-]")
        servers.append({"host": host, "server": server, "backend": backend})
    return checked, servers
