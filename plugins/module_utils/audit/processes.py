# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The processes that hold GPUs, and where they run: read through the
topology reader seam (read()/run()/nvml()), so a live host and a recorded
capture go through the same parsers.

Which process holds which GPU comes from NVML
(nvmlDeviceGetComputeRunningProcesses, recorded in a capture under
`nvml.compute_processes`) or else from

    nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader

Per process, from /proc/PID/:
- status: Name, Cpus_allowed_list, Mems_allowed_list;
- stat: parent pid and session (processes of one session are one group:
  a vLLM server and its tensor-parallel workers);
- numa_maps: memory per NUMA node (N<n>=<pages> times kernelpagesize_kB)
  and the memory policy of each mapping (default, bind:1, interleave:0-1);
- environ: CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and the other device
  selection variables (nothing else is kept: see ProcFilter);
- cmdline: for a readable name, with whatever looks like a secret masked
  (secret_mask: option values, NAME=VALUE pairs, URL userinfo, header
  values, setproctitle titles); the Name of status and the command name
  of stat go through the same masking.

Parsers are pure functions of text; read_processes() never raises.
Standard library only (runs on targets).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.common.secret_mask import mask_argv, mask_text
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import Reader

COMPUTE_APPS_COMMAND = "nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader"

# Environment variables the audit reads; every other one is dropped before
# it reaches a result or a capture (environments hold API keys and tokens).
ENVIRONMENT_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    # the engine package a unit was deployed with (vllm==0.11.0): engine_drift
    "GPUFLEET_ENGINE",
)
_PROC_FILE = re.compile(r"^/proc/(\d+)/(environ|cmdline|status|stat)$")
_NODE_PAGES = re.compile(r"^N(\d+)=(\d+)$")


# ------------------------------------------------------------ the filter


def filter_environ(text):
    """environ text (NUL-separated NAME=value) keeping only ENVIRONMENT_KEYS."""
    kept = []
    for entry in (text or "").split("\0"):
        name, sep, dummy_value = entry.partition("=")
        if sep and name in ENVIRONMENT_KEYS:
            kept.append(entry)
    return "".join(entry + "\0" for entry in kept)


def redact_cmdline(text):
    """cmdline text (NUL-separated argv, or one setproctitle title) with
    secrets masked (secret_mask.mask_argv)."""
    words = (text or "").split("\0")
    return "\0".join(mask_argv(words))


def redact_status(text):
    """/proc/PID/status with its Name masked (setproctitle also sets the name)."""
    lines = (text or "").splitlines(True)
    for number, line in enumerate(lines):
        if line.startswith("Name:"):
            body = line[len("Name:"):]
            value = body.strip()
            lines[number] = "Name:" + body.replace(value, mask_text(value), 1) if value else line
    return "".join(lines)


def redact_stat(text):
    """/proc/PID/stat with the command name between its parentheses masked."""
    head, sep, rest = (text or "").partition("(")
    name, sep2, tail = rest.rpartition(")")
    if not (sep and sep2):
        return text
    return head + "(" + mask_text(name) + ")" + tail


_REDACTIONS = {"environ": filter_environ, "cmdline": redact_cmdline, "status": redact_status, "stat": redact_stat}


class ProcFilter(Reader):
    """Wraps a reader; /proc/PID/environ comes back with only the device
    selection variables, /proc/PID/cmdline, the Name of status and the
    command name of stat with secrets masked. Put it
    between the live reader and a RecordingReader so that captures, module
    results and reports never hold a process's secrets."""

    def __init__(self, inner):
        self.inner = inner
        self.errors = getattr(inner, "errors", [])

    def read(self, path):
        value = self.inner.read(path)
        match = _PROC_FILE.match(path or "")
        if value is None or not match:
            return value
        return _REDACTIONS[match.group(2)](value)

    def listdir(self, path):
        return self.inner.listdir(path)

    def readlink(self, path):
        return self.inner.readlink(path)

    def run(self, command):
        return self.inner.run(command)

    def nvml(self):
        return self.inner.nvml()


# ------------------------------------------------------------ parsers


