#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: numa_audit
short_description: Find GPU processes on the wrong NUMA node, and drift from the deployed plan
version_added: "0.1.0"
description:
  - Lists the processes that hold GPUs (NVML C(nvmlDeviceGetComputeRunningProcesses) when C(pynvml)
    imports, else C(nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader)) and compares
    each with its GPUs' locality - the CPUs it may run on and the memory nodes it may use
    (C(/proc/PID/status) C(Cpus_allowed_list), C(Mems_allowed_list)), where its memory actually is
    (C(/proc/PID/numa_maps) page counts per node), its memory policy, and its C(CUDA_VISIBLE_DEVICES) and
    C(CUDA_DEVICE_ORDER) (C(/proc/PID/environ)).
  - Processes of one session (a server and the tensor-parallel workers it started) are one group; a group
    whose GPUs span sockets is a critical finding.
  - With O(plan) (a deployed fleet plan on the controller), also reports drift - planned GPUs gone or new
    GPUs, a changed NUMA layout (NPS, SNC), instances not running where planned - and what a redeploy would
    change, by planning the host again with the deployed options.
  - Every finding has a severity (info, warning, error, critical), the subject (process or instance), a
    message and the fix. See C(docs/audit.md).
  - The module on the target only reads - the topology facts, the GPU processes and, with O(record=true), the
    capture - and returns C(topology), C(process_source), C(processes), C(process_warnings) and C(capture). The findings,
    the drift from O(plan), C(groups), C(instances), C(today_plan), C(counts), C(worst) and C(summary) are
    computed once, on the controller, by the action plugin (so neither the planner nor the report code is
    sent to the target).
  - With O(capture), nothing runs on the target - the action plugin replays a recorded capture on the
    controller through the same code. With O(record=true) the result also holds C(capture).
  - With O(plan), each planned instance's state is C(running), C(stopped), C(failed) or C(unknown), from the
    processes holding its GPUs and its unit's systemd state; an instance whose state cannot be told is an
    C(instance_state_unknown) warning, never counted as running.
  - Only the device selection variables of a process's environment are read (C(CUDA_VISIBLE_DEVICES),
    C(CUDA_DEVICE_ORDER), C(NVIDIA_VISIBLE_DEVICES), C(HIP_VISIBLE_DEVICES), C(ROCR_VISIBLE_DEVICES)), and
    C(GPUFLEET_ENGINE) (the engine package a unit was deployed with);
    whatever looks like a secret in its command line and process name is masked (option values named like key,
    token, secret, password or auth, C(NAME=VALUE) pairs, header values, URL userinfo, setproctitle titles;
    see C(docs/audit.md)). Neither the result nor a recorded capture holds anything else of them.
author:
  - gpufleet.numa contributors (@gpufleet)
