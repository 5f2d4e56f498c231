# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Lookup kept_plan: the deployed plan file's text, on the controller.

Thin shell around plan_artifact.read_plan_file; see docs/plan.md.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: kept_plan
version_added: 0.1.0
author:
  - gpufleet.numa contributors (@gpufleet)
short_description: Read the deployed plan kept between runs, refusing a file that cannot be read
description:
  - Returns the text of the plan file (C(gpufleet_plan_file), docs/plan.md) on the controller,
    for P(gpufleet.numa.merge_plan#filter) and P(gpufleet.numa.load_plan#filter).
  - Returns an empty string only when nothing exists at the path (C(lstat) says ENOENT), as before the first run.
  - Fails naming the file and the reason for everything else that cannot be read - a dangling
    symbolic link, no permission, a directory, FIFO or device, an I/O error, an empty file,
    a file over 64 MiB, text that is not UTF-8. Unlike C(lookup('file', ..., errors='ignore')),
    a plan that exists but cannot be read never counts as no plan (which would drop every host
    a limited run does not reach from the plan and the gateway).
options:
  _terms:
    description: The plan file's path (one).
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: Load the deployed plan
  ansible.builtin.set_fact:
    plan: "{{ lookup('gpufleet.numa.kept_plan', plan_file) | gpufleet.numa.load_plan(plan_file) }}"
"""

RETURN = r"""
_raw:
  description: One string, the file's text; empty when no file exists at the path.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if len(terms) != 1 or not isinstance(terms[0], str) or not terms[0]:
            raise AnsibleLookupError("gpufleet.numa.kept_plan: takes one path, the plan file's (got %d terms)"
                                     % len(terms))
        try:
            text = plan_artifact.read_plan_file(terms[0])
        except ValueError as exc:
            raise AnsibleLookupError("gpufleet.numa.kept_plan: %s" % exc)
        return [text or ""]
