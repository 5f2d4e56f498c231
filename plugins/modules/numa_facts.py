#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: numa_facts
short_description: Gather GPU, NUMA and PCIe topology facts
version_added: "0.1.0"
description:
  - Reads the host's NUMA nodes, sockets, SMT siblings, GPUs, network adapters
    and the GPU-to-GPU link matrix, and returns them as
    C(ansible_facts.numa_topology) (schema version 1, see C(docs/facts.md)).
  - Sources, in order of precedence for links - NVML (when the C(pynvml)
    module imports on the target), C(nvidia-smi) (when NVML did not list the
    GPUs), and sysfs (every Linux host, any GPU vendor; the PCI tree gives
    PIX/PXB/PHB/NODE/SYS).
  - With O(capture), nothing runs on the target - the action plugin replays a
    recorded capture file on the controller through the same code.
  - With O(record=true) the result also holds C(capture), the raw inputs this
    run read, to be saved as a capture file and replayed later.
author:
  - gpufleet.numa contributors (@gpufleet)
requirements:
  - Python 3.8 or later on the target, standard library only.
options:
  root:
    description:
      - Directory under which C(/sys) is read. Use it for a copied sysfs tree or
        a host file system mounted into a container.
      - It must exist (the task fails naming it otherwise). Every read stays
        below it - a symlink's absolute target is taken relative to O(root), a
        path that would climb above it with C(..) is not read and gives a
        warning. Only regular files and directories are read (a FIFO or a device
        file is refused without blocking, with a warning), at most 1 MiB per file.
    type: path
    default: /
  record:
    description:
      - Also return C(capture), everything this run read (files, symlinks,
        directory listings, command output, the NVML record).
      - Commands such as C(nvidia-smi topo -m) are run and recorded even when
        NVML already answered, so that the capture is complete.
    type: bool
    default: false
  capture:
    description:
      - Path of a capture file (YAML or JSON, capture version 1) on the
        controller to replay instead of reading the target.
      - Relative paths are looked up like other controller files (the role or
        playbook C(files/) directory, the playbook directory, then the current
        directory).
      - Handled by the action plugin; the target is not contacted.
      - Unset, a host with the C(numa_capture) host variable is replayed from
        that file (as the playbooks do), also in ad-hoc runs
        (C(ansible all -m gpufleet.numa.numa_facts)).
      - A capture is untrusted input (it may come from a bug report). Only a
        regular file of at most O(capture_max_bytes) is read; YAML anchors and
        aliases may add at most 10,000 nodes, nesting is limited to 32 levels,
        CPU ids to 65,536. Anything beyond fails the task with a message naming
        the file and the problem.
      - The plain output of C(nvidia-smi topo -m) saved as a text file is
        accepted as a capture of that command.
    type: path
  capture_max_bytes:
    description:
      - Largest capture file O(capture) reads, in bytes. Recorded captures are
        well under 1 MiB.
    type: int
    default: 4194304
  nvml:
    description:
      - Try to import C(pynvml) (package C(nvidia-ml-py)) on the target and
        read GPUs and NVLinks through NVML.
    type: bool
    default: true
  nvidia_smi:
    description:
      - Name or path of the C(nvidia-smi) binary. It runs, in the C locale,
        only when NVML is unavailable and sysfs shows NVIDIA GPUs (or O(record)
        is set). A missing binary is not an error.
    type: str
    default: nvidia-smi
  cgroup_slice:
    description:
      - The cgroup (a path below C(/sys/fs/cgroup), cgroup v2) the services
        run in. Its C(cpuset.cpus.effective), else the one of the cgroup root
        this host shows (an LXC container's or a pod's own root), limits the
        CPUs reported as C(usable_cpus); so do this module's own
        C(Cpus_allowed_list) (C(/proc/self/status)) and the isolated CPUs
        (C(/sys/devices/system/cpu/isolated), C(isolcpus=)).
      - A path of C([A-Za-z0-9_@+=:,./-]) without C(..) parts.
      - Used on replay too (O(capture)), where the capture holds that file.
    type: str
    default: system.slice
  nvidia_smi_timeout:
    description:
      - Seconds each C(nvidia-smi) call may run. One that does not answer in
        time is killed (with what it started) and reported as a warning; the
        other sources still give their facts, and C(nvidia-smi) is not run again
        in that task.
    type: int
    default: 30
extends_documentation_fragment:
  - gpufleet.numa.read_only