def parse_compute_apps(text):
    """nvidia-smi --query-compute-apps=pid,gpu_bus_id CSV -> (entries, warnings).

    entries: [{pid, pci_bus_id}] in the order listed.
    """
    entries = []
    warnings = []
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.lower().startswith("no running"):
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 2:
            warnings.append("nvidia-smi compute apps line %d has no bus id: %r" % (number, line[:80]))
            continue
        try:
            pid = int(cells[0])
            bus = normalize_bus_id(cells[1])
        except ValueError:
            warnings.append("nvidia-smi compute apps line %d is not 'pid, bus id': %r" % (number, line[:80]))
            continue
        entries.append({"pid": pid, "pci_bus_id": bus})
    return entries, warnings


def parse_nvml_processes(records):
    """The `compute_processes` list of an NVML record -> (entries, warnings)."""
    entries = []
    warnings = []
    if not isinstance(records, list):
        return entries, ["NVML: compute_processes is not a list"]
    for position, record in enumerate(records):
        try:
            entries.append({"pid": int(record["pid"]), "pci_bus_id": normalize_bus_id(record["bus_id"])})
        except (KeyError, TypeError, ValueError):
            warnings.append("NVML: compute process entry %d has no pid and bus id" % position)
    return entries, warnings


def parse_status(text):
    """/proc/PID/status -> {name, cpus_allowed, mems_allowed} (None when absent)."""
    fields = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    name = fields.get("Name")
    return {
        "name": mask_text(name) if name else name,
        "cpus_allowed": fields.get("Cpus_allowed_list"),
        "mems_allowed": fields.get("Mems_allowed_list"),
    }


def parse_stat(text):
    """/proc/PID/stat -> {ppid, session} (None when unreadable). The command
    name in parentheses may hold spaces and parentheses itself."""
    head, sep, rest = (text or "").rpartition(")")
    words = rest.split() if sep else []
    try:
        return {"ppid": int(words[1]), "session": int(words[3])}
    except (IndexError, ValueError):
        return {"ppid": None, "session": None}


def _policy(tokens):
    words = []
    for token in tokens:
        if "=" in token or token in ("heap", "stack", "huge"):
            break
        words.append(token)
    return " ".join(words) or "default"


def parse_numa_maps(text):
    """/proc/PID/numa_maps -> {memory_kb: {node: kB}, policies: {policy: kB}}.

    Pages count per node (N0=123) times the mapping's kernelpagesize_kB
    (4 by default; huge pages say 2048). Node keys are strings, as they are
    after the module's JSON.
    """
    memory = {}
    policies = {}
    for line in (text or "").splitlines():
        tokens = line.split()
        if len(tokens) < 2:
            continue
        page_kb = 4
        for token in tokens:
            if token.startswith("kernelpagesize_kB="):
                try:
                    page_kb = int(token.split("=", 1)[1])
                except ValueError:
                    pass
        mapping_kb = 0
        for token in tokens:
            match = _NODE_PAGES.match(token)
            if match:
                kb = int(match.group(2)) * page_kb
                memory[match.group(1)] = memory.get(match.group(1), 0) + kb
                mapping_kb += kb
        if mapping_kb:
            policy = _policy(tokens[1:])
            policies[policy] = policies.get(policy, 0) + mapping_kb
    return {
        "memory_kb": dict((k, memory[k]) for k in sorted(memory, key=int)),
        "policies": policies,
    }


def parse_environ(text):
    """/proc/PID/environ -> {NAME: value} for ENVIRONMENT_KEYS only."""
    out = {}
    for entry in (text or "").split("\0"):
        name, sep, value = entry.partition("=")
        if sep and name in ENVIRONMENT_KEYS:
            out[name] = value
    return out


def parse_cmdline(text):
    """/proc/PID/cmdline -> argv (list), secrets masked."""
    words = redact_cmdline(text or "").split("\0")
    return [w for w in words if w != ""] if text else []


