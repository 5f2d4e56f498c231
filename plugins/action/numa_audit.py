# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.numa_audit: the module on the target only
reads; everything else happens here, once.

- capture=: the capture is replayed here by the same module_utils code the
  module runs; the target is never contacted.
- The findings, the drift from plan= and the summary are computed here
  (module_utils/audit/result.py) from the module's topology and processes
  (or the replay); the plan never travels to the target, and neither does
  the code that judges it.
- fail_on_severity, memory_threshold and unit_prefix are applied here;
  the module is given only the planned units' names (checked), to read
  their systemd state.
- What the module returns is the host's data: its shape is checked here
  (plugin_utils/host_results.py) and only the fields the module defines
  are kept; a crafted result fails this host alone, naming the field.
"""

from __future__ import annotations

import copy
import os
import re

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import drift
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import instance_state
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import locality
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth.checks import check_bandwidth
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results
from ansible_collections.gpufleet.numa.plugins.plugin_utils import json_text
from ansible_collections.gpufleet.numa.plugins.plugin_utils import paths
from ansible_collections.gpufleet.numa.plugins.plugin_utils.module_failure import failure_reason

_FALSE = (None, False, "false", "no", "False", "0", 0)
# What the module on the target is given: how to read, nothing to judge with.
READER_ARGS = ("root", "record", "nvml", "nvidia_smi")
# The vllm role's vllm_unit_prefix rule (deploy/vllm/variables.py).
UNIT_PREFIX = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # fullmatch
REPLAY_UNIT_STATES = {"source": None, "units": {}, "missing": "a replayed capture holds no unit state"}


def load_plan(path):
    """A deployed plan file (JSON or YAML) as a dict; ValueError names the file.

    Text that starts with '{' is JSON, as the kept plan is written
    (plan/artifact.py), and is read as JSON: YAML 1.1 reads 1e-05 as a
    string, and the bandwidth figures would fail their check."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except (OSError, IOError) as exc:
        raise ValueError("plan %s cannot be read: %s" % (path, exc.strerror or exc))
    except UnicodeDecodeError:
        raise ValueError("plan %s is not UTF-8 text" % path)
    if text.lstrip().startswith("{"):
        data = json_text.loads(text, "plan %s" % path)
    else:
        try:
            import yaml
            data = yaml.safe_load(text)
        except Exception as exc:  # yaml.YAMLError, RecursionError
            raise ValueError("plan %s is not valid YAML or JSON: %s" % (path, str(exc).splitlines()[0]))
    if not isinstance(data, dict):
        raise ValueError("plan %s must hold a mapping (the fleet_plan output), got %s" % (path, type(data).__name__))
    return data


def module_failure(module, host):
    """The message of a failed module run, as text: nothing else of the
    host's answer (facts, unknown keys) travels on, and a module that
    crashed says its exception (plugin_utils/module_failure.py) and shows the
    end of its standard error."""
    msg = failure_reason(module)
    if msg is None or len(msg) > 4096:
        given = module.get("msg") if isinstance(module, dict) else module
        return "numa_audit %s: the module failed without a message (got %s)" % (host, show(msg or given))
    stderr = module.get("module_stderr")
    if isinstance(stderr, str) and stderr.strip():
        msg += " (module stderr: %s)" % show(stderr.strip()[-1000:], limit=1100)
    return msg