attributes:
  facts:
    support: full
    description: Sets C(ansible_facts.numa_topology).
notes:
  - NVML is used when the target's Python can C(import pynvml) (from the
    C(nvidia-ml-py) package); it is never required. Without it and without
    C(nvidia-smi), GPU names, UUIDs and NVLinks are unknown (null) and links
    come from the PCI tree only.
  - A GPU whose NUMA node no source can tell gets C(numa_node=null) and a
    warning, never a made-up 0.
  - NUMA nodes without CPUs (Grace Hopper's GPU memory, CXL memory
    expanders) have C(cpus="") and C(kind=memory) or C(kind=gpu_memory);
    a GPU's own memory node is its C(memory_numa_node), never its
    C(numa_node).
  - In a container, under a systemd C(AllowedCPUs=) slice or with
    C(isolcpus=), C(usable_cpus) holds the CPUs services may use; placement
    hands out only those. A capture keeps only the C(Cpus_allowed) lines of
    C(/proc/self/status).
  - Every entry of C(numa_topology.warnings) is also shown as an Ansible warning.
  - Facts gathering never reports C(changed).
  - What a host returns is data - of the module's result the action plugin keeps only the fields
    documented under RETURN (C(ansible_facts.numa_topology), which must be a mapping, C(ansible_facts.numa_summary),
    C(summary), C(capture))
    and Ansible's own (C(changed), C(failed), C(msg), C(warnings), ...). Any other key or fact is dropped
    with a warning naming it, so a host cannot set a variable of its own (docs/deploy.md, Controller-side paths).
seealso:
  - name: Topology facts schema
    description: docs/facts.md in the collection.
    link: https://github.com/gpufleet/numa/blob/main/docs/facts.md
"""

EXAMPLES = r"""
- name: Gather NUMA topology facts
  gpufleet.numa.numa_facts:

- name: Show what the placement will see
  ansible.builtin.debug:
    var: ansible_facts.numa_topology.gpus

- name: Record this host's topology for later replay
  gpufleet.numa.numa_facts:
    record: true
  register: numa_record

- name: Replay a recorded capture instead of reading the host
  gpufleet.numa.numa_facts:
    capture: captures/gpu-a.yml

