#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_host_state
short_description: "Internal to the deploy playbook; not a stable interface: look at a host and work out role vllm's units, in one task"
version_added: "0.1.0"
description:
  - >-
    Internal to role C(gpufleet.numa.vllm), run by C(playbooks/deploy_inference.yml); not a stable interface: its
    options and results change with the playbooks and roles that use it, without a deprecation. The modules meant
    for users are M(gpufleet.numa.numa_facts), M(gpufleet.numa.numa_audit), M(gpufleet.numa.numa_preflight) and
    M(gpufleet.numa.numa_bandwidth).
  - An action that runs on the controller. It works out the paths the role looks at (the directories it
    creates and their parents, the programs C(ExecStart) runs, the files it writes, the downloader and the
    model's snapshots), looks at all of them on the host in one M(gpufleet.numa.stat_paths) call (which also
    gathers the service manager where O(variables) C(vllm_manage_service=auto) decides by it and it is not
    known yet), then checks the role variables and works out every unit with what the host has, as
    P(gpufleet.numa.vllm_units#filter) does (a unit whose programs are missing is refused; what already
    matches is marked).
  - A bad variable fails the task naming it and the rule; nothing on the host has changed.
author:
  - gpufleet.numa contributors (@gpufleet)
options:
  instances:
    description: This host's plan instances (the role's C(vllm_instances)).
    type: list
    elements: dict
    required: true
  variables:
    description:
      - Every role variable that reaches a unit, an option file or a command line, by name (but
        C(vllm_instances), which is O(instances)), with C(service_mgr)
        (the host's service manager, V('') when not gathered) and C(host) (the inventory name); the role passes
        its C(__vllm_variables).
    type: dict
    required: true
extends_documentation_fragment:
  - gpufleet.numa.read_only
attributes:
  action:
    support: full
    description: Works out the paths and the units on the controller; the host runs only M(gpufleet.numa.stat_paths).
  platform:
    support: full
    platforms: posix
    description: Hosts the role vllm supports.
"""

EXAMPLES = r"""
- name: Look at the host, check the role variables and work out every unit
  gpufleet.numa.vllm_host_state:
    instances: "{{ vllm_instances }}"
    variables: "{{ __vllm_variables }}"
  register: __vllm
"""

RETURN = r"""
units:
  description:
    - Per instance, what its unit runs (argv, environment, files, health URL, ...). The result holds every key of
      P(gpufleet.numa.vllm_units#filter)'s result at its top level (C(units), C(files), C(writes), C(install),
      C(after_write), C(manage_service), C(variables), ...), worked out with what the host has.
  returned: success
  type: list
  elements: dict
writes:
  description: The directories, helpers and files the role writes, in order, each marked where the host's copy already matches.
  returned: success
  type: list
  elements: dict
ansible_facts:
  description: The host's service manager, where it was gathered.
  returned: when gathered
  type: dict
  contains:
    service_mgr:
      description: The service manager (V(systemd), V(sysvinit), ..., V(service) when none is recognised).
      type: str
      sample: systemd
"""
