# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.vllm_host_state: role vllm's look at the host and
its check of the role variables, in one task.

On the controller: the paths the role looks at (module_utils/deploy/vllm/
layout.py look_paths), then one call of the stat_paths module on the host
(which also gathers the service manager where vllm_manage_service auto
decides by it and it is not known yet), then every unit worked out from
the variables and what the host has (host_state.host_units, as the
gpufleet.numa.vllm_units filter does). Its result, registered, is what the
rest of the role reads (__vllm). Before this, the look and the check were
two tasks, and each templated the role's 60 variables again.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state, layout, rollout
from ansible_collections.gpufleet.numa.plugins.plugin_utils.module_failure import failed_task
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain

NAME = "gpufleet.numa.vllm_host_state"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("instances", "variables"))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        instances, variables = plain(self._task.args.get("instances")), plain(self._task.args.get("variables"))
        if not isinstance(variables, dict):
            return dict(result, failed=True, msg="%s: variables must be a mapping of role variable -> value" % NAME)
        try:
            paths = layout.look_paths(variables)
        except ValueError as exc:
            return dict(result, failed=True, msg="%s: %s" % (NAME, exc))
        gather = rollout.wants_service_manager(variables.get("vllm_manage_service"), variables.get("service_mgr") or "")
        looked = self._execute_module(module_name="gpufleet.numa.stat_paths",
                                      module_args={"paths": paths, "service_mgr": gather}, task_vars=task_vars)
        if looked.get("failed") or looked.get("unreachable"):
            return dict(result, **failed_task(looked, "%s: looking at the host failed" % NAME))
        facts = looked.get("ansible_facts") or {}
        if "service_mgr" in facts:
            variables["service_mgr"] = facts["service_mgr"] or ""
        try:
            units = host_state.host_units(instances, dict(variables, existing=looked.get("files") or []))
        except ValueError as exc:
            return dict(result, failed=True, msg="%s: %s" % (NAME, exc))
        result.update(units, changed=False)
        if facts:
            result["ansible_facts"] = facts
        return result
