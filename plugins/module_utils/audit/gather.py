# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the audit reads, live or from a capture, through one reader seam.

gather_live() reads the running machine (topology and GPU processes) and,
with record=True, returns the capture of everything it read;
replay.gather_capture() replays such a capture on the controller. Both return the same
(facts, processes) pair, so result.audit_host() on the controller cannot
tell them apart. Nothing here judges what it read: the findings are the
controller's (locality.py, drift.py). Standard library only (runs on
targets).
"""

from __future__ import annotations

import socket

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import processes as gpu_processes
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import gather
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import RecordingReader


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
    facts, raw = gather.gather(reader, pynvml=pynvml, use_nvml=use_nvml, hostname=hostname, record=record)
    nvml_processes = gpu_processes.collect_nvml_processes(pynvml) if (pynvml is not None and use_nvml) else None
    processes = gpu_processes.read_processes(reader, nvml_processes)
    capture = None
    if record:
        reader.record_nvml(raw)
        if nvml_processes is not None:
            reader.capture["nvml"] = dict(reader.capture.get("nvml") or {}, compute_processes=nvml_processes)
        capture = reader.capture
    return facts, processes, capture