options:
  root:
    description:
      - Directory under which C(/sys) and C(/proc) are read; C(/) on a normal host.
    type: path
    default: /
  record:
    description:
      - Also return C(capture) - every file, directory listing, symlink and command output this run read
        (topology and the GPU processes' C(/proc) files), to be saved and replayed with O(capture).
    type: bool
    default: false
  capture:
    description:
      - Path of a capture file (YAML or JSON, capture version 1) on the controller to replay instead of
        reading the target. Relative paths are looked up like other controller files. Handled by the action
        plugin; the target is not contacted.
    type: path
  plan:
    description:
      - Path of the deployed fleet plan on the controller (YAML or JSON; the C(fleet_plan) output, optionally
        as C({plan, options}); see C(docs/audit.md)). The host's instances are the ones whose C(host) is its
        inventory name. Text that starts with C({) is read as JSON (as the kept plan is written), other text
        as YAML. Handled by the action plugin.
    type: path
  nvml:
    description:
      - Try to import C(pynvml) (package C(nvidia-ml-py)) on the target for the topology and the process list.
    type: bool
    default: true
  nvidia_smi:
    description:
      - Name or path of the C(nvidia-smi) binary, run in the C locale when NVML is not available.
        A missing binary is not an error (the processes are then unknown, an info finding).
    type: str
    default: nvidia-smi
  units:
    description:
      - The planned systemd units whose state is read (one C(systemctl show
        --property=Id,LoadState,ActiveState,SubState,MainPID,ExecMainStartTimestampMonotonic UNIT...)), each a
        service name of C([A-Za-z0-9_.:@-]) ending in C(.service). Set by the action plugin from O(plan) and
        O(unit_prefix); only where systemd is the init system (C(/run/systemd/system)) and C(systemctl) is found,
        and only with O(root=/). Elsewhere nothing runs and C(unit_states.missing) says why.
    type: list
    elements: str
    default: []
  unit_prefix:
    description:
      - The vllm role's C(vllm_unit_prefix) - the unit of a planned instance is C(<unit_prefix><name>.service),
        unless the kept plan's C(deployed.unit) names it. Applied by the action plugin.
    type: str
    default: gpufleet-
  memory_threshold:
    description:
      - Percentage of a process's resident memory on NUMA nodes other than its GPUs' at which that is a
        finding (a warning; an error from 50). Applied by the action plugin.
    type: int
    default: 20
  fail_on_severity:
    description:
      - Fail the task when a finding has this severity or a worse one; C(none) never fails. Applied by the
        action plugin.
    type: str
    choices: [none, info, warning, error, critical]
    default: none
extends_documentation_fragment:
  - gpufleet.numa.read_only
notes:
  - Reading other users' C(/proc/PID/environ) and C(numa_maps) needs privileges; run it with
    C(become=true). An unreadable process is an info finding, not a guess.
  - On a host with one NUMA node nothing can be on the wrong node; only the environment checks apply.
seealso:
  - module: gpufleet.numa.numa_facts
  - name: Audit guide
    description: docs/audit.md in the collection.
    link: https://github.com/gpufleet/numa/blob/main/docs/audit.md
"""

EXAMPLES = r"""
- name: Audit GPU processes against the topology
  gpufleet.numa.numa_audit:
  become: true
  register: audit

- name: Audit against the deployed plan; fail on critical findings
  gpufleet.numa.numa_audit:
    plan: /srv/gpufleet/deployed-plan.yml
    fail_on_severity: critical
  become: true

- name: Record topology and GPU processes for later replay
  gpufleet.numa.numa_audit:
    record: true
  become: true
  register: audit_record

- name: Replay a recorded capture instead of reading the host
  gpufleet.numa.numa_audit:
    capture: captures/gpu-a.yml
    plan: deployed-plan.yml

# Whole fleet, HTML report and a CI gate:
#   ansible-playbook gpufleet.numa.audit_topology -i inventories/prod -e audit_plan=deployed-plan.yml
"""

RETURN = r"""
host:
  description: The host the findings are about (its inventory name; set by the action plugin).
  returned: always
  type: str
  sample: gpu-a
topology:
  description: The host's topology facts (schema version 1, as C(numa_facts) returns them; docs/facts.md).
  returned: always
  type: dict
  sample: {schema_version: 1, hostname: gpu-a, gpus: [], numa_nodes: [], links: {}}
process_source:
  description: Where the process list came from - nvml, nvidia-smi, or null when neither answered.
  returned: always
  type: str
  sample: nvidia-smi
processes:
  description: The processes that hold GPUs, by pid.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
      sample: 4242
    name:
      description: Name from C(/proc/PID/status); null when unreadable.
      type: str
      sample: vllm
    argv:
      description: Command line, secret option values masked.
      type: list
      elements: str
      sample: [/opt/vllm/bin/vllm, serve, Qwen/Qwen3-8B, --api-key, "***"]
    ppid:
      description: Parent pid; null when unknown.
      type: int
      sample: 1
    session:
      description: Session id (processes of one session form one group); null when unknown.
      type: int
      sample: 4242
    readable:
      description: Whether C(/proc/PID/status) could be read.
      type: bool
      sample: true
    gpus:
      description: PCI bus ids of the GPUs the process holds.
      type: list
      elements: str
      sample: ["0000:9a:00.0"]
    cpus_allowed:
      description: C(Cpus_allowed_list); null when unknown.
      type: str
      sample: "0-191"
    mems_allowed:
      description: C(Mems_allowed_list) (the cpuset's memory nodes); null when unknown.
      type: str
      sample: "0-1"
    memory_kb:
      description: Resident memory per NUMA node in KiB (keys are node ids as strings); null when unreadable.
      type: dict
      sample: {"0": 8123456, "1": 2030000}
    memory_policies:
      description: Resident memory per memory policy (C(default), C(bind:1), C(interleave:0-1)) in KiB.
      type: dict
      sample: {default: 10153456}
    memory_policy:
      description: The policy covering the most memory; null when unreadable.
      type: str
      sample: default
    environment:
      description: The device selection variables of its environment; null when unreadable.
      type: dict
      sample: {CUDA_VISIBLE_DEVICES: "4,5,6,7", CUDA_DEVICE_ORDER: PCI_BUS_ID}
findings:
  description: Worst first. Computed on the controller.
  returned: always
  type: list
  elements: dict
  contains:
    host:
      description: Host name.
      type: str
      sample: gpu-a
    severity:
      description: info, warning, error or critical.
      type: str
      sample: error
    code:
      description: >-
        What was found - gpus_span_sockets, gpus_span_nodes, process_locality, cuda_device_order,
        cuda_visible_mismatch, gpu_not_in_topology, gpu_node_unknown, process_unreadable, processes_unknown,
        gpu_missing, gpu_added, numa_layout_changed, instance_not_running, instance_misplaced,
        instance_state_unknown, engine_drift, unplanned_process, replan_differs, replan_failed (docs/audit.md).
      type: str
      sample: process_locality
    subject:
      description: The process (name and pid), the instance name, or the host.
      type: str
      sample: vllm (pid 4242)
    message:
      description: What is wrong, in one sentence.
      type: str
      sample: vllm (pid 4242) uses GPUs 4,5,6,7 on node 1 but may run on all CPUs and 80% of its memory is on node 0
    fix:
      description: What to do about it.
      type: str
      sample: bind it to node 1 (numactl --cpunodebind=1 --membind=1)
    pids:
      description: Processes concerned.
      type: list
      elements: int
      sample: [4242]
    gpus:
      description: GPUs concerned (bus ids, or ids where the facts have no bus ids).
      type: list
      elements: str
      sample: ["0000:9a:00.0"]
    instance:
      description: Planned instance concerned; null when none.
      type: str
      sample: vllm-1
groups:
  description: Process groups (one per session) with their GPUs and where they actually run. Computed on the
    controller.
  returned: always
  type: list
  elements: dict
  contains:
    key:
      description: Session id (or the pid when unknown).
      type: int
      sample: 4242
    name:
      description: Name of the group's leader.
      type: str
      sample: vllm
    leader:
      description: Pid of the session leader (or the lowest pid).
      type: int
      sample: 4242
    pids:
      description: Pids of the group's GPU processes.
      type: list
      elements: int
      sample: [4242, 4301]
    gpus:
      description: Bus ids of the GPUs the group holds.
      type: list
      elements: str
      sample: ["0000:9a:00.0"]
    gpu_ids:
      description: Topology ids of those GPUs that the facts know.
      type: list
      elements: str
      sample: ["0000:9a:00.0"]
    unknown_gpus:
      description: Held bus ids the topology does not list.
      type: list
      elements: str
      sample: []
    numa_nodes:
      description: NUMA nodes of the group's GPUs.
      type: list
      elements: int
      sample: [1]
    sockets:
      description: Sockets of those nodes (as strings), where known.
      type: list
      elements: str
      sample: ["1"]
    instance:
      description: The planned instance whose GPUs the group holds exactly; null when none.
      type: str
      sample: vllm-1
    misplaced:
      description: Whether any finding puts the group or one of its processes on the wrong node.
      type: bool
      sample: true
    cpu_nodes:
      description: NUMA nodes of the CPUs the group's processes may run on.
      type: list
      elements: int
      sample: [0, 1]
    memory_node:
      description: The node holding most of the leader's (first readable process's) memory; null when unknown.
      type: int
      sample: 0
instances:
  description: With O(plan), each planned instance of this host and its state today. Computed on the controller.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Instance name.
      type: str
      sample: vllm-1
    gpus:
      description: Planned GPUs (bus ids or ids).
      type: list
      elements: str
      sample: ["0000:9a:00.0"]
    numa_nodes:
      description: Planned NUMA nodes.
      type: list
      elements: int
      sample: [1]
    cpus:
      description: Planned CPUs.
      type: str
      sample: "48-95,144-191"
    state:
      description: >-
        running (a process group holds exactly its GPUs, or without a GPU process source its unit is active
        with a main PID), stopped (its unit is inactive, or nothing holds its GPUs), failed (its unit failed,
        or waits to restart after a failure) or unknown (docs/audit.md).
      type: str
      sample: running
    problem:
      description: Where it is not as planned - gpu missing, layout changed, elsewhere; null when it is.
      type: str
      sample: null
    unit:
      description: Its systemd unit.
      type: str
      sample: gpufleet-vllm-1.service
    unit_state:
      description: The unit's C(ActiveState (SubState)), C(not-found), or null when not read.
      type: str
      sample: active (running)
    engine:
      description: The C(GPUFLEET_ENGINE) of the processes running it; null when not seen.
      type: str
      sample: vllm==0.11.0
    pids:
      description: Pids of the group running it.
      type: list
      elements: int
      sample: [4242, 4301]
unit_states:
  description: The planned units' systemd state as the module read it - C(source) (systemd or null), C(units)
    (unit name -> C(id), C(load_state), C(active_state), C(sub_state), C(main_pid), C(started_monotonic_us)) and
    C(missing) (why nothing was read; null when it was). A replayed capture holds none.
  returned: always
  type: dict
  sample: {source: null, units: {}, missing: "systemd is not the init system here (no /run/systemd/system)"}
today_plan:
  description: With O(plan), the host planned again from today's facts with the deployed options (the
    socket_local_groups result, docs/plan.md); null without a plan or when planning failed. Computed on the
    controller.
  returned: always
  type: dict
  sample: {host: gpu-a, groups: [], unused: [], warnings: []}
counts:
  description: Number of findings per severity. Computed on the controller.
  returned: always
  type: dict
  sample: {info: 0, warning: 1, error: 0, critical: 2}
worst:
  description: The worst severity found; null without findings. Computed on the controller.
  returned: always
  type: str
  sample: critical
warnings:
  description: Problems reading the processes (unreadable /proc files, unparsable lines). The module sends them
    to the action plugin as C(process_warnings).
  returned: always
  type: list
  elements: str
  sample: []
summary:
  description: Human-readable lines - the topology summary, then the findings table. Computed on the controller.
  returned: always
  type: list
  elements: str
  sample: ["gpu-a: 2 NUMA node(s), 2 socket(s), 8 GPU(s); sources: sysfs, nvml"]
capture:
  description: The raw inputs this run read (capture version 1), with the GPU processes' /proc files and the
    process list; save it as YAML or JSON and replay it with O(capture).
  returned: when O(record=true)
  type: dict
  sample: {capture_version: 1, hostname: gpu-a, files: {"/proc/4242/status": "Name:\tvllm\n..."}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvml import import_pynvml
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import gather as audit_gather
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import units as unit_reader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import C_LOCALE, module_which

# The findings code runs on the controller: the severities are spelled out
# here, not imported (tests hold them equal to audit/locality.py's).
SEVERITIES = ("info", "warning", "error", "critical")
DEFAULT_MEMORY_THRESHOLD = 20

ARGUMENT_SPEC = dict(
    root=dict(type="path", default="/"),
    record=dict(type="bool", default=False),
    capture=dict(type="path"),
    plan=dict(type="path"),
    nvml=dict(type="bool", default=True),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    units=dict(type="list", elements="str", default=[]),
    unit_prefix=dict(type="str", default="gpufleet-"),
    memory_threshold=dict(type="int", default=DEFAULT_MEMORY_THRESHOLD),
    fail_on_severity=dict(type="str", default="none", choices=["none"] + list(SEVERITIES)),
)
# Options the action plugin applies on the controller; the module never sees them set.
CONTROLLER_OPTIONS = ("capture", "plan")


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    for name in CONTROLLER_OPTIONS:
        if params[name]:
            module.fail_json(
                msg="%s=%s is read on the controller by the gpufleet.numa.numa_audit action plugin; call the module "
                "by that name (or through the collection's ansible.cfg)" % (name, params[name]))
    if params["fail_on_severity"] != "none":
        module.fail_json(
            msg="fail_on_severity=%s is applied on the controller by the gpufleet.numa.numa_audit action plugin "
            "(the findings are computed there); call the module by that name" % params["fail_on_severity"])

    def runner(argv):
        return module.run_command(argv, environ_update=C_LOCALE)

    which = module_which(module.get_bin_path)
    pynvml = import_pynvml() if params["nvml"] else None
    try:
        facts, processes, capture = audit_gather.gather_live(
            root=params["root"], runner=runner, which=which, nvidia_smi_binary=params["nvidia_smi"],
            pynvml=pynvml, use_nvml=params["nvml"], record=params["record"])
        unit_reader.check_unit_names(params["units"])
        unit_states = unit_reader.read_unit_states(
            LiveReader(root=params["root"], runner=runner, which=which), params["units"], root=params["root"])
    except ValueError as exc:
        module.fail_json(msg="numa_audit: %s" % exc)
    # Not under warnings: ansible-core 2.19 makes a module's warnings its own
    # records (not text) and deprecates passing them to exit_json.
    result = dict(changed=False, topology=facts, process_source=processes.get("source"),
                  processes=processes.get("processes") or [],
                  process_warnings=list(processes.get("warnings") or []) + unit_states.pop("warnings"),
                  unit_states=unit_states)
    if capture is not None:
        result["capture"] = capture
    module.exit_json(**result)


if __name__ == "__main__":
    main()
