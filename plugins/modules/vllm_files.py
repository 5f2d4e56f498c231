#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_files
short_description: "Internal to the deploy playbook; not a stable interface: write role vllm's directories, helpers and files in one call"
version_added: "0.1.0"
description:
  - >-
    Internal to role C(gpufleet.numa.vllm), run by C(playbooks/deploy_inference.yml); not a stable interface: its
    options and results change with the playbooks and roles that use it, without a deprecation. The modules meant
    for users are M(gpufleet.numa.numa_facts), M(gpufleet.numa.numa_audit), M(gpufleet.numa.numa_preflight) and
    M(gpufleet.numa.numa_bandwidth).
  - The role calls it once per host with the C(writes) of P(gpufleet.numa.vllm_units#filter) (directories, the
    helper programs, secrets.env, option files and units, in that order).
  - On the controller (action plugin) it renders each file from the role's template with the task's variables,
    or reads the role's helper program, and compares its sha1, mode and owner with what
    M(gpufleet.numa.stat_paths) saw on the host (carried in each entry); the decision is C(write_needed) in
    C(plugins/module_utils/deploy/vllm/rollout.py). Only what differs is sent to the host, all of it in one
    module call.
  - On the host, in order, it creates each directory (and missing parents, with the same mode and owner) and
    writes each file through a temporary file in the file's directory, checked by the entry's C(validate)
    command (units are checked with systemd-analyze verify through the role's checker) before it is moved
    into place, then sets its mode, owner and group. The first failure stops it; what was written before
    stays written.
author:
  - gpufleet.numa contributors (@gpufleet)
options:
  entries:
    description:
      - The C(writes) of P(gpufleet.numa.vllm_units#filter) - each with C(kind) (V(directory), V(copy) or
        V(template)), C(path), C(label), C(secret), C(as_planned), C(checksum), and C(src) (copy),
        C(template) (template), C(mode), C(owner), C(group), C(validate) where they apply.
      - The action turns them into O(writes) and O(secret_contents) for the host.
    type: list
    elements: dict
  secrets:
    description:
      - The secrets the role's C(secrets.env) template reads, C(vllm_api_key) and C(vllm_hf_token), as the
        task's variables give them (a vault, a lookup or another variable, which Ansible evaluates). Never
        logged.
      - Only the action reads it.
    type: dict
    default: {}
  writes:
    description:
      - Set by the action, not by a task - what the host writes, in order; each with C(path), C(kind)
        (V(directory) or V(file)), C(mode), C(owner), C(group), C(validate) (a command with C(%s) for the
        temporary file) and C(content) (a file that is not secret).
    type: list
    elements: dict
    default: []
  secret_contents:
    description:
      - Set by the action, not by a task - path -> content of the secret files (never logged, never diffed).
    type: dict
    default: {}
attributes:
  action:
    support: full
    description: Renders and compares on the controller; the host only sees what differs.
  check_mode:
    support: full
    description: Says what would change and writes nothing.
  diff_mode:
    support: full
    description: A diff per file that is not secret, headed with its path; a directory's state.
  platform:
    support: full
    platforms: posix
    description: Hosts the role vllm supports.
"""

EXAMPLES = r"""
- name: Write the role's directories, helpers and files
  gpufleet.numa.vllm_files:
    entries: "{{ __vllm.writes }}"
    secrets:
      vllm_api_key: "{{ vllm_api_key }}"
      vllm_hf_token: "{{ vllm_hf_token }}"
  register: __vllm_written
"""

RETURN = r"""
results:
  description:
    - One per entry, in order, as a loop over the entries would register them - C(__vllm_file) (the entry),
      C(changed), C(skipped) (the host's copy already was as planned), C(content_sha1) (a file that is not
      secret - the sha1 of its content as written or found), C(diff) where diff mode shows one.
  returned: always
  type: list
  elements: dict
"""

import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native


def _file_args(write, path):
    return {"path": path, "secontext": None, "owner": write.get("owner"), "group": write.get("group"),
            "mode": write.get("mode"), "attributes": None}


def ensure_directory(module, write):
    """Create the directory and its missing parents (each with the entry's
    mode and owner, as the file module does); whether anything changed."""
    path = write["path"]
    missing = []
    head = path
    while head and head != "/" and not os.path.lexists(head):
        missing.insert(0, head)
        head = os.path.dirname(head)
    if missing and module.check_mode:
        return True
    for created in missing:
        try:
            os.mkdir(created)
        except FileExistsError:
            # Made meanwhile by another writer (hosts that share a parent,
            # as the demo's staging tree): a directory is what is wanted.
            pass
        module.set_fs_attributes_if_different(_file_args(write, created), True)
    if not os.path.isdir(path):
        module.fail_json(msg="%s exists and is not a directory" % path)
    return module.set_fs_attributes_if_different(_file_args(write, path), bool(missing))


def write_file(module, write, content):
    """Write the file when its content differs (checked by validate first),
    then its mode and owner; (changed, content before or None)."""
    path = write["path"]
    if os.path.isdir(path):
        module.fail_json(msg="%s is a directory, the role writes a file there" % path)
    new = to_bytes(content, errors="surrogate_or_strict")
    before = None
    if os.path.lexists(path):
        with open(path, "rb") as current:
            before = current.read()
    if before == new:
        return module.set_fs_attributes_if_different(_file_args(write, path), False), before
    if module.check_mode:
        return True, before
    fd, staged = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(new)
        if write.get("mode"):
            module.set_mode_if_different(staged, write["mode"], False)
        if write.get("validate"):
            rc, out, err = module.run_command(write["validate"] % staged)
            if rc != 0:
                module.fail_json(msg="%s failed its check (%s): %s" % (path, write["validate"], (err or out).strip()),
                                 rc=rc, stdout=out, stderr=err)
        module.atomic_move(staged, path)
    finally:
        if os.path.lexists(staged):
            os.unlink(staged)
    module.set_fs_attributes_if_different(_file_args(write, path), True)
    return True, before


def write_one(module, write):
    """Write one directory or file; its result (path, changed, diff where diff mode shows one)."""
    if write["kind"] == "directory":
        changed = ensure_directory(module, write)
        diff = {"before": {"path": write["path"], "state": "absent"},
                "after": {"path": write["path"], "state": "directory"}} if changed else None
    else:
        secret = write["path"] in module.params["secret_contents"]
        content = module.params["secret_contents"][write["path"]] if secret else write.get("content", "")
        changed, before = write_file(module, write, content)
        diff = None
        if changed and not secret:
            diff = {"before_header": write["path"], "after_header": write["path"],
                    "before": to_native(before or b"", errors="surrogate_or_strict"), "after": content}
    return dict({"path": write["path"], "changed": changed}, **({"diff": diff} if diff and module._diff else {}))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            entries=dict(type="list", elements="dict"),
            secrets=dict(type="dict", default={}, no_log=True),
            writes=dict(type="list", elements="dict", default=[]),
            secret_contents=dict(type="dict", default={}, no_log=True),
        ),
        supports_check_mode=True,
    )
    results = []
    for write in module.params["writes"]:
        if write.get("validate") and "%s" not in write["validate"]:
            module.fail_json(msg="%s: validate must contain %%s" % write["path"])
        try:
            results.append(write_one(module, write))
        except Exception as exc:  # pylint: disable=broad-exception-caught
            # The host refused (a file where a directory belongs, no room,
            # no permission; ansible-core's atomic_move raises): said with
            # the path, the traceback apart for -vvv.
            module.fail_json(msg="writing %s failed: %s" % (write["path"], to_native(exc)),
                             exception=traceback.format_exc(), results=results)
    module.exit_json(changed=any(result["changed"] for result in results), results=results)


if __name__ == "__main__":
    main()
