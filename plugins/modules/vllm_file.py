#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_file
short_description: "Internal to the deploy playbook; not a stable interface: write one directory, helper or file of role vllm, only when it differs"
version_added: "0.1.0"
description:
  - >-
    Internal to role C(gpufleet.numa.vllm), run by C(playbooks/deploy_inference.yml); not a stable interface: its
    options and results change with the playbooks and roles that use it, without a deprecation. The modules meant
    for users are M(gpufleet.numa.numa_facts), M(gpufleet.numa.numa_audit), M(gpufleet.numa.numa_preflight) and
    M(gpufleet.numa.numa_bandwidth).
  - Used by role C(gpufleet.numa.vllm) in one loop over the C(writes) of P(gpufleet.numa.vllm_units#filter)
    (directories, the helper programs, secrets.env, option files and units, in that order).
  - Runs on the controller (action plugin). For a file it renders the role's template with the task's variables,
    or reads the role's helper program, and compares its sha1, mode and owner with what C(ansible.builtin.find)
    saw on the host (carried in O(entry)). When they match the item is skipped and the host is not contacted;
    when they differ, M(ansible.builtin.template), M(ansible.builtin.copy) or M(ansible.builtin.file) writes it,
    with the entry's mode, owner, group and C(validate) command (units are checked with systemd-analyze verify
    through the role's checker before they replace the old ones).
  - The decision is C(write_needed) in C(plugins/module_utils/deploy/vllm/rollout.py).
author:
  - gpufleet.numa contributors (@gpufleet)
options:
  entry:
    description:
      - One element of the C(writes) of P(gpufleet.numa.vllm_units#filter) -
        C(kind) (V(directory), V(copy) or V(template)), C(path), C(as_planned), C(checksum), and
        C(src) (copy), C(template) (template), C(mode), C(owner), C(group), C(validate) where they apply.
    type: dict
    required: true
attributes:
  action:
    support: full
    description: Runs on the controller; the host only sees the module that writes.
  check_mode:
    support: full
    description: As the module that writes (template, copy, file) supports it.
  diff_mode:
    support: full
    description: As the module that writes supports it.
  platform:
    support: full
    platforms: posix
    description: Hosts the role vllm supports.
notes:
  - "Call it in a task with O(entry) as the loop variable C(__vllm_file): the role's templates read that variable."
"""

EXAMPLES = r"""
- name: Write the role's directories, helpers and files
  gpufleet.numa.vllm_file:
    entry: "{{ __vllm_file }}"
  loop: "{{ __vllm.writes }}"
  loop_control:
    loop_var: __vllm_file
    label: "{{ __vllm_file.label }}"
  no_log: "{{ __vllm_file.secret }}"
"""

RETURN = r"""
skipped:
  description: True when the host's copy already is as planned (nothing was sent to the host).
  returned: when nothing differs
  type: bool
  sample: true
changed:
  description: Whether the template, copy or file module changed the host.
  returned: always
  type: bool
"""
