# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters that present numa_audit results: a text table, an HTML report,
and the findings at or above a severity (for a CI gate)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import findings as audit
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report as audit_report
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as value_checks


def audit_table(results):
    try:
        return audit_report.text_table(list(results or []))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.audit_table: %s" % exc)


def audit_html(results, title="GPU / NUMA topology audit", generated=None):
    try:
        return audit_report.html_report(list(results or []), title=str(title), generated=generated)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.audit_html: %s" % exc)


def audit_findings(results, severity="info", variable="severity"):
    """variable: the name the caller's severity has, for the error
    (audit_topology.yml passes audit_fail_on); "none" keeps nothing."""
    if severity == "none":
        return []
    try:
        value_checks.choice(str(variable), severity, ("none",) + audit.SEVERITIES)
        return audit.at_or_above(audit_report.all_findings(list(results or [])), severity)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.audit_findings: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"audit_table": audit_table, "audit_html": audit_html, "audit_findings": audit_findings}
