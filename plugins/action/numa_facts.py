# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.numa_facts: replay capture= on the controller.

A host with the numa_capture variable and no capture= argument is replayed
from it (as the playbooks do). Without either, the module runs on the target, and of its result only the
fields the module defines are kept (plugin_utils/host_results.py). With it, the
capture file is read here and turned into facts by the same module_utils
code the module uses; the target is never contacted.
"""

from __future__ import annotations

import os

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture, load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.summary import summary
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CAPTURE_MAX_BYTES
from ansible_collections.gpufleet.numa.plugins.plugin_utils import paths


def _max_bytes(value):
    """capture_max_bytes as an int (task arguments may arrive as text)."""
    if value is None:
        return CAPTURE_MAX_BYTES
    if isinstance(value, bool):
        raise ValueError("capture_max_bytes must be a positive integer, got %r" % (value,))
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError("capture_max_bytes must be a positive integer, got %r" % (str(value)[:40],))
    if number < 1:
        raise ValueError("capture_max_bytes must be a positive integer, got %d" % number)
    return number


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("root", "record", "capture", "capture_max_bytes", "nvml", "nvidia_smi",
                             "nvidia_smi_timeout", "cgroup_slice"))

    def _resolve_capture(self, capture):
        """Absolute path of the file on the controller, or None."""
        return paths.controller_file(self._find_needle, capture)

    def _keep_defined(self, result, module):
        """The fields of the module's result the collection defines: what a
        host returns is data, and any other key could become a variable."""
        key = getattr(self, "_discovered_interpreter_key", None)
        controller_facts = {key: self._discovered_interpreter} if key else {}
        kept, warnings = host_results.keep_defined(module, "numa_facts", host_results.NUMA_FACTS_FIELDS,
                                                   host_results.NUMA_FACTS_FACTS, controller_facts)
        result.update(kept)
        if warnings:
            result["warnings"] = list(result.get("warnings") or []) + warnings
        return result

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        capture = self._task.args.get("capture")
        if capture is None and task_vars.get("numa_capture"):
            # A recorded host (numa_capture, like the playbooks replay it),
            # in ad-hoc runs too: its own capture, not the controller's.
            capture = self._templar.template(task_vars["numa_capture"])
        if not capture:
            result = super(ActionModule, self).run(tmp, task_vars)
            return self._keep_defined(result, self._execute_module(task_vars=task_vars))

        result = super(ActionModule, self).run(tmp, task_vars)
        result["changed"] = False
        if not isinstance(capture, str):
            return dict(result, failed=True, msg="capture must be a path to a capture file, got %r" % (capture,))
        if self._task.args.get("record") not in (None, False, "false", "no", "False"):
            return dict(result, failed=True, msg="capture and record cannot be used together: a replay records nothing")
        path = self._resolve_capture(capture)
        if path is None:
            return dict(
                result,
                failed=True,
                msg="capture file %s not found (looked in the files/ directories, the playbook directory and %s)"
                % (capture, os.getcwd()),
            )
        try:
            max_bytes = _max_bytes(self._task.args.get("capture_max_bytes"))
        except ValueError as exc:
            return dict(result, failed=True, msg=to_text(exc))
        try:
            data = load_capture(path, max_bytes=max_bytes)
            hostname = data.get("hostname") or task_vars.get("inventory_hostname")
            facts = facts_from_capture(data, hostname=hostname,
                                       cgroup_slice=self._task.args.get("cgroup_slice", "system.slice"))
        except ValueError as exc:
            # load_capture names the file it read; say which one the task asked for too.
            return dict(result, failed=True, msg="capture %s: %s" % (capture, to_text(exc)))
        # numa_summary sorts before numa_topology: what an ad-hoc run shows first.
        lines = summary(facts)
        result.update(summary=lines, ansible_facts=dict(numa_summary=lines, numa_topology=facts), capture_file=path)
        if facts["warnings"]:
            # Shown as [WARNING] lines, like the module's own on a live host.
            result["warnings"] = list(result.get("warnings") or []) + list(facts["warnings"])
        return result
