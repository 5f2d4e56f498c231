# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.numa_bandwidth.

- A host with numa_capture is a recorded host: nothing can be measured
  there, and the target is never contacted; the result says so (no
  failure).
- Otherwise the module measures on the target, and of its result only the
  fields the module defines are kept, `bandwidth` checked whole
  (plugin_utils/host_results.py, module_utils/bandwidth/checks.py): a
  crafted result fails this host alone, naming the field.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results

VALID_ARGS = ("python", "kernel", "size_mib", "seconds", "timeout", "gpus", "numactl")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(VALID_ARGS)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        if task_vars.get("numa_capture"):
            return dict(result, changed=False, skipped=True,
                        msg="not measured: a recorded host (numa_capture) is never contacted, and a capture "
                            "holds no bandwidth")
        module = self._execute_module(module_args=dict(self._task.args), task_vars=task_vars)
        kept, warnings = host_results.keep_defined(module, "numa_bandwidth")
        result.update(kept)
        if warnings:
            result["warnings"] = list(result.get("warnings") or []) + warnings
        if not result.get("failed") and "bandwidth" not in result:
            result.update(failed=True, msg="numa_bandwidth: the host's result holds no bandwidth")
        result["changed"] = False
        return result
