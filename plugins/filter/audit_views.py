# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters that present numa_audit results: a text table, an HTML report,
and the findings at or above a severity (for a CI gate). Each host result
is checked first (plugin_utils/host_results.py): one of the wrong shape is
reported as invalid and the other hosts as they are."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import locality
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_html
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_text
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.plugin_utils import host_results


def audit_table(results):
    try:
        return report_text.text_table(host_results.audit_results(list(results or [])))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.audit_table: %s" % exc)


def audit_html(results, title="GPU / NUMA topology audit", generated=None):
    try:
        return report_html.html_report(host_results.audit_results(list(results or [])), title=str(title), generated=generated)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.audit_html: %s" % exc)


def audit_findings(results, severity="info", variable="severity"):
    """variable: the name the caller's severity has, for the error
    (audit_topology.yml passes audit_fail_on); "none" keeps nothing."""
    if severity == "none":
        return []
    try:
        checks.choice(str(variable), severity, ("none",) + locality.SEVERITIES)
        return locality.at_or_above(report_text.all_findings(host_results.audit_results(list(results or []))), severity)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.audit_findings: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"audit_table": audit_table, "audit_html": audit_html, "audit_findings": audit_findings}
