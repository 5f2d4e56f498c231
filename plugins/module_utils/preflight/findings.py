# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The host preflight's judgement (docs/preflight.md): readings.py's
readings of one host, its topology facts and its planned units in, findings
out, each {check, severity, subject, message, fix}.

Severities: critical (the host cannot bind or run as planned: the deploy
refuses it under gpufleet_preflight: fail), warning (it runs bound, but
slower or less reliably than it should), info (not checked, and why; or a
fact worth knowing). A reading that is None was not read: on a recorded
host (captured) the check says "not checked (recorded capture)" at info
level, on a live host it says what did not answer.

Which checks a host gets depends on its device class
(deploy/vllm/devices.py, host_checks): persistence mode and the fabric
manager are NVIDIA's; CPU hosts get no GPU check. Pure functions over plain
dicts, standard library only (controller side).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import probe
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.readings import (
    FABRIC_MANAGER, NUMA_BALANCING, NUMACTL_COMMAND, PERSISTENCE_COMMAND)

SEVERITIES = ("info", "warning", "critical")
CHECKS = ("numactl", "syscalls", "cpuset_mems", "numa_balancing", "persistence_mode", "fabric_manager", "sub_numa")
RECORDED = "not checked (recorded capture): "


def finding(check, severity, subject, message, fix=""):
    return {"check": check, "severity": severity, "subject": subject, "message": message, "fix": fix}


def host_device(units, topology):
    """The host's device class: its units' (one class per host), else what its GPUs are (cpu without GPUs)."""
    for unit in units:
        return unit.get("device") or "nvidia"
    vendors = set(gpu.get("vendor") for gpu in (topology or {}).get("gpus") or [])
    return "nvidia" if "nvidia" in vendors else "amd" if "amd" in vendors else "cpu"


def _nodes(text):
    return set(parse_cpulist(str(text)))  # "0,1" and "0-1" alike


def _gpu_nodes(topology):
    """The NUMA nodes that hold GPUs, else (a CPU host) those with CPUs."""
    nodes = set(g["numa_node"] for g in (topology or {}).get("gpus") or [] if g.get("numa_node") is not None)
    if not nodes:
        nodes = set(n["id"] for n in (topology or {}).get("numa_nodes") or [] if n.get("cpus"))
    return nodes


def check_numactl(readings, units, context):
    """numactl must exist (and run) where a unit binds with it."""
    numactl = [unit for unit in units if unit.get("prefix")]
    if not numactl or readings.get("numactl") is not None:
        return []
    path = numactl[0]["prefix"][0]
    names = ", ".join(unit["name"] for unit in numactl)
    if context.get("captured"):
        return [finding("numactl", "info", path, RECORDED + "the capture holds no `%s`" % NUMACTL_COMMAND)]
    if context.get("numactl_installed_by_role"):
        return [finding("numactl", "info", path, "%s is not installed yet; role vllm installs it (vllm_packages) "
                        "before the units of %s start" % (path, names))]
    return [finding("numactl", "critical", path,
                    "%s does not exist or does not run (`%s` failed), and instances %s start through it with "
                    "vllm_binding: numactl: they would not start" % (path, NUMACTL_COMMAND, names),
                    "install numactl (add it to vllm_packages with vllm_install: true), point vllm_numactl at it, "
                    "or bind with systemd (vllm_binding: systemd)")]