def kept_bandwidth(result, deployed, host):
    """The host's measured bandwidth from the kept plan (hosts.HOST.bandwidth,
    docs/bandwidth.md), checked whole, for the report; a bad one is not shown
    and a warning says why."""
    hosts = deployed.get("hosts") if isinstance(deployed, dict) else None
    entry = hosts.get(host) if isinstance(hosts, dict) else None
    if not isinstance(entry, dict) or "bandwidth" not in entry:
        return
    try:
        result["bandwidth"] = check_bandwidth("hosts.%s.bandwidth" % show(host), entry["bandwidth"])
    except ValueError as exc:
        result["warnings"] = list(result.get("warnings") or []) + ["kept plan: not shown: %s" % exc]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("root", "record", "capture", "plan", "nvml", "nvidia_smi", "memory_threshold",
                             "fail_on_severity", "unit_prefix"))

    def _resolve(self, path):
        """Absolute path of the file on the controller, or None."""
        return paths.controller_file(self._find_needle, path)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        host = task_vars.get("inventory_hostname")
        severity = args.pop("fail_on_severity", None) or "none"
        if severity != "none" and severity not in locality.SEVERITIES:
            return dict(result, failed=True, msg="fail_on_severity: must be one of none, %s (got %s)"
                        % (", ".join(locality.SEVERITIES), show(severity)))
        threshold = args.get("memory_threshold", locality.DEFAULT_MEMORY_THRESHOLD)
        try:
            threshold = int(threshold)
        except (TypeError, ValueError):
            return dict(result, failed=True, msg="memory_threshold: must be an integer percentage (got %s)" % show(threshold))
        unit_prefix = args.pop("unit_prefix", None)
        unit_prefix = instance_state.DEFAULT_UNIT_PREFIX if unit_prefix is None else unit_prefix
        if not isinstance(unit_prefix, str) or not UNIT_PREFIX.fullmatch(unit_prefix):
            return dict(result, failed=True, msg="unit_prefix: must be 1-64 characters of [A-Za-z0-9_.-], not starting "
                        "with - or . (got %s)" % show(unit_prefix))
        deployed = None
        units = []
        plan = args.pop("plan", None)
        if plan:
            path = self._resolve(str(plan))
            if path is None:
                return dict(result, failed=True, msg="plan file %s not found (looked in the files/ directories, the "
                            "playbook directory and %s)" % (plan, os.getcwd()))
            try:
                deployed = load_plan(path)
                units = instance_state.planned_units(drift.deployed_for_host(deployed, host)[0], unit_prefix)
            except ValueError as exc:
                return dict(result, failed=True, msg="plan %s: %s" % (plan, to_text(exc)))
            result["plan_file"] = path
        capture = args.pop("capture", None)
        if capture:
            if args.get("record") not in _FALSE:
                return dict(result, failed=True, msg="capture and record cannot be used together: a replay records nothing")
            path = self._resolve(str(capture))
            if path is None:
                return dict(result, failed=True, msg="capture file %s not found (looked in the files/ directories, the "
                            "playbook directory and %s)" % (capture, os.getcwd()))
            try:
                facts, processes = audit_replay.gather_capture(path)
            except ValueError as exc:
                return dict(result, failed=True, msg="capture %s: %s" % (capture, to_text(exc)))
            result["capture_file"] = path
            processes["unit_states"] = copy.deepcopy(REPLAY_UNIT_STATES)
            extra = {}
        else:
            module_args = dict((key, value) for key, value in args.items() if key in READER_ARGS)
            if units:
                module_args["units"] = units  # names only: the plan itself never travels
            module = self._execute_module(module_args=module_args, task_vars=task_vars)
            if not isinstance(module, dict) or module.get("failed"):
                return dict(result, failed=True, msg=module_failure(module, host))
            try:
                facts, processes, capture = host_results.audit_module_result(module, host)
            except ValueError as exc:
                return dict(result, failed=True, msg=to_text(exc))
            extra = {} if capture is None else {"capture": capture}
        try:
            result.update(audit_result.audit_result(facts, processes, host or facts.get("hostname"), deployed, threshold,
                                                    unit_prefix))
        except ValueError as exc:
            return dict(result, failed=True, msg="numa_audit %s: %s" % (host, to_text(exc)))
        result.update(extra)
        kept_bandwidth(result, deployed, host)
        result["changed"] = False
        failed, msg = audit_result.gate(result, severity)
        if failed:
            result.update(failed=True, msg=msg)
        return result
