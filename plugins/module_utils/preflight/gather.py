# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The host preflight's readings of the running machine (the module's
side): a LiveReader whose runner runs the syscall probe (probe.py), the
readings (readings.py), optionally the topology facts through the same
reader, and with record=True the capture of everything read. Standard
library only (runs on targets).
"""

from __future__ import annotations

import os
import socket
import sys

from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import probe
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.readings import FABRIC_MANAGER_COMMAND, read_host
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.gather import gather
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader, default_runner
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import COMMAND_TIMEOUT, RecordingReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_limits import DEFAULT_SLICE


SYSTEM_PYTHON = "/usr/bin/python3"


def probe_python():
    """The Python the probe runs with in the unit's sandbox: the system's
    python3, which ProtectHome=/ProtectSystem= leave visible, else this one
    (an interpreter under /home or /root would be hidden by the sandbox)."""
    if os.path.isfile(SYSTEM_PYTHON) and os.access(SYSTEM_PYTHON, os.X_OK):
        return SYSTEM_PYTHON
    return sys.executable


def read_live(units, root="/", which=None, pynvml=None, nvidia_smi="nvidia-smi", timeout=COMMAND_TIMEOUT,
              cgroup_slice=DEFAULT_SLICE, topology=True, record=False, python=None):
    """(readings, topology facts or None, capture or None) of this machine.

    units: the planned units to probe (readings.read_host); the numactl of
    the first unit with a numactl prefix answers `numactl --show`. python:
    the interpreter the probe runs with in the unit's sandbox (probe_python()).
    """
    numactl = next((unit["prefix"][0] for unit in units if unit.get("prefix")), "numactl")

    def base(argv):
        return default_runner(argv, timeout=timeout)

    reader = LiveReader(root=root, which=which, runner=probe.probe_runner(base, python or probe_python()),
                        binaries={"nvidia-smi": nvidia_smi, "numactl": numactl}, timeout=timeout)
    hostname = socket.gethostname()
    if record:
        reader = RecordingReader(reader, hostname=hostname)
    facts = None
    if topology:
        gathered = gather(reader, pynvml=pynvml, use_nvml=pynvml is not None, hostname=hostname, record=record,
                          cgroup_slice=cgroup_slice)
        facts = gathered.facts
        if record:
            reader.record_nvml(gathered.nvml)
    readings = read_host(reader, units, cgroup_slice=cgroup_slice, pynvml=pynvml, record=record)
    # A failing getent (no such account) or systemctl (no systemd) is an
    # answer the readings hold, not a problem to warn about.
    expected = ("getent ", FABRIC_MANAGER_COMMAND)
    readings["warnings"] = list(readings["warnings"]) + [
        line for line in getattr(reader, "errors", []) or []
        if line not in readings["warnings"] and not line.startswith(expected)]
    return readings, facts, reader.capture if record else None