# Ad-hoc audit of a whole inventory:
#   ansible all -i inventories/prod -m gpufleet.numa.numa_facts
# and of a capture file, without any host:
#   ansible localhost -m gpufleet.numa.numa_facts -a capture=captures/gpu-a.yml
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    numa_summary:
      description:
        - The lines of RV(summary) as a fact too. Callbacks print a result's keys sorted, so this is what an
          ad-hoc run (C(ansible all -m gpufleet.numa.numa_facts)) shows first per host, before the topology.
      returned: always
      type: list
      elements: str
    numa_topology:
      description: The host's topology, schema version 1 (docs/facts.md).
      returned: always
      type: dict
      contains:
        schema_version:
          description: Version of this schema.
          type: int
          returned: always
          sample: 1
        hostname:
          description: Host name the facts describe.
          type: str
          returned: always
          sample: gpu-a
        sources:
          description: Sources that contributed (sysfs, nvml, nvidia-smi, capture).
          type: list
          elements: str
          returned: always
          sample: [sysfs, nvml]
        sockets:
          description: CPU sockets (physical packages); empty when unknown.
          type: list
          elements: dict
          returned: always
          contains:
            id:
              description: Physical package id.
              type: int
              sample: 0
            numa_nodes:
              description: NUMA nodes whose CPUs are on this socket.
              type: list
              elements: int
              sample: [0]
            cpus:
              description: CPUs of the socket as a cpulist.
              type: str
              sample: "0-31,64-95"
        numa_nodes:
          description: NUMA nodes.
          type: list
          elements: dict
          returned: always
          contains:
            id:
              description: Node id.
              type: int
              sample: 0
            cpus:
              description: Online CPUs of the node as a cpulist; empty for a memory-only node, null when unknown.
              type: str
              sample: "0-31,64-95"
            memory_mb:
              description: Node memory in MiB; null when unknown.
              type: int
              sample: 515000
            distances:
              description: SLIT distance to every node by node id (keys are strings once the result is JSON); empty when unknown.
              type: dict
              sample: {"0": 10, "1": 21}
            socket:
              description: Socket of the node's CPUs; null when unknown.
              type: int
              sample: 0
            kind:
              description: >-
                cpu (the node has CPUs), memory (no CPUs - CXL memory, HBM, an empty placeholder node), gpu_memory
                (no CPUs, and a GPU names it as its own memory - Grace Hopper/Blackwell); null when the CPUs are unknown.
              type: str
              sample: cpu
            usable_cpus:
              description: >-
                The node's CPUs that services may use - those in the cgroup cpuset of O(cgroup_slice) (else the cgroup
                root's), in this module's Cpus_allowed_list and not isolated; a warning names what is left out. Null
                when none of those files could be read.
              type: str
              sample: "0-15,64-79"
        smt_siblings:
          description: One list of hardware threads per physical core; empty when unknown.
          type: list
          elements: list
          returned: always
          sample: [[0, 64], [1, 65]]
        gpus:
          description: GPUs sorted by PCI bus id.
          type: list
          elements: dict
          returned: always
          contains:
            id:
              description: Stable key - the PCI bus id, or C(GPU<index>) when no source knows it.
              type: str
              sample: "0000:1a:00.0"
            index:
              description: NVML / nvidia-smi index (PCI order); null for non-NVIDIA GPUs.
              type: int
              sample: 0
            pci_bus_id:
              description: PCI bus id, lower case with a 4-digit domain; null when unknown.
              type: str
              sample: "0000:1a:00.0"
            uuid:
              description: GPU UUID; null when unknown.
              type: str
              sample: GPU-8f4c2a1e-0b7d-4c59-9e83-2d5b6f0a1c34
            name:
              description: Product name; null when unknown.
              type: str
              sample: NVIDIA H100 80GB HBM3
            vendor:
              description: nvidia, amd, intel or other.
              type: str
              sample: nvidia
            numa_node:
              description: NUMA node the GPU is attached to; null (with a warning) when unknown.
              type: int
              sample: 0
            local_cpus:
              description: CPUs local to the GPU as a cpulist; null when unknown.
              type: str
              sample: "0-31,64-95"
            memory_numa_node:
              description: >-
                The NUMA node of the GPU's own memory (a node without CPUs; C(nvidia-smi topo -m) "GPU NUMA ID", or
                the node sysfs puts the GPU on when that node has no CPUs); null on GPUs whose memory is no NUMA node.
              type: int
              sample: 1
            pci_class:
              description: The GPU's PCI class as sysfs writes it; null when no source read it (added).
              type: str
              sample: "0x030200"
            memory_mb:
              description: GPU memory in MiB; null when unknown.
              type: int
              sample: 81559
            mig_mode:
              description: enabled, disabled, or null when unknown.
              type: str
              sample: disabled
            pcie:
              description: PCIe link; each value null when unknown.
              type: dict
              contains:
                current_speed:
                  description: Current link speed as sysfs writes it.
                  type: str
                  sample: "2.5 GT/s PCIe"
                max_speed:
                  description: Maximum link speed.
                  type: str
                  sample: "32.0 GT/s PCIe"
                current_width:
                  description: Current link width (lanes).
                  type: int
                  sample: 16
                max_width:
                  description: Maximum link width (lanes).
                  type: int
                  sample: 16
        nics:
          description: Ethernet and InfiniBand adapters found on the PCI bus.
          type: list
          elements: dict
          returned: always
          contains:
            id:
              description: PCI bus id; C(NIC<n>) for a NIC known only from an C(nvidia-smi topo -m) column.
              type: str
              sample: "0000:0c:00.0"
            pci_bus_id:
              description: PCI bus id; null when unknown.
              type: str
              sample: "0000:0c:00.0"
            vendor:
              description: Vendor name (mellanox, intel, broadcom, ...) or other.
              type: str
              sample: mellanox
            interfaces:
              description: Network and InfiniBand device names, sorted.
              type: list
              elements: str
              sample: [ens1f0, mlx5_0]
            net_interfaces:
              description: Network interface names below the device (C(net/)), sorted.
              type: list
              elements: str
              sample: [ib0]
              version_added: 0.1.0
            rdma_devices:
              description: >-
                RDMA device names below the device (C(infiniband/)), sorted: what C(NCCL_IB_HCA) takes.
                For a NIC known only from an C(nvidia-smi topo -m) column, the name of its legend.
              type: list
              elements: str
              sample: [mlx4_0]
              version_added: 0.1.0
            pci_class:
              description: >-
                PCI class (C(0x020000) Ethernet, C(0x020700) InfiniBand, C(0x028000) network other as on a
                ConnectX-3, C(0x0c0600) InfiniBand serial bus as on QLogic HCAs); null when unknown. Every PCI
                device with a network or InfiniBand interface is a NIC, whatever its class.
              type: str
              sample: "0x020700"
              version_added: 0.1.0
            numa_node:
              description: NUMA node; null when unknown.
              type: int
              sample: 0
            local_cpus:
              description: Local CPUs as a cpulist; null when unknown.
              type: str
              sample: "0-31,64-95"
            pcie:
              description: PCIe link, as for GPUs.
              type: dict
              sample: {current_speed: "16.0 GT/s PCIe", max_speed: "16.0 GT/s PCIe", current_width: 16, max_width: 16}
            gpu_links:
              description: >-
                GPU id to the NIC's link class (PIX, PXB, PHB, NODE, SYS), as the NIC columns of
                C(nvidia-smi topo -m) give it - from the PCI tree, that column overriding it; empty when unknown.
              type: dict
              sample: {"0000:1a:00.0": PIX}
        links:
          description: >-
            GPU pair to link class (NV<n>, XGMI<n>, PIX, PXB, PHB, NODE, SYS), keyed by GPU id in both
            directions, no self pairs.
          type: dict
          returned: always
          sample: {"0000:1a:00.0": {"0000:1b:00.0": NV18}}
        warnings:
          description: Everything that is unknown, odd or contradictory.
          type: list
          elements: str
          returned: always
          sample: ["GPU 0000:3b:00.0 reports numa_node -1; NUMA node unknown"]
