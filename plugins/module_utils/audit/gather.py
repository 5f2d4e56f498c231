# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the audit reads, live or from a capture, through one reader seam,
and the result the module and its action plugin return.

gather_live() reads the running machine (topology and GPU processes) and,
with record=True, returns the capture of everything it read;
gather_capture() replays such a capture. Both return the same
(facts, processes) pair, so audit.audit_host() cannot tell them apart.
Standard library only (runs on targets).
"""

from __future__ import annotations

import socket

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import findings as audit
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report as audit_report
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import processes as gpu_processes
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import gather as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.summary import summary as topology_summary
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader, RecordingReader


def gather_live(root="/", runner=None, which=None, nvidia_smi_binary="nvidia-smi", pynvml=None,
                use_nvml=True, record=False, hostname=None):
    """(facts, processes, capture or None) of the running machine.

    /proc/PID/environ and cmdline pass gpu_processes.ProcFilter first:
    neither the result nor the capture holds a process's secrets.
    """
    hostname = hostname or socket.gethostname()
    reader = gpu_processes.ProcFilter(
        LiveReader(root=root, runner=runner, which=which, binaries={"nvidia-smi": nvidia_smi_binary}))
    if record:
        reader = RecordingReader(reader, hostname=hostname)
    facts, raw = topology.gather(reader, pynvml=pynvml, use_nvml=use_nvml, hostname=hostname, record=record)
    nvml_processes = gpu_processes.collect_nvml_processes(pynvml) if (pynvml is not None and use_nvml) else None
    processes = gpu_processes.read_processes(reader, nvml_processes)
    capture = None
    if record:
        reader.record_nvml(raw)
        if nvml_processes is not None:
            reader.capture["nvml"] = dict(reader.capture.get("nvml") or {}, compute_processes=nvml_processes)
        capture = reader.capture
    return facts, processes, capture


def gather_capture(capture, hostname=None):
    """(facts, processes) replayed from a capture (dict, path or text).
    ValueError names the capture and the problem."""
    data = load_capture(capture)
    reader = CaptureReader(data)
    facts = topology.gather(reader, hostname=hostname or data.get("hostname"), captured=True)[0]
    return facts, gpu_processes.read_processes(reader)


def audit_result(facts, processes, host, deployed=None, memory_threshold=audit.DEFAULT_MEMORY_THRESHOLD):
    """The module's result dict (without changed/capture); ValueError on bad input."""
    result = audit.audit_host(facts, processes, host=host, deployed=deployed, memory_threshold=memory_threshold)
    result["topology"] = facts
    result["processes"] = processes.get("processes") or []
    result["summary"] = topology_summary(facts) + audit_report.text_table([result])
    return result


def gate(result, severity):
    """(failed, msg) for fail_on_severity."""
    if severity in (None, "none"):
        return False, None
    hits = audit.at_or_above(result["findings"], severity)
    if not hits:
        return False, None
    return True, "%s: %d finding(s) at or above %s; first: %s" % (result["host"], len(hits), severity, hits[0]["message"])
