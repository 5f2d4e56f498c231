# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What each vLLM unit of a host runs: the contract between the plan and role vllm.

`host_units(instances, variables)` checks the role's variables and this
host's plan instances (docs/plan.md) and returns, per instance, the exact
argv and environment its unit runs, and the systemd NUMA directives when
binding by systemd. The role's template only places these values (one
word per argument, quoted for systemd); it decides nothing.

Binding comes from each instance's `binding` {mode, cpus, mems, policy,
by_node, workers} as the plan computed it: by_node true binds by node
(numactl --cpunodebind=MEMS), false by CPU list (--physcpubind=CPUS); the
memory policy is --membind=MEMS or --interleave=MEMS. With vllm_binding
systemd the same values become CPUAffinity=, NUMAPolicy= and NUMAMask=.
In mode per_worker that binds the API server process, and vLLM binds
each GPU worker itself: --numa-bind, --numa-bind-nodes (one node per GPU
in worker order) and, when binding by CPU list, --numa-bind-cpus (vLLM
0.20 and newer; spawned workers, VLLM_WORKER_MULTIPROC_METHOD=spawn).

Readiness: vLLM cannot tell systemd when it serves, so the unit's
ExecStartPost= runs the shipped gpufleet-wait-ready, which polls the
instance's /health for up to vllm_engine_ready_timeout seconds: `systemctl
start` returns when the instance serves, a model that never loads is a
failed start, and units ordered after it start after it is ready. Before
start, ExecStartPre=-+ runs nvidia-modprobe (with full privileges, which
NoNewPrivileges= and ProtectKernelModules= deny the service itself) so that
nvidia-uvm and its device nodes exist; the `-` makes a host without it
harmless. The NVIDIA services are wanted and ordered before the unit
(a Wants= of a unit that does not exist is ignored).

Multi-node instances (plan field multinode): every host of the instance
runs one unit with vLLM's --nnodes, --node-rank, --master-addr (the
head's address from vllm_node_addresses) and --master-port; the head
(rank 0) serves the API and waits for /health as above, the others run
--headless, serve nothing, and wait before start until the head's master
port answers. NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME come from
vllm_socket_ifname. All hosts of such an instance must roll together
(vllm_rollout_hosts): a head restarted without its workers cannot serve.

Draining: each unit names the gateway servers in front of it (vllm_gateways,
vllm_gateway_backends): the role drains them on each gateway's HAProxy
runtime socket before the instance stops and readies them after /health.

Every value that reaches a unit, an option file or a command line passes a
check of plugins/module_utils/common/checks.py first; errors are ValueError
naming the variable (or vllm_instances[i] and the field) and the rule.
Pure functions, standard library only.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as vc
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract

MANAGED_MARKER = "# Managed by gpufleet.numa (role vllm)"

# Options the unit sets itself; vllm_extra_args must not repeat them.
RESERVED_OPTIONS = (
    "api-key", "config", "headless", "host", "master-addr", "master-port", "model", "nnodes", "node-rank",
    "numa-bind", "numa-bind-cpus", "numa-bind-nodes", "pipeline-parallel-size", "port", "served-model-name",
    "shutdown-timeout", "tensor-parallel-size",
)
# Set on a multi-node instance's units when vllm_socket_ifname names the interface.
SOCKET_IFNAME_ENVIRONMENT = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
# Per-worker binding (binding.mode per_worker): the first vLLM release with
# --numa-bind, --numa-bind-nodes and --numa-bind-cpus.
PER_WORKER_SINCE = (0, 20)
# Environment variables the unit sets itself; vllm_environment must not repeat them.
RESERVED_ENVIRONMENT = (
    "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "HF_HOME", "HF_TOKEN", "TRITON_CACHE_DIR",
    "VLLM_API_KEY", "VLLM_CACHE_ROOT", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_PORT", "XDG_CACHE_HOME",
)
# [Service] settings the unit writes itself; vllm_hardening must not repeat them.
RESERVED_DIRECTIVES = (
    "CPUAffinity", "Environment", "EnvironmentFile", "Group", "KillMode", "LimitMEMLOCK", "LimitNOFILE",
    "NUMAMask", "NUMAPolicy", "ReadWritePaths", "Restart", "RestartSec", "SyslogIdentifier",
    "TimeoutStartSec", "TimeoutStopSec", "Type", "User", "WorkingDirectory",
)
# Services a GPU unit waits for where they exist (persistence daemon; the
# fabric manager of NVSwitch systems).
NVIDIA_SERVICES = ("nvidia-persistenced.service", "nvidia-fabricmanager.service")
# HAProxy backend of gateway_backends entries without a `backend` field.
DEFAULT_GATEWAY_BACKEND = "vllm"
# Helper programs the role installs into vllm_libexec_dir (roles/vllm/files).
CHECKER = "gpufleet-verify-unit"
WAIT_READY = "gpufleet-wait-ready"

# Opt-in sandboxing on top of vllm_hardening (vllm_hardening_strict). The
# device allow-list keeps every NVIDIA node: nvidiactl and nvidia[0-9]* are
# major nvidia-frontend, nvidia-uvm and nvidia-uvm-tools major nvidia-uvm,
# MIG capabilities nvidia-caps. The syscall filter keeps @resources' NUMA
# and affinity calls (set_mempolicy, mbind, migrate_pages, move_pages,
# sched_setaffinity; get_mempolicy is in @system-service) and setrlimit.
# A list value writes the directive once per element.
STRICT_HARDENING = (
    ("SystemCallFilter", ["~@privileged",
                          "~ioprio_set nice sched_setattr sched_setparam sched_setscheduler setpriority"]),
    ("DevicePolicy", "closed"),
    ("DeviceAllow", ["char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw"]),
    # Safe with the explicit allow-list above (it only adds char-rtc r).
    ("ProtectClock", "yes"),
    ("PrivateUsers", "yes"),
    ("UMask", "0077"),
)

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,100}"
_UNIT_PREFIX = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}"
_OPTION = r"[a-z0-9][a-z0-9_-]{0,99}"
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_DIRECTIVE = r"[A-Z][A-Za-z]{1,63}"
_CPULIST = r"[0-9]{1,5}(?:-[0-9]{1,5})?(?:,[0-9]{1,5}(?:-[0-9]{1,5})?)*"
_VERSION = r"[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}"
_PACKAGE = r"[A-Za-z0-9][A-Za-z0-9.+_:~-]{0,127}"
_PROGRAM = r"[A-Za-z0-9_./+][A-Za-z0-9_./+-]{0,254}"
# A Hugging Face Hub repository id (huggingface_hub's validate_repo_id):
# NAME or ORG/NAME of [A-Za-z0-9_.-], no '--' or '..', not starting or
# ending with '-' or '.'.
_HUB_PART = r"(?![-.])(?!.*(?:--|\.\.))[A-Za-z0-9_.-]{1,96}(?<![-.])"
_HUB_ID = r"%s(?:/%s)?" % (_HUB_PART, _HUB_PART)
# NCCL_SOCKET_IFNAME's value: interface names (Linux: up to 15 characters), comma-separated,
# optionally prefixed with ^ (exclude) or = (exact match).
_IFNAMES = r"[\^=]?[A-Za-z0-9_.:@-]{1,15}(?:,[A-Za-z0-9_.:@-]{1,15})*"

# Role variables this module reads, with the check each passes.
PATH_VARIABLES = ("vllm_state_dir", "vllm_hf_home", "vllm_cache_dir", "vllm_config_dir", "vllm_unit_dir",
                  "vllm_libexec_dir", "vllm_venv", "vllm_numactl")


def _mapping(name, value):
    if not isinstance(value, dict):
        vc.fail(name, "must be a mapping", value)
    return value


def _list(name, value):
    if not isinstance(value, (list, tuple)):
        vc.fail(name, "must be a list", value)
    return list(value)


def _yaml_value(name, value, depth=0):
    """A vllm_extra_args value: a scalar, or lists and mappings of them;
    strings on one line."""
    if depth > 4:
        vc.fail(name, "must not nest deeper than 4 levels", value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return vc.text(name, value, allow_empty=True)
    if isinstance(value, (list, tuple)):
        return [_yaml_value("%s[%d]" % (name, i), v, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            vc.text("%s key" % name, key if isinstance(key, str) else repr(key), r"[A-Za-z0-9_.-]{1,100}",
                    "must be a name of [A-Za-z0-9_.-]")
            out[str(key)] = _yaml_value("%s.%s" % (name, key), item, depth + 1)
        return out
    vc.fail(name, "must be a string, number, boolean, list or mapping", value)


def _scalar_text(name, value):
    """A string or number that becomes one line of text."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        vc.fail(name, "must be a string or a number (quote yes, no, true and false)", value)
    return vc.text(name, str(value), allow_empty=True)


def _secret(name, value):
    """A secret on one line; the message never shows the value."""
    try:
        vc.text(name, value, allow_empty=True)
    except ValueError:
        raise ValueError("%s: must be a string on one line without control characters (value hidden)" % name)


def _manage_service(value, service_mgr):
    """vllm_manage_service: auto (where systemd is the service manager), true or false."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return service_mgr == "systemd"
    try:
        return vc.boolean("vllm_manage_service", value)
    except ValueError:
        vc.fail("vllm_manage_service", "must be auto, true or false", value)


def check_variables(variables):
    """The role's variables, checked and in canonical form (a new dict)."""
    v = variables
    out = {}
    for name in ("vllm_model", "vllm_instances"):
        if name not in v or v[name] is None:
            vc.fail(name, "is required", None)
    out["vllm_model"] = vc.command_word("vllm_model", v["vllm_model"])
    served = vc.text("vllm_served_model_name", v.get("vllm_served_model_name", ""), allow_empty=True)
    contract.served_name(out["vllm_model"], served)
    out["vllm_served_model_name"] = served
    out["vllm_listen_host"] = vc.address("vllm_listen_host", v.get("vllm_listen_host", "127.0.0.1"))
    out["vllm_binding"] = vc.choice("vllm_binding", v.get("vllm_binding", "numactl"), ("numactl", "systemd"))
    for name in PATH_VARIABLES:
        out[name] = vc.absolute_path(name, v.get(name))
    out["vllm_executable"] = vc.absolute_path("vllm_executable", v.get("vllm_executable", ""), allow_empty=True)
    out["vllm_nvidia_modprobe"] = vc.absolute_path("vllm_nvidia_modprobe", v.get(
        "vllm_nvidia_modprobe", "/usr/bin/nvidia-modprobe"), allow_empty=True)
    out["vllm_unit_prefix"] = vc.text("vllm_unit_prefix", v.get("vllm_unit_prefix", "gpufleet-"), _UNIT_PREFIX,
                                      "must be [A-Za-z0-9_.-], not starting with '.' or '-'", allow_empty=True)
    out["vllm_user"] = vc.account("vllm_user", v.get("vllm_user", "vllm"))
    out["vllm_group"] = vc.account("vllm_group", v.get("vllm_group", "vllm"))
    _secret("vllm_hf_token", v.get("vllm_hf_token", ""))
    # One rule for every API key (value_checks.api_key): the gateway sends
    # this key to the instances and must place it exactly.
    if v.get("vllm_api_key") not in (None, ""):
        vc.api_key("vllm_api_key", v["vllm_api_key"])
    out["vllm_allow_unauthenticated"] = vc.boolean("vllm_allow_unauthenticated",
                                                   v.get("vllm_allow_unauthenticated", False))
    # Anything that listens beyond loopback needs a key (vLLM checks it on /v1/*).
    api_key = v.get("vllm_api_key", "")
    if (api_key is None or api_key == "") and not vc.is_loopback(out["vllm_listen_host"]) \
            and not out["vllm_allow_unauthenticated"]:
        raise ValueError(
            "vllm_api_key: is required when vllm_listen_host is not a loopback address (got %s): set it "
            "(from a vault; the gateway passes it on), listen on 127.0.0.1, or set "
            "vllm_allow_unauthenticated: true to let anyone who reaches the port in" % out["vllm_listen_host"])
    out["vllm_version"] = vc.text("vllm_version", v.get("vllm_version", "0.33.0"), _VERSION,
                                  "must be a version of [0-9A-Za-z.+!_-]")
    out["vllm_python"] = vc.command_word(
        "vllm_python", vc.text("vllm_python", v.get("vllm_python", "python3"), _PROGRAM,
                               "must be a program name or path of [A-Za-z0-9_./+-]"))
    out["vllm_packages"] = [
        vc.text("vllm_packages[%d]" % i, p, _PACKAGE, "must be a package name of [A-Za-z0-9.+_:~-]")
        for i, p in enumerate(_list("vllm_packages", v.get("vllm_packages", [])))]
    out["vllm_install"] = vc.boolean("vllm_install", v.get("vllm_install", True))
    out["vllm_manage_user"] = vc.boolean("vllm_manage_user", v.get("vllm_manage_user", True))
    out["manage_service"] = _manage_service(v.get("vllm_manage_service", "auto"), v.get("service_mgr", ""))
    out["vllm_hardening_strict"] = vc.boolean("vllm_hardening_strict", v.get("vllm_hardening_strict", False))
    out.update(check_download_variables(v))

    # name: (role default, least value)
    ints = {"vllm_engine_ready_timeout": (600, 1), "vllm_shutdown_timeout": (30, 0), "vllm_restart_sec": (10, 0),
            "vllm_limit_nofile": (65536, 1), "vllm_health_timeout": (3600, 1), "vllm_health_delay": (10, 1),
            "vllm_drain_timeout": (60, 0)}
    for name, (default, minimum) in ints.items():
        out[name] = vc.integer(name, v.get(name, default), minimum, 10 ** 9)
    out["vllm_timeout_start_sec"] = vc.integer("vllm_timeout_start_sec", v.get(
        "vllm_timeout_start_sec", out["vllm_engine_ready_timeout"] + 900), 1, 10 ** 9)
    out["vllm_timeout_stop_sec"] = vc.integer("vllm_timeout_stop_sec", v.get(
        "vllm_timeout_stop_sec", out["vllm_shutdown_timeout"] + 60), 1, 10 ** 9)
    if out["vllm_timeout_start_sec"] <= out["vllm_engine_ready_timeout"]:
        vc.fail("vllm_timeout_start_sec", "must be above vllm_engine_ready_timeout (%d)"
                % out["vllm_engine_ready_timeout"], out["vllm_timeout_start_sec"])
    if out["vllm_timeout_stop_sec"] <= out["vllm_shutdown_timeout"]:
        vc.fail("vllm_timeout_stop_sec", "must be above vllm_shutdown_timeout (%d)"
                % out["vllm_shutdown_timeout"], out["vllm_timeout_stop_sec"])
    if out["vllm_health_timeout"] < out["vllm_health_delay"]:
        vc.fail("vllm_health_timeout", "must be at least vllm_health_delay (%d)" % out["vllm_health_delay"],
                out["vllm_health_timeout"])

    extra = {}
    for key, value in _mapping("vllm_extra_args", v.get("vllm_extra_args", {})).items():
        key = vc.text("vllm_extra_args key", key if isinstance(key, str) else repr(key), _OPTION,
                      "must be a long option name: lower case, digits, _ and -, no leading dashes")
        if key.replace("_", "-") in RESERVED_OPTIONS:
            vc.fail("vllm_extra_args key", "must not set options the unit sets itself (%s)"
                    % ", ".join(RESERVED_OPTIONS), key)
        extra[key] = _yaml_value("vllm_extra_args.%s" % key, value)
    out["vllm_extra_args"] = extra

    environment = {}
    for key, value in _mapping("vllm_environment", v.get("vllm_environment", {})).items():
        key = vc.text("vllm_environment key", key if isinstance(key, str) else repr(key), _ENV_NAME,
                      "must be a variable name of [A-Za-z0-9_], not starting with a digit")
        if key in RESERVED_ENVIRONMENT:
            vc.fail("vllm_environment key", "must not set what the role sets (%s)"
                    % ", ".join(RESERVED_ENVIRONMENT), key)
        environment[key] = _scalar_text("vllm_environment.%s" % key, value)
    if out["vllm_download_weights"] and model_source(out["vllm_model"]) == "hub" and "HF_HUB_OFFLINE" in environment:
        vc.fail("vllm_environment key", "must not set HF_HUB_OFFLINE while vllm_download_weights is true "
                "(the role sets it once the weights are local)", "HF_HUB_OFFLINE")
    out["vllm_environment"] = environment

    hardening = []
    for key, value in sorted(_mapping("vllm_hardening", v.get("vllm_hardening", {})).items()):
        key = vc.text("vllm_hardening key", key if isinstance(key, str) else repr(key), _DIRECTIVE,
                      "must be a [Service] directive name (CamelCase letters)")
        if key in RESERVED_DIRECTIVES or key.startswith("Exec"):
            vc.fail("vllm_hardening key", "must be a sandboxing directive, not one the unit sets itself "
                    "or an Exec*= command", key)
        if isinstance(value, bool):
            value = "yes" if value else "no"
        hardening.append([key, _scalar_text("vllm_hardening.%s" % key, value)])
    if out["vllm_hardening_strict"]:
        # SystemCallFilter= adds up (the allow-list above, then these denials);
        # the other strict directives replace vllm_hardening's.
        replaced = set(key for key, dummy in STRICT_HARDENING if key != "SystemCallFilter")
        hardening = [entry for entry in hardening if entry[0] not in replaced]
        for key, value in STRICT_HARDENING:
            for item in value if isinstance(value, list) else [value]:
                hardening.append([key, item])
    out["vllm_hardening"] = hardening
    out["vllm_allow_loopback_master"] = vc.boolean("vllm_allow_loopback_master",
                                                   v.get("vllm_allow_loopback_master", False))
    out["vllm_node_addresses"] = dict(
        (vc.text("vllm_node_addresses key", h if isinstance(h, str) else repr(h), gateway_settings.INVENTORY_HOST,
                 gateway_settings.INVENTORY_HOST_RULE), a)
        for h, a in _mapping("vllm_node_addresses", v.get("vllm_node_addresses") or {}).items())
    ifname = v.get("vllm_socket_ifname") or ""
    out["vllm_socket_ifname"] = vc.text("vllm_socket_ifname", ifname, _IFNAMES,
                                        "must be network interface names of [A-Za-z0-9_.:@-] (up to 15 characters "
                                        "each, comma-separated, as NCCL_SOCKET_IFNAME takes them)",
                                        allow_empty=True) if ifname else ""
    if out["vllm_socket_ifname"]:
        for name in SOCKET_IFNAME_ENVIRONMENT:
            if name in environment:
                vc.fail("vllm_environment key", "must not set %s while vllm_socket_ifname is set (the role "
                        "sets it on multi-node units)" % name, name)
    out["vllm_rollout_hosts"] = [
        vc.text("vllm_rollout_hosts[%d]" % i, h, gateway_settings.INVENTORY_HOST, gateway_settings.INVENTORY_HOST_RULE)
        for i, h in enumerate(_list("vllm_rollout_hosts", v.get("vllm_rollout_hosts") or []))]
    out["vllm_gateways"], out["vllm_gateway_backends"] = _gateways(
        v.get("vllm_gateways", {}), v.get("vllm_gateway_backends", []))
    return out


def _gateways(gateways, backends):
    """vllm_gateways {inventory host: admin socket path ('' skips it)} and
    vllm_gateway_backends (gateway_backends entries: name, host, backend)."""
    checked = {}
    for host, socket in sorted(_mapping("vllm_gateways", gateways if gateways is not None else {}).items()):
        host = vc.text("vllm_gateways key", host if isinstance(host, str) else repr(host),
                       gateway_settings.INVENTORY_HOST, gateway_settings.INVENTORY_HOST_RULE)
        socket = vc.absolute_path("vllm_gateways.%s" % host, socket if socket is not None else "", allow_empty=True)
        if socket:
            checked[host] = socket
    servers = []
    for i, entry in enumerate(_list("vllm_gateway_backends", backends if backends is not None else [])):
        where = "vllm_gateway_backends[%d]" % i
        entry = _mapping(where, entry)
        if "name" not in entry:
            vc.fail(where, "lacks name (gateway_backends entries carry it)", entry)
        server = vc.text(where + ".name", entry["name"], gateway_settings.SERVER_NAME,
                         gateway_settings.SERVER_NAME_RULE)
        host = vc.text(where + ".host", entry.get("host", ""), allow_empty=True)
        backend = vc.text(where + ".backend", entry.get("backend") or DEFAULT_GATEWAY_BACKEND,
                          gateway_settings.SERVER_NAME, "must be an HAProxy backend name of [A-Za-z0-9_.:-]")
        servers.append({"host": host, "server": server, "backend": backend})
    return checked, servers


def health_url(host, port):
    """Where the role and the unit ask for /health: wildcard listen
    addresses are reached over loopback, IPv6 addresses in brackets."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return "http://%s:%d/health" % ("[%s]" % host if ":" in host else host, port)


def tcp_url(host, port):
    """What gpufleet-wait-ready polls for a port that only has to accept connections."""
    return "tcp://%s:%d" % ("[%s]" % host if ":" in host else host, port)


def drain_targets(instance_name, v, inventory_host):
    """The gateway servers of one instance: (gateway host, socket, backend,
    server) for every gateway with a socket and every gateway_backends entry
    named <inventory host>-<instance> (the server name gateway_backends gives)."""
    name = contract.server_name(inventory_host, instance_name)
    return [{"gateway": gateway, "socket": socket, "backend": entry["backend"], "server": entry["server"]}
            for gateway, socket in sorted(v["vllm_gateways"].items())
            for entry in v["vllm_gateway_backends"]
            if entry["server"] == name and entry["host"] in ("", inventory_host)]


def check_instance(index, instance):
    """One plan instance (docs/plan.md), checked; returns the fields the unit uses."""
    where = "vllm_instances[%d]" % index
    if not isinstance(instance, dict):
        vc.fail(where, "must be a plan instance (a mapping)", instance)
    label = "%s (%s)" % (where, instance.get("name")) if isinstance(instance.get("name"), str) else where
    missing = [f for f in ("name", "tp_size", "pp_size", "gpu_indices", "binding", "port", "dist_port")
               if f not in instance]
    if missing:
        raise ValueError("%s: lacks %s (fleet_plan instances carry them; docs/plan.md)"
                         % (label, ", ".join(missing)))
    name = vc.text(where + ".name", instance["name"], _NAME, "must be [A-Za-z0-9_.-], starting with a letter or digit")
    tp_size = vc.integer(label + ".tp_size", instance["tp_size"], 1, 1024)
    pp_size = vc.integer(label + ".pp_size", instance["pp_size"], 1, 1024)
    gpus = [vc.integer("%s.gpu_indices[%d]" % (label, i), g, 0, 4095)
            for i, g in enumerate(_list(label + ".gpu_indices", instance["gpu_indices"]))]
    multinode = _multinode(label, instance.get("multinode"), pp_size)
    nnodes = multinode["nnodes"] if multinode else 1
    local = contract.share(tp_size, pp_size, nnodes).gpus
    if len(gpus) != local or len(set(gpus)) != len(gpus):
        vc.fail(label + ".gpu_indices", "must list tp_size * pp_size%s = %d distinct GPUs (got %d for tp %d, pp %d)"
                % (" / multinode.nnodes" if nnodes != 1 else "", local, len(set(gpus)), tp_size, pp_size), gpus)
    binding = _mapping(label + ".binding", instance["binding"])
    for field in ("cpus", "mems", "policy", "by_node"):
        if field not in binding:
            vc.fail(label + ".binding", "lacks %s (needs cpus, mems, policy, by_node)" % field, binding)
    cpus = vc.text(label + ".binding.cpus", binding["cpus"], _CPULIST, "must be a cpulist such as 0-47,96-143")
    try:
        parse_cpulist(cpus)
    except ValueError as exc:
        vc.fail(label + ".binding.cpus", str(exc), cpus)
    mems = [vc.integer("%s.binding.mems[%d]" % (label, i), m, 0, 4095)
            for i, m in enumerate(_list(label + ".binding.mems", binding["mems"]))]
    if not mems or mems != sorted(set(mems)):
        vc.fail(label + ".binding.mems", "must be a non-empty sorted list of distinct NUMA nodes", mems)
    policy = vc.choice(label + ".binding.policy", binding["policy"], ("bind", "interleave"))
    if not isinstance(binding["by_node"], bool):
        vc.fail(label + ".binding.by_node", "must be a boolean", binding["by_node"])
    # Plans kept from before per-worker binding have no mode: they bind by process.
    mode = vc.choice(label + ".binding.mode", binding.get("mode", "process"), ("process", "per_worker"))
    workers = _workers(label, binding, gpus, cpus) if mode == "per_worker" else []
    port = vc.port(label + ".port", instance["port"])
    dist_port = vc.port(label + ".dist_port", instance["dist_port"])
    reason = instance.get("reason", "")
    # The plan's own words, shown in a comment: one line, no continuation.
    reason = re.sub(r"[\x00-\x1f\x7f]+", " ", str(reason)).rstrip("\\ ")
    return {"name": name, "tp_size": tp_size, "pp_size": pp_size, "gpu_indices": gpus, "cpus": cpus,
            "mems": mems, "policy": policy, "by_node": binding["by_node"], "mode": mode, "workers": workers,
            "port": port, "dist_port": dist_port, "reason": reason, "multinode": multinode}


def _multinode(label, value, pp_size):
    """The multinode field of a plan instance (docs/plan.md), checked; None for a one-host instance."""
    if value is None:
        return None
    where = label + ".multinode"
    value = _mapping(where, value)
    for field in ("nnodes", "node_rank", "head", "hosts", "master_port"):
        if field not in value:
            vc.fail(where, "lacks %s (fleet_plan's multi-node instances carry nnodes, node_rank, head, hosts, "
                    "master_port)" % field, value)
    nnodes = vc.integer(where + ".nnodes", value["nnodes"], 2, 1024)
    rank = vc.integer(where + ".node_rank", value["node_rank"], 0, nnodes - 1)
    hosts = [vc.text("%s.hosts[%d]" % (where, i), h, gateway_settings.INVENTORY_HOST,
                     gateway_settings.INVENTORY_HOST_RULE)
             for i, h in enumerate(_list(where + ".hosts", value["hosts"]))]
    if len(hosts) != nnodes or len(set(hosts)) != nnodes:
        vc.fail(where + ".hosts", "must name nnodes (%d) distinct hosts in rank order" % nnodes, hosts)
    if value["head"] != hosts[0]:
        vc.fail(where + ".head", "must be the first of hosts (%s)" % hosts[0], value["head"])
    if pp_size % nnodes:
        vc.fail(where + ".nnodes", "must divide pp_size %d (each host runs pp_size / nnodes stages)" % pp_size,
                nnodes)
    return {"nnodes": nnodes, "node_rank": rank, "head": hosts[0], "hosts": hosts,
            "master_port": vc.port(where + ".master_port", value["master_port"])}


def _workers(label, binding, gpus, cpus):
    """binding.workers of a per_worker instance: one {gpu_index, node, cpus}
    per GPU in the order of gpu_indices. Binding by CPU list, each worker's
    CPUs lie inside the process's: vLLM starts the worker under numactl
    --physcpubind, which refuses CPUs outside its parent's set."""
    where = label + ".binding.workers"
    workers = [_mapping("%s[%d]" % (where, i), w) for i, w in enumerate(_list(where, binding.get("workers", [])))]
    if [w.get("gpu_index") for w in workers] != gpus:
        vc.fail(where, "must hold one entry per GPU in the order of gpu_indices %s" % _join(gpus),
                workers)
    allowed = set(parse_cpulist(cpus))
    out = []
    for i, worker in enumerate(workers):
        node = vc.integer("%s[%d].node" % (where, i), worker.get("node"), 0, 4095)
        worker_cpus = ""
        if not binding["by_node"]:
            worker_cpus = vc.text("%s[%d].cpus" % (where, i), worker.get("cpus"), _CPULIST,
                                  "must be a cpulist such as 0-47,96-143")
            try:
                outside = set(parse_cpulist(worker_cpus)) - allowed
            except ValueError as exc:
                vc.fail("%s[%d].cpus" % (where, i), str(exc), worker_cpus)
            if outside:
                vc.fail("%s[%d].cpus" % (where, i), "must lie inside binding.cpus %s (numactl refuses a worker's "
                        "CPUs outside its parent's)" % cpus, worker_cpus)
        out.append({"node": node, "cpus": worker_cpus})
    return out


def check_instances(instances):
    checked = [check_instance(i, inst) for i, inst in enumerate(_list("vllm_instances", instances))]
    seen = {}
    for inst in checked:
        for what, value in (("name", inst["name"]), ("port", inst["port"]), ("port", inst["dist_port"])):
            key = (what, value)
            if key in seen:
                raise ValueError("vllm_instances: %s and %s collide on %s %s (names, API ports and VLLM_PORT "
                                 "bases must be unique on a host)" % (seen[key], inst["name"], what, value))
            seen[key] = inst["name"]
    return checked


def _unique(values):
    out = []
    for value in values:
        if value not in out:
            out.append(value)
    return out


def _join(values):
    return ",".join(str(v) for v in values)


def instance_unit(inst, v, inventory_host="this host"):
    """The argv, environment and directives of one instance's unit."""
    mems = _join(inst["mems"])
    unit = v["vllm_unit_prefix"] + inst["name"]
    executable = v["vllm_executable"] or v["vllm_venv"] + "/bin/vllm"
    prefix = []
    numa = []
    if v["vllm_binding"] == "numactl":
        cpu = "--cpunodebind=" + mems if inst["by_node"] else "--physcpubind=" + inst["cpus"]
        memory = ("--membind=" if inst["policy"] == "bind" else "--interleave=") + mems
        prefix = [v["vllm_numactl"], cpu, memory]
    else:
        numa = [["CPUAffinity", inst["cpus"]], ["NUMAPolicy", inst["policy"]], ["NUMAMask", mems]]
    command = prefix + [executable, "serve", v["vllm_model"]]
    options = [["--tensor-parallel-size", str(inst["tp_size"])]]
    if inst["pp_size"] > 1:
        options.append(["--pipeline-parallel-size", str(inst["pp_size"])])
    multinode = inst["multinode"]
    socket_environment = []
    if multinode is not None and v["vllm_socket_ifname"]:
        socket_environment = [[name, v["vllm_socket_ifname"]] for name in SOCKET_IFNAME_ENVIRONMENT]
    worker_environment = []
    if inst["mode"] == "per_worker":
        options.append(["--numa-bind"])
        options.append(["--numa-bind-nodes"] + [str(w["node"]) for w in inst["workers"]])
        if not inst["by_node"]:
            options.append(["--numa-bind-cpus"] + [w["cpus"] for w in inst["workers"]])
        # vLLM binds a worker by starting it through numactl: spawned, not forked.
        if "VLLM_WORKER_MULTIPROC_METHOD" not in v["vllm_environment"]:
            worker_environment = [["VLLM_WORKER_MULTIPROC_METHOD", "spawn"]]
    head = contract.is_head(inst)
    if multinode is not None:
        master = v["vllm_node_addresses"][multinode["head"]]
        options += [["--nnodes", str(multinode["nnodes"])], ["--node-rank", str(multinode["node_rank"])],
                    ["--master-addr", master], ["--master-port", str(multinode["master_port"])]]
    if head:
        options += [["--host", v["vllm_listen_host"]], ["--port", str(inst["port"])],
                    ["--served-model-name", contract.served_name(v["vllm_model"], v["vllm_served_model_name"])]]
    else:
        # The engine's other ranks: no API server (vLLM's --headless).
        options.append(["--headless"])
    if v["vllm_shutdown_timeout"] > 0:
        options.append(["--shutdown-timeout", str(v["vllm_shutdown_timeout"])])
    config = None
    if v["vllm_extra_args"]:
        config = "%s/%s.yaml" % (v["vllm_config_dir"], unit)
        options.append(["--config", config])
    environment = [
        ["CUDA_DEVICE_ORDER", "PCI_BUS_ID"],
        ["CUDA_VISIBLE_DEVICES", _join(inst["gpu_indices"])],
        ["VLLM_PORT", str(inst["dist_port"])],
        ["VLLM_ENGINE_READY_TIMEOUT_S", str(v["vllm_engine_ready_timeout"])],
        ["HF_HOME", v["vllm_hf_home"]],
        ["VLLM_CACHE_ROOT", v["vllm_cache_dir"] + "/vllm"],
        ["XDG_CACHE_HOME", v["vllm_cache_dir"]],
        ["TRITON_CACHE_DIR", v["vllm_cache_dir"] + "/triton"],
    ] + worker_environment + socket_environment + offline_environment(v) + [[k, val] for k, val in sorted(v["vllm_environment"].items())]
    url = health_url(v["vllm_listen_host"], inst["port"])
    # [prefix, argv]: `-` ignores a failure (a host without the program),
    # `+` runs it with full privileges, outside the sandbox.
    exec_start_pre = []
    if v["vllm_nvidia_modprobe"]:
        exec_start_pre.append(["-+", [v["vllm_nvidia_modprobe"], "-u", "-c=0"]])
    exec_start_post = [["", ["%s/%s" % (v["vllm_libexec_dir"], WAIT_READY), url,
                             str(v["vllm_engine_ready_timeout"])]]]
    if not head:
        # A headless rank serves no /health; it starts once the head's
        # rendezvous port answers (the head waits for its ranks to join).
        url = ""
        exec_start_post = []
        exec_start_pre.append(["", ["%s/%s" % (v["vllm_libexec_dir"], WAIT_READY),
                                    tcp_url(master, multinode["master_port"]), str(v["vllm_engine_ready_timeout"])]])
    return {
        "name": inst["name"],
        "unit": unit + ".service",
        "wants": ["network-online.target"] + list(NVIDIA_SERVICES),
        "after": ["network-online.target"] + list(NVIDIA_SERVICES),
        "exec_start_pre": exec_start_pre,
        "exec_start_post": exec_start_post,
        "health_url": url,
        "drain": drain_targets(inst["name"], v, inventory_host) if head else [],
        "multinode": multinode,
        "user": v["vllm_user"],
        "group": v["vllm_group"],
        "working_directory": v["vllm_state_dir"],
        "environment_file": v["vllm_config_dir"] + "/secrets.env",
        "restart_sec": v["vllm_restart_sec"],
        "timeout_start_sec": v["vllm_timeout_start_sec"],
        "timeout_stop_sec": v["vllm_timeout_stop_sec"],
        "limit_nofile": v["vllm_limit_nofile"],
        "read_write_paths": " ".join(_unique([v["vllm_state_dir"], v["vllm_hf_home"], v["vllm_cache_dir"]])),
        "hardening": v["vllm_hardening"],
        "path": "%s/%s.service" % (v["vllm_unit_dir"], unit),
        "header": "%s; instance %s: %s" % (MANAGED_MARKER, inst["name"], inst["reason"]),
        "description": "vLLM instance %s (GPUs %s, NUMA nodes %s%s)" % (
            inst["name"], _join(inst["gpu_indices"]),
            _join(sorted(set(w["node"] for w in inst["workers"]))) if inst["workers"] else mems,
            ", bound per worker" if inst["mode"] == "per_worker" else "") + (
            "" if multinode is None else ", node %d of %d, head %s" % (
                multinode["node_rank"], multinode["nnodes"], multinode["head"])),
        "syslog_identifier": unit,
        "command": command,
        "options": options,
        "argv": command + [word for option in options for word in option],
        "environment": environment,
        "numa": numa,
        "config": config,
        "port": inst["port"],
    }


def _release(version):
    """(major, minor) of a version such as 0.33.0 or 0.20.1rc1; None when it does not start so."""
    match = re.match(r"([0-9]+)\.([0-9]+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_per_worker(instances, v):
    """Per-worker binding needs vLLM's --numa-bind (0.20 and newer) and
    spawned workers; say so before a unit fails at start."""
    per_worker = [inst["name"] for inst in instances if inst["mode"] == "per_worker"]
    if not per_worker:
        return
    release = _release(v["vllm_version"])
    if not v["vllm_executable"] and release is not None and release < PER_WORKER_SINCE:
        raise ValueError(
            "vllm_version: %s has no per-worker NUMA binding (--numa-bind, vLLM %d.%d and newer), which the "
            "plan gives %s: install a newer vLLM or plan with gpufleet_worker_binding: process"
            % (v["vllm_version"], PER_WORKER_SINCE[0], PER_WORKER_SINCE[1], ", ".join(per_worker)))
    method = v["vllm_environment"].get("VLLM_WORKER_MULTIPROC_METHOD")
    if method is not None and method != "spawn":
        vc.fail("vllm_environment.VLLM_WORKER_MULTIPROC_METHOD", "must be spawn (or unset) while the plan binds "
                "workers per node (%s): vLLM binds a worker by spawning it through numactl"
                % ", ".join(per_worker), method)


def check_multinode(instances, v, host):
    """A multi-node instance needs its head's address, this host among its
    hosts, and all its hosts rolling together (a head restarted without its
    ranks, or a rank without its head, cannot serve)."""
    for inst in instances:
        multinode = inst["multinode"]
        if multinode is None:
            continue
        label = "instance %s (head %s, hosts %s)" % (inst["name"], multinode["head"], ", ".join(multinode["hosts"]))
        if host is not None and multinode["hosts"][multinode["node_rank"]] != host:
            raise ValueError("vllm_instances: %s is rank %d, which is %s, not this host %s"
                             % (label, multinode["node_rank"], multinode["hosts"][multinode["node_rank"]], host))
        address = v["vllm_node_addresses"].get(multinode["head"])
        if address in (None, ""):
            raise ValueError("vllm_node_addresses: lacks the head %s of %s: set gpufleet_node_address (or a "
                             "concrete vllm_listen_host) for it, the address its ranks reach it at"
                             % (multinode["head"], label))
        address = vc.address("vllm_node_addresses.%s" % multinode["head"], address)
        problem = _master_address_problem(address, v["vllm_allow_loopback_master"])
        if problem:
            raise ValueError(
                "vllm_node_addresses.%s: %s, not an address the other hosts of %s can reach as --master-addr: set "
                "gpufleet_node_address (or vllm_listen_host) of %s to its address on the network between them"
                % (multinode["head"], problem, label, multinode["head"])
                + ("" if "wildcard" in problem else
                   ", or vllm_allow_loopback_master: true when all its hosts run on this one machine"))
        v["vllm_node_addresses"][multinode["head"]] = address
        rolling = v["vllm_rollout_hosts"]
        missing = [h for h in multinode["hosts"] if h not in rolling]
        if rolling and missing:
            raise ValueError(
                "vllm_rollout_hosts: %s must roll as one, but %s %s not in this batch (%s): run all its hosts "
                "(no --limit that splits it; a host that is down stops the instance) and let "
                "gpufleet_rollout_hosts_at_once keep them in one batch (the default, 100%%)"
                % (label, ", ".join(missing), "is" if len(missing) == 1 else "are", ", ".join(rolling)))


def _master_address_problem(address, allow_loopback):
    """Why `address` cannot be a multi-node head's --master-addr, or ''.
    Unspecified addresses (0.0.0.0, ::, ::ffff:0.0.0.0) never can (numeric
    shorthands such as "0" or "127.1" value_checks.address refuses); loopback (127.0.0.0/8, ::1, localhost) only where every host of the
    instance is this machine, which the caller says (vllm_allow_loopback_master)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        ip = None
    if ip is not None and getattr(ip, "ipv4_mapped", None) is not None:
        ip = ip.ipv4_mapped
    if ip is not None and ip.is_unspecified:
        return "%s is a wildcard (unspecified) address" % address
    loopback = (ip is not None and ip.is_loopback) or address.rstrip(".").lower() == "localhost" \
        or address.rstrip(".").lower().endswith(".localhost")
    if loopback and not allow_loopback:
        return "%s is a loopback address" % address
    return ""


def _index(existing):
    """find results (file_type any) by path."""
    if existing is None:
        return None
    index = {}
    for entry in _list("existing", existing):
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            index[entry["path"]] = entry
    return index


def _is_executable(entry):
    if not entry:
        return False
    if entry.get("islnk"):
        return True  # find does not follow links; ExecStart's check does
    return bool(entry.get("isreg") and (entry.get("xusr") or entry.get("xgrp") or entry.get("xoth")))


def check_executables(executables, existing, host):
    """Each program ExecStart runs exists and is executable (existing: path ->
    find result on the host)."""
    for entry in executables:
        if not _is_executable(existing.get(entry["path"])):
            hint = {"vllm_numactl": "install numactl (vllm_packages), set vllm_numactl, or use vllm_binding: systemd",
                    "vllm_venv": "set vllm_executable to an installed vllm or leave vllm_install true"}.get(
                        entry["variable"], "set it to an installed vllm or leave it empty and vllm_install true")
            raise ValueError("%s: %s does not exist or is not executable on %s: %s"
                             % (entry["variable"], entry["path"], host, hint))


# --- model weights before start -------------------------------------------

def check_download_variables(v):
    """vllm_download_*, checked (the role's defaults where absent)."""
    out = {"vllm_download_weights": vc.boolean("vllm_download_weights", v.get("vllm_download_weights", True))}
    python = v.get("vllm_download_python") or ""
    out["vllm_download_python"] = vc.absolute_path(
        "vllm_download_python", python, allow_empty=True) or vc.absolute_path(
            "vllm_venv", v.get("vllm_venv")) + "/bin/python"
    out["vllm_download_timeout"] = vc.integer("vllm_download_timeout", v.get("vllm_download_timeout", 14400),
                                              1, 10 ** 7)
    out["vllm_download_poll"] = vc.integer("vllm_download_poll", v.get("vllm_download_poll", 10), 1, 3600)
    out["vllm_download_ignore_patterns"] = [
        vc.text("vllm_download_ignore_patterns[%d]" % i, p, r"[^\s].{0,254}", "must be a glob on one line")
        for i, p in enumerate(_list("vllm_download_ignore_patterns",
                                    v.get("vllm_download_ignore_patterns", ["original/*"])))]
    return out


def model_source(model):
    """Where vLLM takes the model from: "path" (an absolute path on the host),
    "hub" (a Hugging Face Hub repository id, ORG/NAME) or "other" (anything
    else: vLLM would try it as a path relative to its working directory)."""
    if model.startswith("/"):
        return "path"
    if re.fullmatch(_HUB_ID, model):
        return "hub"
    return "other"


def hub_cache_folder(hf_home, model):
    """The folder huggingface_hub caches a model repository in:
    HF_HOME/hub/models--ORG--NAME."""
    return "%s/hub/models--%s" % (hf_home, model.replace("/", "--"))


def offline_environment(v):
    """HF_HUB_OFFLINE=1 when the role downloads the weights before start:
    the units then load them from HF_HOME and never reach the Hub."""
    if v["vllm_download_weights"] and model_source(v["vllm_model"]) == "hub":
        return [["HF_HUB_OFFLINE", "1"]]
    return []


def download_plan(v, existing, install, host):
    """Whether the role downloads vllm_model into vllm_hf_home before any
    unit starts, and with what (existing: path -> find result on the host,
    None when unknown). A model that is an absolute path, or whose cache
    already has a snapshot folder (downloaded, or seeded by hand), is not
    downloaded."""
    model = v["vllm_model"]
    source = model_source(model)
    folder = hub_cache_folder(v["vllm_hf_home"], model) if source == "hub" else ""
    plan = {"needed": False, "model": model, "hf_home": v["vllm_hf_home"], "folder": folder,
            "snapshots": folder + "/snapshots" if folder else "", "python": v["vllm_download_python"],
            "timeout": v["vllm_download_timeout"], "poll": v["vllm_download_poll"],
            "ignore_patterns": v["vllm_download_ignore_patterns"], "reason": "",
            # the downloader reads HF_TOKEN from here (0600, the service account's): never from argv,
            # stdin or the environment of the task, which async records in a 0644 job file
            "secrets_file": v["vllm_config_dir"] + "/secrets.env"}
    if not v["vllm_download_weights"]:
        plan["reason"] = "vllm_download_weights is false"
        return plan
    if source == "path":
        plan["reason"] = "the model is a local path"
        return plan
    if source == "other":
        vc.fail("vllm_model", "must be a Hugging Face repository id (ORG/NAME) or an absolute path while "
                "vllm_download_weights is true (set it false to pass the model to vLLM as it is)", model)
    prefix = plan["snapshots"] + "/"
    cached = sorted(path for path, entry in (existing or {}).items()
                    if path.startswith(prefix) and "/" not in path[len(prefix):]
                    and (entry.get("isdir") or entry.get("islnk")))
    if cached:
        plan["reason"] = "already in the cache (%s)" % cached[-1]
        return plan
    plan["needed"] = True
    plan["reason"] = "not in %s yet" % plan["snapshots"]
    if not install and existing is not None and not _is_executable(existing.get(plan["python"])):
        raise ValueError(
            "vllm_download_python: %s does not exist or is not executable on %s, and %s is not in %s: "
            "the role does not install vLLM here (vllm_executable or vllm_install false), so point "
            "vllm_download_python at a Python with huggingface_hub, put a snapshot of the model there, or "
            "set vllm_download_weights: false" % (plan["python"], host, model, plan["snapshots"]))
    return plan


def _as_planned(entry, kind, mode=None, owner=None, group=None):
    """Whether what find saw already has the kind, mode and owner the role would give it."""
    if not entry or not entry.get(kind):
        return False
    return ((mode is None or entry.get("mode") == mode) and (owner is None or entry.get("pw_name") == owner)
            and (group is None or entry.get("gr_name") == group))


def host_units(instances, variables):
    """Check the role's variables and this host's instances; return what the role writes:

    {units: [per instance: name, unit, path, header, description, command,
     options, argv, environment, numa, config, port, wants, after,
     exec_start_pre, exec_start_post ([prefix, argv] each), health_url,
     drain (gateway servers)], unit_names,
     config_names, files (template items in write order), directories,
     executables, checker, helpers (programs installed into vllm_libexec_dir),
     variables (checked)}.
    """
    v = check_variables(dict(variables, vllm_instances=instances))
    checked = check_instances(instances)
    check_per_worker(checked, v)
    check_multinode(checked, v, variables.get("host"))
    units = [instance_unit(inst, v, variables.get("host", "this host")) for inst in checked]
    state_dirs = _unique([v["vllm_state_dir"], v["vllm_hf_home"], v["vllm_cache_dir"]])
    directories = []
    for path in [v["vllm_config_dir"], v["vllm_unit_dir"], v["vllm_libexec_dir"]]:
        if path not in [d["path"] for d in directories]:
            directories.append({"path": path, "mode": "0755"})
    # Parents of the state directories are created plainly first (the file
    # module would give them the owner and mode of the state directory).
    for path in state_dirs:
        parent = path.rsplit("/", 1)[0] or "/"
        if parent not in state_dirs and parent not in [d["path"] for d in directories]:
            directories.append({"path": parent})
    for path in state_dirs:
        directories.append({"path": path, "mode": "0750", "owner": v["vllm_user"], "group": v["vllm_group"]})
    files = [{"template": "secrets.env.j2", "path": v["vllm_config_dir"] + "/secrets.env", "mode": "0600",
              "secret": True, "label": "secrets.env"}]
    for unit in units:
        if unit["config"]:
            files.append({"template": "instance-config.yaml.j2", "path": unit["config"], "mode": "0644",
                          "secret": False, "label": unit["config"].rsplit("/", 1)[1], "unit": unit})
    for unit in units:
        files.append({"template": "vllm.service.j2", "path": unit["path"], "mode": "0644", "secret": False,
                      "label": unit["unit"], "unit": unit, "verify": unit["unit"]})
    executable = v["vllm_executable"] or v["vllm_venv"] + "/bin/vllm"
    executables = [{"variable": "vllm_executable" if v["vllm_executable"] else "vllm_venv", "path": executable}]
    if v["vllm_binding"] == "numactl":
        executables.append({"variable": "vllm_numactl", "path": v["vllm_numactl"]})
    install = v["vllm_install"] and not v["vllm_executable"]
    existing = _index(variables.get("existing"))
    if existing is not None and not install:
        check_executables(executables, existing, variables.get("host", "this host"))
    download = download_plan(v, existing, install, variables.get("host", "this host"))
    # With `existing` (what find saw on the host), mark what already matches:
    # the role then skips it, unless the rendered content differs (files).
    existing = existing or {}
    for entry in directories:
        entry["as_planned"] = _as_planned(existing.get(entry["path"]), "isdir", entry.get("mode"),
                                          entry.get("owner"), entry.get("group"))
    for entry in files:
        found = existing.get(entry["path"])
        entry["as_planned"] = _as_planned(found, "isreg", entry["mode"], *(
            (v["vllm_user"], v["vllm_group"]) if entry["secret"] else (None, None)))
        entry["checksum"] = (found or {}).get("checksum", "")
    helpers = []
    for name in (CHECKER, WAIT_READY):
        path = "%s/%s" % (v["vllm_libexec_dir"], name)
        found = existing.get(path)
        helpers.append({"src": name, "path": path, "as_planned": _as_planned(found, "isreg", "0755"),
                        "checksum": (found or {}).get("checksum", "")})
    checker = dict((key, helpers[0][key]) for key in ("path", "as_planned", "checksum"))
    return {
        "units": units,
        "unit_names": [u["unit"] for u in units],
        "config_names": [u["config"].rsplit("/", 1)[1] for u in units if u["config"]],
        "files": files,
        "directories": directories,
        "state_dirs": state_dirs,
        "executables": executables,
        "checker": checker,
        "helpers": helpers,
        "install": install,
        "download": download,
        "manage_service": v["manage_service"],
        "variables": v,
    }