def _probe_finding(unit, entry, context):
    name = unit["name"]
    if entry.get("skipped"):
        return finding("syscalls", "info", name, "not checked: %s; the sandbox of instance %s was not probed"
                       % (entry["skipped"], name))
    if entry.get("output") is None:
        if context.get("captured"):
            return finding("syscalls", "info", name, RECORDED + "the capture holds no probe of instance %s's "
                           "sandbox" % name)
        return finding("syscalls", "info", name, "not checked: systemd-run is not installed, or its probe of "
                       "instance %s did not run" % name)
    result = probe.parse_probe(entry["output"])
    calls = result["calls"]
    denied = [call for call in probe.CALLS if calls.get(call) in probe.DENIED]
    invalid = [call for call in probe.CALLS if call in calls and calls[call] != "OK" and call not in denied]
    missing = [call for call in probe.CALLS if call not in calls]
    where = "under instance %s's own sandbox and binding (NUMA nodes %s, CPUs %s)" % (name, unit["mems"], unit["cpus"])
    fix = ("let the unit's sandbox make these calls: a SystemCallFilter= in vllm_hardening must keep "
           "set_mempolicy, mbind and sched_setaffinity (@resources has them), and a container needs them "
           "allowed by its seccomp profile (and CAP_SYS_NICE where it binds across cpusets)")
    if denied:
        return finding("syscalls", "critical", name, "%s denied (%s) %s: the instance cannot bind as planned; vLLM "
                       "would warn and run unbound" % (", ".join(denied), ", ".join(calls[c] for c in denied), where),
                       fix)
    if missing:
        started = result["exit"] is not None and calls
        stderr = ": " + result["stderr"] if result["stderr"] else ""
        reason = ("it was killed before %s (exit status %s: a SystemCallFilter= without SystemCallErrorNumber= "
                  "kills the process on a denied call)" % (missing[0], result["exit"]) if started else
                  "it did not get to run (exit status %s%s)" % (result["exit"], stderr))
        return finding("syscalls", "critical", name, "the probe of %s made no %s %s: %s; the unit would fail the "
                       "same way" % (name, missing[0], where, reason), fix)
    if invalid:
        return finding("syscalls", "critical", name, "%s refused (%s) %s: those nodes or CPUs are not allowed "
                       "there (the cgroup cpuset, or a NUMAMask=/CPUAffinity= outside the host)" % (
                           ", ".join(invalid), ", ".join(calls[c] for c in invalid), where),
                       "allow the instance's NUMA nodes and CPUs in the services' cpuset, or plan with the CPUs "
                       "this host lets services use")
    return None


def check_syscalls(readings, units, context):
    """Each unit's probe: set_mempolicy, mbind and sched_setaffinity all OK under its sandbox."""
    probes = dict((entry.get("instance"), entry) for entry in readings.get("probes") or [])
    out = []
    for unit in units:
        entry = probes.get(unit["name"]) or {"output": None, "skipped": None}
        found = _probe_finding(unit, entry, context)
        if found:
            out.append(found)
    return out


def check_cpuset(readings, units, topology, context):
    """The services' cgroup cpuset must allow every NUMA node a unit binds its memory to."""
    cpuset = readings.get("cpuset")
    if cpuset is None:
        why = (RECORDED + "the capture holds no cgroup cpuset.mems" if context.get("captured") else
               "not checked: no cgroup cpuset.mems(.effective) could be read for %s" % context.get("cgroup_slice"))
        return [finding("cpuset_mems", "info", context.get("cgroup_slice") or "cgroup", why)]
    allowed = _nodes(cpuset["mems"])
    wanted = [(unit["name"], _nodes(unit["mems"])) for unit in units] or [("this host's GPUs", _gpu_nodes(topology))]
    out = []
    for name, nodes in wanted:
        outside = nodes - allowed
        if outside:
            out.append(finding(
                "cpuset_mems", "critical", cpuset["path"],
                "%s binds memory to NUMA node(s) %s, which %s excludes (it allows %s): the kernel refuses the "
                "binding and the memory lands elsewhere" % (name, format_cpulist(outside), cpuset["path"],
                                                            cpuset["mems"] or "none"),
                "allow those nodes to the services: `systemctl set-property %s AllowedMemoryNodes=%s` on the host, "
                "or the container's cpuset (lxc.cgroup2.cpuset.mems, docker --cpuset-mems)"
                % (context.get("cgroup_slice") or "system.slice", format_cpulist(allowed | nodes))))
    return out


def check_balancing(readings, context):
    value = readings.get("numa_balancing")
    if value is None:
        if context.get("captured"):
            return [finding("numa_balancing", "info", NUMA_BALANCING, RECORDED + "the capture holds no %s"
                            % NUMA_BALANCING)]
        return []  # a kernel without automatic NUMA balancing has no such file
    if value.strip() in ("", "0"):
        return []
    return [finding("numa_balancing", "warning", "kernel.numa_balancing",
                    "automatic NUMA balancing is on (%s is %s): the kernel keeps unmapping bound pages to sample "
                    "them, and the faults stall GPU dispatch paths (16-31 ms seen on a DeepEP dispatch)"
                    % (NUMA_BALANCING, value.strip()),
                    "turn it off: `sysctl -w kernel.numa_balancing=0`, and keep it off with "
                    "`kernel.numa_balancing = 0` in /etc/sysctl.d/")]


