# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.numa_preflight: the module on the target only
reads; the findings are worked out here (module_utils/preflight/findings.py).

- capture= (or, unset, the host's numa_capture): the capture is replayed
  here through the same readers the module runs; the target is never
  contacted. capture="" reads the live host even where numa_capture is set.
- What the module returns is the host's data: only readings, topology and
  capture are kept, each checked against its shape
  (plugin_utils/host_results.py).
- The topology the sub-NUMA check reads is the host's
  ansible_facts.numa_topology when it is known (what the plan was made
  from), else what the module or the replay gathered.
"""

from __future__ import annotations

import os

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import findings as preflight_findings
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import policy
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import probe
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.replay import replay
from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results
from ansible_collections.gpufleet.numa.plugins.plugin_utils import paths
from ansible_collections.gpufleet.numa.plugins.plugin_utils.module_failure import failure_reason

_FALSE = (None, False, "false", "no", "False", "0", 0)
MODULE_ARGS = ("units", "topology", "cgroup_slice", "nvml", "nvidia_smi", "timeout", "record")
UNIT_DEFAULTS = {"device": "nvidia", "gpus": [], "policy": "bind", "prefix": [], "properties": [], "user": "",
                 "group": ""}


def check_units(units):
    """The units argument with its defaults filled in; ValueError names units[i] and the field."""
    if units is None:
        return []
    if not isinstance(units, list):
        raise ValueError("units: must be a list of units (the gpufleet.numa.preflight_units filter's), got %s"
                         % show(units))
    out = []
    for i, unit in enumerate(units):
        if not isinstance(unit, dict):
            raise ValueError("units[%d]: must be a mapping, got %s" % (i, show(unit)))
        unit = dict(UNIT_DEFAULTS, **unit)
        for key in ("name", "mems", "cpus"):
            if not isinstance(unit.get(key), str) or not unit[key]:
                raise ValueError("units[%d].%s: is required, a string (got %s)" % (i, key, show(unit.get(key))))
        if unit["policy"] not in ("bind", "interleave") or unit["device"] not in ("nvidia", "amd", "cpu"):
            raise ValueError("units[%d]: policy must be bind or interleave and device nvidia, amd or cpu (got %s, %s)"
                             % (i, show(unit["policy"]), show(unit["device"])))
        for key in ("gpus", "prefix", "properties"):
            if not isinstance(unit[key], list):
                raise ValueError("units[%d].%s: must be a list (got %s)" % (i, key, show(unit[key])))
        try:
            probe.probe_command(unit)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError("units[%d]: %s" % (i, exc))
        out.append(unit)
    return out


def planned_args(args):
    """ARGS with planned (preflight_units' result, whole) made into units and numactl_installed_by_role."""
    if "planned" not in args:
        return args
    given = sorted(key for key in ("units", "numactl_installed_by_role") if key in args)
    if given:
        raise ValueError("planned: give the gpufleet.numa.preflight_units filter's result whole, or %s, not both"
                         % " and ".join(given))
    planned = args.pop("planned")
    if not isinstance(planned, dict) or set(planned) != {"units", "numactl_installed_by_role"}:
        raise ValueError("planned: must be what the gpufleet.numa.preflight_units filter returns "
                         "({units, numactl_installed_by_role}), got %s" % show(planned))
    return dict(args, **planned)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(MODULE_ARGS + ("capture", "numactl_installed_by_role", "planned"))

    def _resolve_capture(self, capture):
        """Absolute path of the file on the controller, or None."""
        return paths.controller_file(self._find_needle, capture)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        result["changed"] = False
        args = dict(self._task.args)
        try:
            args = planned_args(args)
            units = check_units(args.get("units"))
        except ValueError as exc:
            return dict(result, failed=True, msg=to_text(exc))
        known = (task_vars.get("ansible_facts") or {}).get("numa_topology")
        known = known if isinstance(known, dict) else None
        cgroup_slice = args.get("cgroup_slice") or "system.slice"
        capture = args.get("capture")
        if capture is None and task_vars.get("numa_capture"):
            capture = self._templar.template(task_vars["numa_capture"])
        context = {"captured": bool(capture), "cgroup_slice": cgroup_slice,
                   "numactl_installed_by_role": args.get("numactl_installed_by_role") not in _FALSE}
        if capture:
            if not isinstance(capture, str):
                return dict(result, failed=True, msg="capture must be a path to a capture file, got %s" % show(capture))
            if args.get("record") not in _FALSE:
                return dict(result, failed=True, msg="capture and record cannot be used together: a replay records "
                            "nothing")
            path = self._resolve_capture(capture)
            if path is None:
                return dict(result, failed=True, msg="capture file %s not found (looked in the files/ directories, "
                            "the playbook directory and %s)" % (capture, os.getcwd()))
            try:
                readings, topology = replay(path, units, hostname=task_vars.get("inventory_hostname"),
                                            cgroup_slice=cgroup_slice)
            except ValueError as exc:
                return dict(result, failed=True, msg="capture %s: %s" % (capture, to_text(exc)))
            result["capture_file"] = path
        else:
            module_args = dict((key, args[key]) for key in MODULE_ARGS if key in args)
            module_args["units"] = units
            module_args["topology"] = known is None
            module = self._execute_module(module_name="gpufleet.numa.numa_preflight", module_args=module_args,
                                          task_vars=task_vars)
            kept, warnings = host_results.keep_defined(module, "numa_preflight")
            if warnings:
                result["warnings"] = list(result.get("warnings") or []) + warnings
            if kept.get("failed") or "readings" not in kept:
                return dict(result, failed=True, msg=failure_reason(kept)
                            or "numa_preflight: the module returned no readings")
            readings, topology = kept["readings"], kept.get("topology")
            if "capture" in kept:
                result["capture"] = kept["capture"]
        found = preflight_findings.host_findings(readings, units, known or topology, context)
        result.update(findings=found, worst=preflight_findings.worst(found), summary=policy.summary_lines(found),
                      readings=readings)
        if readings.get("warnings"):
            result["warnings"] = list(result.get("warnings") or []) + list(readings["warnings"])
        return result