summary:
  description: Human-readable lines - per NUMA node its CPUs, memory and GPUs (index, bus id, name), then warnings.
  returned: always
  type: list
  elements: str
  sample:
    - "gpu-a: 2 NUMA node(s), 2 socket(s), 8 GPU(s); sources: sysfs, nvml"
    - "NUMA node 0 (socket 0): CPUs 0-31,64-95; memory 515000 MB"
    - "  GPU 0 0000:1a:00.0 NVIDIA H100 80GB HBM3"
capture:
  description: >-
    The raw inputs this run read (capture_version 1 - hostname, files, symlinks, directories,
    commands, nvml); save it as YAML or JSON and replay it with O(capture).
  returned: when O(record=true)
  type: dict
  sample: {capture_version: 1, hostname: gpu-a, files: {"/sys/devices/system/node/node0/cpulist": "0-1\n"}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvml import import_pynvml
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.gather import gather_live
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.summary import summary
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CAPTURE_MAX_BYTES, COMMAND_TIMEOUT, module_which

ARGUMENT_SPEC = dict(
    root=dict(type="path", default="/"),
    record=dict(type="bool", default=False),
    capture=dict(type="path"),
    capture_max_bytes=dict(type="int", default=CAPTURE_MAX_BYTES),
    nvml=dict(type="bool", default=True),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    nvidia_smi_timeout=dict(type="int", default=COMMAND_TIMEOUT),
    cgroup_slice=dict(type="str", default="system.slice"),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    if params["capture"]:
        module.fail_json(
            msg="capture=%s must be replayed on the controller by the gpufleet.numa.numa_facts action "
            "plugin; call the module by that name (or through the collection's ansible.cfg)" % params["capture"]
        )

    if params["nvidia_smi_timeout"] < 1:
        module.fail_json(msg="nvidia_smi_timeout must be at least 1 second, got %d" % params["nvidia_smi_timeout"])

    which = module_which(module.get_bin_path)
    pynvml = import_pynvml() if params["nvml"] else None
    try:
        facts, capture = gather_live(
            root=params["root"], which=which, nvidia_smi_binary=params["nvidia_smi"],
            pynvml=pynvml, use_nvml=params["nvml"], record=params["record"],
            timeout=params["nvidia_smi_timeout"], cgroup_slice=params["cgroup_slice"],
        )
    except ValueError as exc:
        module.fail_json(msg="numa_facts: %s" % exc)
    for warning in facts["warnings"]:
        module.warn(warning)
    lines = summary(facts)
    result = dict(changed=False, ansible_facts=dict(numa_summary=lines, numa_topology=facts), summary=lines)
    if capture is not None:
        result["capture"] = capture
    module.exit_json(**result)


if __name__ == "__main__":
    main()
