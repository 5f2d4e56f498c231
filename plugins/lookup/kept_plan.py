# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Lookup kept_plan: the deployed plan's text, on the controller: the
plan file's, or the record's in the run's store (docs/state.md).

Thin shell around module_utils/state/store.py (the file store reads with
plan_artifact.read_plan_file); see docs/plan.md.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: kept_plan
version_added: 0.1.0
author:
  - gpufleet.numa contributors (@gpufleet)
short_description: "Internal to the collection's playbooks; not a stable interface: read the deployed plan kept between runs"
description:
  - >-
    Internal to the record's tasks of C(playbooks/deploy_inference.yml), C(playbooks/decommission.yml) and
    C(playbooks/measure_bandwidth.yml); not a stable interface: its terms and result change with the playbooks that
    use it, without a deprecation.
  - Refuses a file that cannot be read.
  - Returns the text of the plan file (C(gpufleet_plan_file), docs/plan.md) on the controller,
    for P(gpufleet.numa.merge_plan#filter) and P(gpufleet.numa.load_plan#filter); or, given the run's store
    settings (P(gpufleet.numa.state_settings#filter)), the record's text in that store (the file, or the key
    C(<prefix>record) in etcd, docs/state.md).
  - Returns an empty string only when nothing exists at the path (C(lstat) says ENOENT), as before the first run;
    in etcd, when the record's key does not exist.
  - Fails naming the file and the reason for everything else that cannot be read - a dangling
    symbolic link, no permission, a directory, FIFO or device, an I/O error, an empty file,
    a file over 64 MiB, text that is not UTF-8. Unlike C(lookup('file', ..., errors='ignore')),
    a plan that exists but cannot be read never counts as no plan (which would drop every host
    a limited run does not reach from the plan and the gateway).
options:
  _terms:
    description:
      - The plan file's path, or the run's store settings (a mapping, what P(gpufleet.numa.state_settings#filter)
        made); one.
      - The etcd store refuses an empty record and one that is not UTF-8, naming the key and its endpoints.
    type: list
    elements: raw
    required: true
"""

EXAMPLES = r"""
- name: Load the deployed plan
  ansible.builtin.set_fact:
    plan: "{{ lookup('gpufleet.numa.kept_plan', plan_file) | gpufleet.numa.load_plan(plan_file) }}"

- name: Load the deployed plan from the run's store (the file, or etcd)
  ansible.builtin.set_fact:
    plan: "{{ lookup('gpufleet.numa.kept_plan', store) | gpufleet.numa.load_plan(store.location) }}"
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
from ansible_collections.gpufleet.numa.plugins.module_utils.state import store as state_store
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        term = plain(terms[0]) if len(terms) == 1 else None
        if not (isinstance(term, str) and term) and not isinstance(term, dict):
            raise AnsibleLookupError("gpufleet.numa.kept_plan: takes one path, the plan file's, or the run's store "
                                     "settings (got %d terms)" % len(terms))
        try:
            if isinstance(term, str):
                text = plan_artifact.read_plan_file(term)
            else:
                text = state_store.open_store(term).read_text()
        except ValueError as exc:
            raise AnsibleLookupError("gpufleet.numa.kept_plan: %s" % exc)
        return [text or ""]
