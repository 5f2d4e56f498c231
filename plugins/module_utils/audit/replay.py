# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A recorded audit capture replayed on the controller: the same (facts,
processes) pair audit/gather.gather_live() reads on a host, through the same
readers. Controller-only: loading and checking a capture file
(topology/capture.py) does not ship to hosts.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import processes as gpu_processes
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import gather
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CaptureReader


def gather_capture(capture, hostname=None):
    """(facts, processes) replayed from a capture (dict, path or text).
    ValueError names the capture and the problem."""
    data = load_capture(capture)
    reader = CaptureReader(data)
    facts = gather.gather(reader, hostname=hostname or data.get("hostname"), captured=True)[0]
    return facts, gpu_processes.read_processes(reader)
