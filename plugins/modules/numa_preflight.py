#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: numa_preflight
short_description: Check that a host can bind its vLLM instances as planned, before anything changes
version_added: "0.1.0"
description:
  - Reads, without changing anything, what silently breaks NUMA binding in the field and reports each problem as a
    finding with a severity (C(critical), C(warning), C(info)) and the fix (C(docs/preflight.md)).
  - C(numactl) missing where a unit binds with it; the memory-policy syscalls (C(set_mempolicy), C(mbind),
    C(sched_setaffinity)) denied under the unit's own sandbox; the services' cgroup C(cpuset.mems) excluding a
    node an instance binds to; automatic NUMA balancing on (C(kernel.numa_balancing)); persistence mode off;
    an NVSwitch system without an active fabric manager; sockets split into several NUMA nodes (SNC, NPS).
  - The syscall probe runs once per planned unit under C(systemd-run --wait --pipe --quiet --collect) with the
    unit's NUMA directives, its sandboxing (C(vllm_hardening)), its C(User=)/C(Group=) where the account exists,
    and its numactl prefix, so the sandbox itself is proven to allow binding. It starts a transient service that
    runs the target's Python for well under a second and leaves nothing behind.
  - The findings are worked out by the action plugin on the controller from what the module read; the module
    only reads.
  - With O(capture) (or, unset, the host's C(numa_capture) variable) nothing runs on the target - the action
    plugin replays the recorded capture through the same readers. A check whose input the capture does not hold
    is reported as C(not checked (recorded capture)) at C(info) level.
author:
  - gpufleet.numa contributors (@gpufleet)
requirements:
  - Python 3.8 or later on the target, standard library only.
  - The syscall probe needs systemd as PID 1 and the right to start transient services (root, C(become)).
options:
  units:
    description:
      - The planned units to probe, as the C(gpufleet.numa.preflight_units) filter computes them from the plan and
        the role's variables. Empty, the host-wide checks run and the probe says it was given no unit.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The instance's name.
        type: str
        required: true
      device:
        description: The instance's device class.
        type: str
        choices: [nvidia, amd, cpu]
        default: nvidia
      gpus:
        description: PCI bus ids of the instance's GPUs.
        type: list
        elements: str
        default: []
      mems:
        description: The NUMA nodes the instance binds its memory to (C(0,1)).
        type: str
        required: true
      cpus:
        description: The CPUs the instance runs on (a cpulist).
        type: str
        required: true
      policy:
        description: The memory policy.
        type: str
        choices: [bind, interleave]
        default: bind
      prefix:
        description: The unit's numactl prefix (argv words), empty when systemd binds.
        type: list
        elements: str
        default: []
      properties:
        description: The unit's C([directive, value]) pairs - its NUMA directives and sandboxing.
        type: list
        elements: list
        default: []
      user:
        description: The unit's C(User=); used when the account exists.
        type: str
        default: ""
      group:
        description: The unit's C(Group=); used when the group exists.
        type: str
        default: ""
  capture:
    description:
      - Path of a capture file on the controller to replay instead of reading the target (as for
        M(gpufleet.numa.numa_facts)). An empty string reads the live host even when C(numa_capture) is set.
      - Handled by the action plugin.
    type: path
  topology:
    description:
      - Gather the topology facts too (for the sub-NUMA check). The action plugin turns it off when the host's
        C(ansible_facts.numa_topology) is already known.
    type: bool
    default: true
  cgroup_slice:
    description: The cgroup the services run in, below C(/sys/fs/cgroup), as for M(gpufleet.numa.numa_facts).
    type: str
    default: system.slice
  numactl_installed_by_role:
    description:
      - Whether role vllm installs numactl on this host (C(vllm_install) with numactl in C(vllm_packages)); a missing
        numactl is then C(info), not C(critical). Read by the action plugin.
    type: bool
    default: false
  planned:
    description:
      - What the C(gpufleet.numa.preflight_units) filter returns for the host, whole (C(units) and
        C(numactl_installed_by_role)), instead of those two options; the filter is then evaluated once. Read by the
        action plugin. Mutually exclusive with O(units) and O(numactl_installed_by_role).
    type: dict
  nvml:
    description: Read persistence mode through NVML when C(pynvml) imports on the target.
    type: bool
    default: true
  nvidia_smi:
    description: Name or path of C(nvidia-smi).
    type: str
    default: nvidia-smi
  timeout:
    description: Seconds each command (C(nvidia-smi), C(systemd-run) with the probe) may run before it is killed.
    type: int
    default: 30
  record:
    description: Also return C(capture), everything this run read, to be replayed later.
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.numa.read_only
notes:
  - In check mode the module reads and probes the same (the probe changes nothing).
  - Where systemd is not PID 1, or C(systemd-run) is missing, the probe is reported as not checked, with why.
  - What a host returns is data - the action plugin keeps only C(readings), C(topology) and C(capture), checked
    against their shape, and works out the findings itself.
seealso:
  - name: Host preflight
    description: docs/preflight.md in the collection.
    link: https://github.com/gpufleet/numa/blob/main/docs/preflight.md
"""

EXAMPLES = r"""
- name: Check each host before the deploy changes anything
  gpufleet.numa.numa_preflight:
    planned: "{{ hostvars | gpufleet.numa.preflight_units(inventory_hostname, plan) }}"
  register: preflight
  become: true

- name: Show the findings
  ansible.builtin.debug:
    var: preflight.summary

# Ad hoc, the host-wide checks of a whole inventory:
#   ansible all -i inventories/hetzner -m gpufleet.numa.numa_preflight -b
"""

RETURN = r"""
findings:
  description: What is wrong or unknown, worst first within each check; empty for a clean host.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: >-
        numactl, syscalls, cpuset_mems, numa_balancing, persistence_mode, fabric_manager or sub_numa.
      type: str
      sample: numa_balancing
    severity:
      description: critical (cannot bind as planned), warning or info.
      type: str
      sample: warning
    subject:
      description: What the finding is about (a path, an instance, GPUs, a socket).
      type: str
      sample: kernel.numa_balancing
    message:
      description: What was found, and why it matters.
      type: str
      sample: "automatic NUMA balancing is on (/proc/sys/kernel/numa_balancing is 1): ..."
    fix:
      description: How to fix it; empty for information only.
      type: str
      sample: "turn it off: `sysctl -w kernel.numa_balancing=0`, ..."
worst:
  description: The highest severity among the findings; null when there is none.
  returned: always
  type: str
  sample: critical
summary:
  description: One line per finding, critical first; C(["all passed"]) for a host without a finding.
  returned: always
  type: list
  elements: str
  sample: ["critical syscalls vllm-0: set_mempolicy, mbind denied (EPERM, EPERM) ..."]
readings:
  description: What was read on the host (or replayed), as docs/preflight.md describes.
  returned: always
  type: dict
  sample: {numa_balancing: "0", cpuset: {path: /sys/fs/cgroup/system.slice/cpuset.mems.effective, mems: "0-1"}}
capture:
  description: Everything this run read, as a capture (capture_version 1).
  returned: when O(record=true)
  type: dict
  sample: {capture_version: 1, commands: {"numactl --show": "policy: default\n"}}
capture_file:
  description: The capture replayed.
  returned: when a capture was replayed
  type: str
  sample: /srv/captures/gpu-a.yml
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.gather import read_live
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvml import import_pynvml
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import COMMAND_TIMEOUT, module_which

UNIT_SPEC = dict(
    name=dict(type="str", required=True),
    device=dict(type="str", choices=["nvidia", "amd", "cpu"], default="nvidia"),
    gpus=dict(type="list", elements="str", default=[]),
    mems=dict(type="str", required=True),
    cpus=dict(type="str", required=True),
    policy=dict(type="str", choices=["bind", "interleave"], default="bind"),
    prefix=dict(type="list", elements="str", default=[]),
    properties=dict(type="list", elements="list", default=[]),
    user=dict(type="str", default=""),
    group=dict(type="str", default=""),
)
ARGUMENT_SPEC = dict(
    units=dict(type="list", elements="dict", options=UNIT_SPEC, default=[]),
    capture=dict(type="path"),
    topology=dict(type="bool", default=True),
    cgroup_slice=dict(type="str", default="system.slice"),
    numactl_installed_by_role=dict(type="bool", default=False),
    nvml=dict(type="bool", default=True),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    timeout=dict(type="int", default=COMMAND_TIMEOUT),
    record=dict(type="bool", default=False),
    planned=dict(type="dict"),
)
MUTUALLY_EXCLUSIVE = [("planned", "units"), ("planned", "numactl_installed_by_role")]


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE, supports_check_mode=True)
    params = module.params
    if params["capture"]:
        module.fail_json(msg="capture=%s must be replayed on the controller by the gpufleet.numa.numa_preflight "
                         "action plugin; call the module by that name" % params["capture"])
    if params["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, got %d" % params["timeout"])
    try:
        readings, topology, capture = read_live(
            params["units"], which=module_which(module.get_bin_path),
            pynvml=import_pynvml() if params["nvml"] else None, nvidia_smi=params["nvidia_smi"],
            timeout=params["timeout"], cgroup_slice=params["cgroup_slice"], topology=params["topology"],
            record=params["record"])
    except ValueError as exc:
        module.fail_json(msg="numa_preflight: %s" % exc)
    result = dict(changed=False, readings=readings)
    if topology is not None:
        result["topology"] = topology
    if capture is not None:
        result["capture"] = capture
    module.exit_json(**result)


if __name__ == "__main__":
    main()
