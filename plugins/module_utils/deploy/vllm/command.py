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

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.download import offline_environment
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.variables import SOCKET_IFNAME_ENVIRONMENT


MANAGED_MARKER = "# Managed by gpufleet.numa (role vllm)"
# Services a GPU unit waits for where they exist (persistence daemon; the
# fabric manager of NVSwitch systems).


NVIDIA_SERVICES = ("nvidia-persistenced.service", "nvidia-fabricmanager.service")
# Helper programs the role installs into vllm_libexec_dir (roles/vllm/files).


CHECKER = "gpufleet-verify-unit"


WAIT_READY = "gpufleet-wait-ready"


def unique(values):
    out = []
    for value in values:
        if value not in out:
            out.append(value)
    return out


def join_values(values):
    return ",".join(str(v) for v in values)


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
    name = "%s-%s" % (inventory_host, instance_name)
    return [{"gateway": gateway, "socket": socket, "backend": entry["backend"], "server": entry["server"]}
            for gateway, socket in sorted(v["vllm_gateways"].items())
            for entry in v["vllm_gateway_backends"]
            if entry["server"] == name and entry["host"] in ("", inventory_host)]


def instance_unit(inst, v, inventory_host="this host"):
    """The argv, environment and directives of one instance's unit."""
    mems = join_values(inst["mems"])
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
    head = multinode is None or multinode["node_rank"] == 0
    if multinode is not None:
        master = v["vllm_node_addresses"][multinode["head"]]
        options += [["--nnodes", str(multinode["nnodes"])], ["--node-rank", str(multinode["node_rank"])],
                    ["--master-addr", master], ["--master-port", str(multinode["master_port"])]]
    if head:
        options += [["--host", v["vllm_listen_host"]], ["--port", str(inst["port"])],
                    ["--served-model-name", v["vllm_served_model_name"] or v["vllm_model"]]]
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
        ["CUDA_VISIBLE_DEVICES", join_values(inst["gpu_indices"])],
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
        "read_write_paths": " ".join(unique([v["vllm_state_dir"], v["vllm_hf_home"], v["vllm_cache_dir"]])),
        "hardening": v["vllm_hardening"],
        "path": "%s/%s.service" % (v["vllm_unit_dir"], unit),
        "header": "%s; instance %s: %s" % (MANAGED_MARKER, inst["name"], inst["reason"]),
        "description": "vLLM instance %s (GPUs %s, NUMA nodes %s%s)" % (
            inst["name"], join_values(inst["gpu_indices"]),
            join_values(sorted(set(w["node"] for w in inst["workers"]))) if inst["workers"] else mems,
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
