# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Captures for audit tests: a recorded machine (fixtures/machines) plus
the real /proc files of processes recorded here under numactl
(fixtures/processes/numactl_processes.yml), tied together by the
nvidia-smi process list that says which process holds which GPU.

The recording machine has one NUMA node and CPUs 0-1; on the DGX-2
capture those CPUs are NUMA node 0 (socket 0), so a recorded process that
is handed a GPU of node 1 is really on the wrong socket: its recorded
Cpus_allowed_list, Mems_allowed_list and numa_maps say so by themselves.
"""

from __future__ import annotations

import copy
import functools
import os

import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.gpu_processes import COMPUTE_APPS_COMMAND
from ansible_collections.gpufleet.numa.plugins.module_utils.topology_reader import load_capture

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures")
MACHINES = os.path.join(FIXTURES, "machines")
PROCESSES = os.path.join(FIXTURES, "processes", "numactl_processes.yml")

# DGX-2: GPUs 0-7 (0000:34.. - 0000:5e..) on node 0 / socket 0, 8-15 on node 1 / socket 1.
DGX2 = "dgx2_v100_16gpu_nvswitch"
DGX2_BUS = ["0000:34:00.0", "0000:36:00.0", "0000:39:00.0", "0000:3b:00.0", "0000:57:00.0", "0000:59:00.0",
            "0000:5c:00.0", "0000:5e:00.0", "0000:b7:00.0", "0000:b9:00.0", "0000:bc:00.0", "0000:be:00.0",
            "0000:e0:00.0", "0000:e2:00.0", "0000:e5:00.0", "0000:e7:00.0"]

# The NUMA trap on a DGX-2, with the recorded processes:
TRAP_HOLDS = {
    "bound_cpu0_mem0": [DGX2_BUS[0]],                 # bound to node 0, GPU 0 on node 0: right
    "interleave_all": [DGX2_BUS[1]],                  # CPUs 0-1 = node 0, GPU 1 on node 0: right
    "bound_node0": [DGX2_BUS[8]],                     # bound to node 0, GPU 8 on node 1: wrong socket
    "unbound": [DGX2_BUS[9]],                         # no binding, memory on node 0, GPU 9 on node 1
    "tp_server": [DGX2_BUS[6], DGX2_BUS[7]],          # one TP group: GPUs 6,7 (node 0) ...
    "tp_server_worker": [DGX2_BUS[10], DGX2_BUS[11]],  # ... and 10,11 (node 1): spans sockets
}


@functools.lru_cache(maxsize=None)
def _recorded():
    with open(PROCESSES) as handle:
        data = yaml.safe_load(handle)
    return dict((p["name"], p) for p in data["processes"])


def recorded_processes():
    return copy.deepcopy(_recorded())


@functools.lru_cache(maxsize=None)
def _machine(name):
    return load_capture(os.path.join(MACHINES, name, "capture.yml"))


def machine_capture(name):
    return copy.deepcopy(_machine(name))


def smi_bus(bus):
    """A bus id as nvidia-smi prints it (8-digit domain, upper case)."""
    domain, rest = bus.split(":", 1)
    return "0000%s:%s" % (domain.upper(), rest.upper())


def capture_with_processes(machine, holds, hostname=None):
    """The machine's capture plus the named recorded processes holding the given GPUs."""
    capture = machine_capture(machine)
    recorded = recorded_processes()
    capture.setdefault("files", {})
    lines = []
    for name, buses in holds.items():
        proc = recorded[name]
        capture["files"].update(proc["files"])
        for bus in buses:
            lines.append("%d, %s" % (proc["pid"], smi_bus(bus)))
    capture.setdefault("commands", {})[COMPUTE_APPS_COMMAND] = "\n".join(lines) + ("\n" if lines else "")
    if hostname:
        capture["hostname"] = hostname
    return capture


def pid_of(name):
    return _recorded()[name]["pid"]
