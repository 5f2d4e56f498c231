# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Read every source through the reader seam and assemble the facts.

gather(reader) reads sysfs, NVML and nvidia-smi and returns Gathered(facts,
raw NVML record); gather_live() does it on the running machine, optionally
recording a capture. Standard library only (runs on targets).
"""

from __future__ import annotations

import socket
from collections import namedtuple

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.assemble import assemble
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvidia_smi
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvidia_smi_topo
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml_parse
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_limits import DEFAULT_SLICE, check_cgroup_slice
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import COMMAND_TIMEOUT, RecordingReader

# What gather() read: the facts and the raw NVML record (None when NVML was not read).
Gathered = namedtuple("Gathered", "facts nvml")


def gather(reader, pynvml=None, use_nvml=True, use_nvidia_smi=True, hostname=None, captured=False, record=False,
           cgroup_slice=DEFAULT_SLICE):
    """Read every source through reader; return Gathered(facts, raw NVML record).

    pynvml: the imported NVML binding on a live host (None: none, or in
    replay the capture's `nvml:` record is used). nvidia-smi runs only when
    NVML did not list the GPUs and sysfs shows NVIDIA GPUs (or has no PCI
    data at all, as in a pasted matrix), unless record asks for everything.
    """
    sys_part = sysfs.collect(reader, check_cgroup_slice(cgroup_slice))
    raw_nvml = None
    if use_nvml:
        raw_nvml = nvml.collect(pynvml) if pynvml is not None else reader.nvml()
    nvml_part = nvml_parse.parse(raw_nvml) if raw_nvml else None

    smi_query = smi_topo = None
    has_nvidia = any(g["vendor"] == "nvidia" for g in sys_part["gpus"])
    nvml_listed = bool(nvml_part and nvml_part.get("gpus"))
    if use_nvidia_smi and (record or (not nvml_listed and (has_nvidia or not sys_part["found"]))):
        text = reader.run(nvidia_smi.QUERY_COMMAND)
        if text is not None:
            smi_query = nvidia_smi.parse_query_gpu(text)
        text = reader.run(nvidia_smi_topo.TOPO_COMMAND)
        if text is not None:
            smi_topo = nvidia_smi_topo.parse_topo_matrix(text)
        if nvml_listed:
            # Recorded for the capture only: NVML already said it all.
            smi_query = smi_topo = None

    extra = list(getattr(reader, "errors", []) or [])
    facts = assemble(sys_part, nvml_part, smi_query, smi_topo, hostname=hostname, captured=captured,
                     extra_warnings=extra)
    return Gathered(facts, raw_nvml)


def gather_live(root="/", runner=None, which=None, nvidia_smi_binary="nvidia-smi", pynvml=None,
                use_nvml=True, record=False, hostname=None, timeout=COMMAND_TIMEOUT, cgroup_slice=DEFAULT_SLICE):
    """Facts of the running machine; with record=True also its capture.

    timeout: seconds each nvidia-smi call may run; one that does not
    answer in time is killed and reported in the warnings.
    Returns (facts, capture or None). Raises ValueError when root is not
    an existing directory.
    """
    reader = LiveReader(root=root, runner=runner, which=which, binaries={"nvidia-smi": nvidia_smi_binary},
                        timeout=timeout)
    hostname = hostname or socket.gethostname()
    if record:
        recorder = RecordingReader(reader, hostname=hostname)
        facts, raw = gather(recorder, pynvml=pynvml, use_nvml=use_nvml, hostname=hostname, record=True,
                            cgroup_slice=cgroup_slice)
        recorder.record_nvml(raw)
        return facts, recorder.capture
    facts = gather(reader, pynvml=pynvml, use_nvml=use_nvml, hostname=hostname, cgroup_slice=cgroup_slice).facts
    return facts, None
