# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The host preflight replayed from a recorded capture (controller side):
the same readers (readings.py) over a CaptureReader, and the topology
facts from the same capture (topology/capture.py)."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.readings import read_host
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture, load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CAPTURE_MAX_BYTES, CaptureReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_limits import DEFAULT_SLICE


def replay(capture, units, hostname=None, cgroup_slice=DEFAULT_SLICE, max_bytes=CAPTURE_MAX_BYTES):
    """(readings, topology facts) from a capture (a dict, a file path or
    text); ValueError names the capture and the problem."""
    data = load_capture(capture, max_bytes=max_bytes)
    readings = read_host(CaptureReader(data), units, cgroup_slice=cgroup_slice)
    facts = facts_from_capture(data, hostname=hostname or data.get("hostname"), cgroup_slice=cgroup_slice)
    return readings, facts
