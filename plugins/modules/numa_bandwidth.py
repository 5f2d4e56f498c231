#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: numa_bandwidth
short_description: Measure memory and host-device bandwidth from each NUMA node
version_added: "0.1.0"
description:
  - Measures what NUMA placement is worth on the host (C(docs/bandwidth.md)) -
    memory bandwidth for each pair of CPU node and memory node, under
    C(numactl --cpunodebind=C --membind=M), and pinned host-to-device and
    device-to-host bandwidth from each NUMA node to each GPU, under
    C(numactl --cpunodebind=N --membind=N).
  - Each measurement is one short child process of O(python) (the engine's
    own interpreter, for its torch), killed after O(timeout) seconds. With
    torch the memory figure is a multi-threaded triad (C(torch-triad)),
    without torch a threaded C(ctypes.memmove) copy (C(stdlib-copy)); the
    GPU copies need torch with CUDA (or ROCm) and are otherwise not
    measured, with the reason.
  - Nothing is written on the host; the children allocate O(size_mib) MiB
    per buffer for about O(seconds) seconds each.
  - A host with C(numa_capture) (a recorded host) is not contacted - the
    action returns nothing measured and says why.
author:
  - gpufleet.numa contributors (@gpufleet)
requirements:
  - Python 3.8 or later on the target, standard library only.
  - numactl on the target.
  - For the triad and the GPU copies, torch in O(python).
options:
  python:
    description:
      - Candidate interpreters for the children, in order; the first that
        exists and is executable runs them (the engine venv's Python, so
        that its torch measures).
      - None found - the module's own Python runs them, with the
        standard-library kernel, and a note says so.
    type: list
    elements: path
    default: []
  kernel:
    description:
      - C(auto) uses torch when the interpreter has it, else the standard
        library; C(torch) requires torch (a child without it fails its
        measurement); C(stdlib) never imports torch for memory figures.
    type: str
    choices: [auto, torch, stdlib]
    default: auto
  size_mib:
    description:
      - MiB per buffer (the triad uses three, the copy two, the GPU copies
        one pinned host buffer and one device buffer). 1-16384.
    type: int
    default: 256
  seconds:
    description:
      - Seconds each measurement repeats its timed pass after one warm-up
        pass (at least three passes); the best pass is the figure. 0.01-60.
    type: float
    default: 0.5
  timeout:
    description:
      - Seconds a child may run before it is killed with its process group
        (its measurement is then not measured, with the reason). 1-3600.
    type: int
    default: 120
  gpus:
    description:
      - Measure the host-device copies (when torch sees a device).
    type: bool
    default: true
  numactl:
    description:
      - The numactl program (a name looked up on the host's PATH, or a path).
    type: str
    default: numactl
extends_documentation_fragment:
  - gpufleet.numa.read_only
notes:
  - It only runs short child processes that change nothing; check mode measures too.
  - A whole host takes about (nodes with CPUs x nodes with memory + nodes) x (start + O(seconds))
    plus O(seconds) x 2 per GPU per node; about 15 s on two nodes with torch.
"""

EXAMPLES = r"""
- name: Measure with the engine's torch
  gpufleet.numa.numa_bandwidth:
    python: [/opt/vllm/bin/python]
  register: measured

- name: A quick run with small buffers
  gpufleet.numa.numa_bandwidth:
    size_mib: 32
    seconds: 0.1
    gpus: false
"""

RETURN = r"""
bandwidth:
  description: The figures (docs/bandwidth.md, "The record"); GB/s are bytes counted / best seconds / 1e9.
  returned: always
  type: dict
  contains:
    version:
      description: The record's version.
      type: int
      sample: 1
    measured_at:
      description: When, in UTC.
      type: str
      sample: "2025-05-01T12:00:00Z"
    python:
      description: The interpreter that ran the children.
      type: str
      sample: /opt/vllm/bin/python
    size_mib:
      description: MiB per buffer.
      type: int
      sample: 256
    seconds:
      description: Seconds each measurement repeated its pass.
      type: float
      sample: 0.5
    memory:
      description: Memory bandwidth per pair of CPU node and memory node.
      type: dict
      sample:
        method: torch-triad
        pairs: [{cpu_node: 0, memory_node: 0, gbps: 95.2, threads: 32}, {cpu_node: 0, memory_node: 1, gbps: 51.8, threads: 32}]
        notes: []
    gpus:
      description: Pinned host-to-device and device-to-host bandwidth per NUMA node and GPU.
      type: dict
      sample:
        method: torch-cuda-pinned
        copies: [{node: 0, gpu: "0000:18:00.0", index: 0, gpu_node: 0, name: NVIDIA H100 80GB HBM3, h2d_gbps: 53.1, d2h_gbps: 52.7}]
        notes: []
"""

import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import measure
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import module_which

ARGUMENT_SPEC = dict(
    python=dict(type="list", elements="path", default=[]),
    kernel=dict(type="str", choices=list(measure.KERNELS), default="auto"),
    size_mib=dict(type="int", default=256),
    seconds=dict(type="float", default=0.5),
    timeout=dict(type="int", default=120),
    gpus=dict(type="bool", default=True),
    numactl=dict(type="str", default="numactl"),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = dict(module.params)
    which = module_which(module.get_bin_path)
    python, note = measure.choose_python(params["python"], which, sys.executable)
    settings = dict(params, python=python)
    try:
        measure.check_settings(settings)
        reader = LiveReader("/", which=which, binaries={"numactl": params["numactl"]}, timeout=params["timeout"])
        bandwidth = measure.measure(reader, settings)
    except ValueError as exc:
        module.fail_json(msg="numa_bandwidth: %s" % exc)
    if note:
        bandwidth["memory"]["notes"].insert(0, note)
    module.exit_json(changed=False, bandwidth=bandwidth)


if __name__ == "__main__":
    main()
