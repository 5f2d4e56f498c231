# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the bandwidth measurement (docs/bandwidth.md): the settings
from a host's variables, the verdict of one host's figures, the console's lines, and the kept plan with the
figures of the hosts it records. Thin shells around
module_utils/bandwidth/ and plan/record.py; every record is checked first
(bandwidth/checks.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import settings as bandwidth_settings_of
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import verdict as bandwidth_verdict_of
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain


def bandwidth_settings(hostvars, host):
    """numa_bandwidth's arguments for HOST from its variables, over the role
    vllm's defaults (vllm_venv, vllm_executable)."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.bandwidth_settings expects hostvars")
    errors = []
    try:
        merged = role_files.host_role_variables(hostvars, str(host), "vllm", errors)
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.bandwidth_settings: %s: %s" % (host, exc))
    if errors:
        raise AnsibleFilterError("gpufleet.numa.bandwidth_settings: %s" % "; ".join(errors))
    try:
        return bandwidth_settings_of.from_variables(merged)
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.bandwidth_settings: %s: %s" % (host, exc))


def bandwidth_verdict(bandwidth):
    try:
        return bandwidth_verdict_of.verdict(checks.check_bandwidth("bandwidth", plain(bandwidth)))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.bandwidth_verdict: %s" % exc)


def bandwidth_lines(bandwidth, host):
    try:
        return bandwidth_verdict_of.lines(checks.check_bandwidth("bandwidth", plain(bandwidth)), str(host))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.bandwidth_lines: %s" % exc)


def record_bandwidth(record, measured):
    try:
        record, measured = plain(record), plain(measured)
        if not isinstance(measured, dict):
            raise ValueError("measured must map host -> the numa_bandwidth result's bandwidth")
        if record is None or record == "":
            record = plan_record.empty_record()
        elif not isinstance(record, dict):
            raise ValueError("the record must be the kept plan (gpufleet.numa.kept_record)")
        else:
            record = plan_artifact.load_artifact(record, "the record") or plan_record.empty_record()
        return plan_record.record_bandwidth(record, dict((str(h), v) for h, v in measured.items()))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.record_bandwidth: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"bandwidth_settings": bandwidth_settings, "bandwidth_verdict": bandwidth_verdict, "bandwidth_lines": bandwidth_lines,
                "record_bandwidth": record_bandwidth}
