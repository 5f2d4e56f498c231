#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: plan_record
short_description: >-
  Internal to the collection's playbooks; not a stable interface: lock the kept plan for a run, write it only
  over the revision the run started from
version_added: "0.1.0"
description:
  - >-
    Internal to the record's tasks of C(playbooks/deploy_inference.yml), C(playbooks/decommission.yml) and
    C(playbooks/measure_bandwidth.yml); not a stable interface: its options and results change with the playbooks
    and roles that use it, without a deprecation. The modules meant for users are M(gpufleet.numa.numa_facts),
    M(gpufleet.numa.numa_audit), M(gpufleet.numa.numa_preflight) and M(gpufleet.numa.numa_bandwidth).
  - Used by C(playbooks/deploy_inference.yml), C(playbooks/decommission.yml) and C(playbooks/measure_bandwidth.yml) on
    the kept plan (the state of record). Runs on the controller (action plugin).
  - The record is kept in a store (O(store), docs/state.md) - the C(file) C(gpufleet_plan_file) on the controller (the
    default, what O(path) names), or C(etcd) - and each state does the same in either. What follows says it for the
    file; in etcd the lock is the key C(<prefix>lock) on a lease that a keeper process renews while the run's
    C(ansible-playbook) process lives, and every write is one txn compared on the record's and the lock's revisions.
  - O(state=locked) takes the run's lock, C(<plan file>.lock) beside the record, before the record is read.
    The lock names its holder (the C(ansible-playbook) process, its host, user, command line and start).
    A live holder is waited for up to O(timeout) seconds, then the task fails naming it, before anything
    changes. Before the first record exists (no directory yet) nothing is locked, so that a run that fails early
    leaves nothing behind; its first write then takes the lock and replaces only "no record". A holder on this
    controller that is gone (killed, crashed, rebooted) is recognised, and its lock is taken over with a warning.
    The lock keeps the record's revision (sha256 of the file) as the run read it.
  - O(state=written) replaces the record with O(record), written as stable JSON, only while this run holds
    the lock and the file is still at the revision the run read or last wrote (compare-and-swap); otherwise
    it fails and writes nothing. The file is written whole to a temporary file, synced and renamed; an
    unchanged record is not written.
  - O(state=unlocked) frees the lock when this run holds it.
  - The logic is in C(plugins/module_utils/state/store.py), around C(state/lock.py) and C(state/record.py) (file) and
    C(state/etcd_lock.py), C(state/etcd_record.py) and C(state/keepalive.py) (etcd).
author:
  - gpufleet.numa contributors (@gpufleet)
options:
  path:
    description:
      - The kept plan's absolute path on the controller (the C(file) store). One of O(path) and O(store).
    type: path
  store:
    description:
      - The run's store settings, as P(gpufleet.numa.state_settings#filter) makes them (the playbooks keep them in the
        fact C(__gpufleet_state)). One of O(path) and O(store).
      - With C(etcd) they hold the etcd password; the module never returns or prints them.
    type: dict
  state:
    description: Take the lock, write the record, or free the lock.
    type: str
    choices: [locked, written, unlocked]
    required: true
  timeout:
    description:
      - With O(state=locked), how many seconds to wait for another run's lock (0 to 86400).
      - The playbooks pass C(gpufleet_lock_timeout), 0 by default (refuse at once, naming the holder).
    type: int
    default: 0
  record:
    description:
      - With O(state=written), the record (the kept plan, a mapping). It is written as
        P(gpufleet.numa.plan_artifact_json#filter) writes it, by the action itself (ansible-core before 2.19
        would turn a templated JSON text back into data).
    type: dict
attributes:
  action:
    support: full
    description: Runs on the controller; no host is contacted.
  check_mode:
    support: full
    description:
      - The lock is taken in check mode too (a preview must not read a record that a running deploy is
        rewriting). The write is shown, not made; the lock and the revision are still checked.
  diff_mode:
    support: none
    description: The playbooks show how the record changes per instance (P(gpufleet.numa.record_diff_table#filter)).
  platform:
    support: full
    platforms: posix
    description: The controller.
notes:
  - The lock file stays beside the record; empty, it is free. Only a holder on another controller cannot be
    judged dead from here; the error message then says how to free the lock by hand.
  - In etcd a holder anywhere that died frees the lock by itself, when its lease ends (docs/state.md).
  - Every O(state=written) renews an etcd lock first; a run that lost its lock (its lease ended) is told so, and
    nothing is written.
"""

EXAMPLES = r"""
- name: Take the run's lock on the kept plan
  gpufleet.numa.plan_record:
    path: /srv/ansible/inventories/prod.gpufleet/gpufleet-plan.json
    state: locked
    timeout: 300
  run_once: true

- name: Write the record
  gpufleet.numa.plan_record:
    path: /srv/ansible/inventories/prod.gpufleet/gpufleet-plan.json
    state: written
    record: "{{ record }}"
  run_once: true

- name: Take the run's lock on the record in the run's store (file or etcd)
  gpufleet.numa.plan_record:
    store: "{{ hostvars['localhost'].__gpufleet_state }}"
    state: locked
  run_once: true
"""

RETURN = r"""
locked:
  description: With O(state=locked), whether a lock was taken (false before any record directory exists).
  returned: with state=locked
  type: bool
revision:
  description:
    - The record's revision as the lock now keeps it - C(sha256:...) of the file's bytes, C(etcd:<mod_revision>)
      of the etcd key, or C(absent).
  returned: with state=locked or state=written, when not in check mode
  type: str
took_over:
  description: The entry of a dead holder whose lock was taken over.
  returned: when a dead holder's lock was taken
  type: dict
released:
  description: With O(state=unlocked), whether this run held the lock and freed it.
  returned: with state=unlocked
  type: bool
"""