def check_persistence(readings, units, context):
    reading = readings.get("persistence")
    wanted = sorted(set(g for unit in units for g in unit.get("gpus") or []))
    if reading is None:
        why = (RECORDED + "the capture holds no `%s`" % PERSISTENCE_COMMAND if context.get("captured") else
               "not checked: neither NVML nor nvidia-smi answered")
        return [finding("persistence_mode", "info", "GPUs", why)]
    gpus = reading["gpus"]
    off = [bus for bus in (wanted or sorted(gpus)) if gpus.get(bus) is False]
    if not off:
        return []
    return [finding("persistence_mode", "warning", ", ".join(off),
                    "persistence mode is off on GPU(s) %s (%s): the driver tears the GPU down when no process "
                    "holds it, so each start pays the initialisation again and GPU state is lost between runs"
                    % (", ".join(off), reading["source"]),
                    "enable the persistence daemon: `systemctl enable --now nvidia-persistenced` "
                    "(or `nvidia-smi -pm 1` until the next reboot)")]


def check_fabric_manager(readings, context):
    switches = readings.get("nvswitches")
    if switches is None:
        if context.get("captured"):
            return [finding("fabric_manager", "info", FABRIC_MANAGER, RECORDED + "the capture shows neither the "
                            "PCI devices nor an NVML record, so no NVSwitch can be seen")]
        return [finding("fabric_manager", "info", FABRIC_MANAGER, "not checked: /sys/bus/pci/devices could not "
                        "be read")]
    if not switches:
        return []
    state = readings.get("fabric_manager")
    if state is None and context.get("captured"):
        return [finding("fabric_manager", "info", FABRIC_MANAGER, RECORDED + "the capture shows %d NVSwitch(es) "
                        "but not the fabric manager's state" % len(switches))]
    if state is not None and state.get("ActiveState") == "active":
        return []
    seen = ("not installed" if state is not None and state.get("LoadState") == "not-found" else
            "%s" % (state or {}).get("ActiveState", "unknown: systemctl did not answer"))
    return [finding("fabric_manager", "critical", FABRIC_MANAGER,
                    "this host has %d NVSwitch(es) (%s) and %s is %s: without the fabric manager CUDA cannot "
                    "initialise the GPUs (error 802, system not yet initialized)"
                    % (len(switches), ", ".join(switches[:4]) + (", ..." if len(switches) > 4 else ""),
                       FABRIC_MANAGER, seen),
                    "install nvidia-fabricmanager of the driver's exact version and "
                    "`systemctl enable --now nvidia-fabricmanager`")]


def check_sub_numa(topology, units):
    """Sockets with more than one NUMA node (SNC, NPS2/4): the plan binds by node, which is right, but a
    socket is no longer one memory domain."""
    out = []
    for socket in (topology or {}).get("sockets") or []:
        nodes = socket.get("numa_nodes") or []
        if len(nodes) < 2:
            continue
        spanning = [unit["name"] for unit in units if len(_nodes(unit["mems"]) & set(nodes)) > 1]
        message = ("socket %s holds NUMA nodes %s (sub-NUMA clustering or NPS mode): a socket is not one memory "
                   "domain here, and the plan binds each instance by NUMA node" % (
                       socket.get("id"), ",".join(str(n) for n in nodes)))
        if spanning:
            message += "; instances %s span several of its nodes" % ", ".join(spanning)
        out.append(finding("sub_numa", "info", "socket %s" % socket.get("id"), message,
                           "nothing to do when this mode is intended; a BIOS change of SNC/NPS changes the "
                           "NUMA nodes: gather the facts and plan again after it"))
    return out


def host_findings(readings, units, topology, context=None):
    """Every finding of one host, in CHECKS order then by subject.

    readings: read_host()'s; units: the planned units ({name, device, gpus,
    mems, cpus, policy, prefix, ...}, [] for none); topology: the host's
    facts; context: {captured (a replayed capture), cgroup_slice,
    numactl_installed_by_role}.
    """
    context = dict(context or {})
    device = devices.row(host_device(units, topology))
    found = check_numactl(readings, units, context) + check_syscalls(readings, units, context)
    found += check_cpuset(readings, units, topology, context) + check_balancing(readings, context)
    if "persistence_mode" in device.host_checks:
        found += check_persistence(readings, units, context)
    if "fabric_manager" in device.host_checks:
        found += check_fabric_manager(readings, context)
    found += check_sub_numa(topology, units)
    return found


def worst(findings):
    """The highest severity among FINDINGS, or None."""
    ranks = [SEVERITIES.index(f["severity"]) for f in findings]
    return SEVERITIES[max(ranks)] if ranks else None