def dominant_policy(policies):
    """The memory policy that covers the most memory, or None."""
    if not policies:
        return None
    return sorted(policies.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def policy_nodes(policy):
    """Nodes a numa_maps policy names ("bind:0-1" -> [0, 1]); None for default/local."""
    if not policy or ":" not in policy:
        return None
    try:
        return parse_cpulist(policy.rsplit(":", 1)[1])
    except ValueError:
        return None


# ------------------------------------------------------------ reading


def gpu_holders(reader, nvml_processes=None):
    """(entries, source, warnings): who holds which GPU, from NVML (the
    live answer nvml_processes, or a capture's nvml.compute_processes),
    else from nvidia-smi; source None when neither answered (then nothing
    is known, which is not "no processes")."""
    if nvml_processes is not None:
        entries, warnings = parse_nvml_processes(nvml_processes)
        return entries, "nvml", warnings
    raw = reader.nvml()
    if isinstance(raw, dict) and "compute_processes" in raw:
        entries, warnings = parse_nvml_processes(raw["compute_processes"])
        return entries, "nvml", warnings
    text = reader.run(COMPUTE_APPS_COMMAND)
    if text is None:
        return [], None, []
    entries, warnings = parse_compute_apps(text)
    return entries, "nvidia-smi", warnings


def read_process(reader, pid):
    """One process's record. `readable` is False when /proc/PID/status
    could not be read (exited, or another user's process without privilege)."""
    base = "/proc/%d/" % pid
    status_text = reader.read(base + "status")
    status = parse_status(status_text)
    stat = parse_stat(reader.read(base + "stat"))
    maps_text = reader.read(base + "numa_maps")
    maps = parse_numa_maps(maps_text) if maps_text is not None else {"memory_kb": {}, "policies": {}}
    environ_text = reader.read(base + "environ")
    argv = parse_cmdline(reader.read(base + "cmdline"))
    warnings = []
    cpus = status["cpus_allowed"]
    if cpus is not None:
        try:
            parse_cpulist(cpus)
        except ValueError:
            warnings.append("pid %d: Cpus_allowed_list %r is not a cpulist" % (pid, cpus))
            cpus = None
    mems = status["mems_allowed"]
    if mems is not None:
        try:
            parse_cpulist(mems)
        except ValueError:
            warnings.append("pid %d: Mems_allowed_list %r is not a node list" % (pid, mems))
            mems = None
    return {
        "pid": pid,
        "name": status["name"] or (argv[0].rsplit("/", 1)[-1] if argv else None),
        "argv": argv,
        "ppid": stat["ppid"],
        "session": stat["session"],
        "readable": status_text is not None,
        "cpus_allowed": cpus,
        "mems_allowed": mems,
        "memory_kb": maps["memory_kb"] if maps_text is not None else None,
        "memory_policies": maps["policies"] if maps_text is not None else None,
        "memory_policy": dominant_policy(maps["policies"]) if maps_text is not None else None,
        "environment": parse_environ(environ_text) if environ_text is not None else None,
        "gpus": [],
        "warnings": warnings,
    }


def read_processes(reader, nvml_processes=None):
    """Every process that holds a GPU, with its /proc record.

    Returns {source: nvml|nvidia-smi|None, processes: [...], warnings}.
    Each process has `gpus`: the bus ids it holds, sorted.
    """
    entries, source, warnings = gpu_holders(reader, nvml_processes)
    by_pid = {}
    for entry in entries:
        by_pid.setdefault(entry["pid"], set()).add(entry["pci_bus_id"])
    processes = []
    for pid in sorted(by_pid):
        record = read_process(reader, pid)
        record["gpus"] = sorted(by_pid[pid])
        if not record["readable"]:
            warnings.append("pid %d holds GPU(s) %s but /proc/%d/status is unreadable (exited, or not "
                            "permitted: run the audit with become)" % (pid, ", ".join(record["gpus"]), pid))
        warnings.extend(record.pop("warnings"))
        processes.append(record)
    return {"source": source, "processes": processes, "warnings": warnings}


def collect_nvml_processes(pynvml):
    """[{pid, bus_id, used_memory}] from nvmlDeviceGetComputeRunningProcesses,
    or None when NVML cannot answer (then nvidia-smi is asked). Never raises."""
    try:
        pynvml.nvmlInit()
    except Exception:  # pylint: disable=broad-except
        return None
    try:
        out = []
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
            if isinstance(bus, bytes):
                bus = bus.decode("ascii", "replace")
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) or []:
                used = getattr(proc, "usedGpuMemory", None)
                out.append({"pid": int(proc.pid), "bus_id": str(bus),
                            "used_memory": int(used) if isinstance(used, int) else None})
        return out
    except Exception:  # pylint: disable=broad-except
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # pylint: disable=broad-except
            pass
