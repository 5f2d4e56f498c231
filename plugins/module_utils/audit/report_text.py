# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The audit for the console: a summary line per host and one row per
finding, worst first, with its fix.

Input: host results as result.audit_result() makes them, or as
plugin_utils/host_results.audit_results() keeps them of what a playbook
passes (a result of the wrong shape is then a result_invalid finding).
Pure functions; controller only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit.locality import SEVERITIES, severity_rank
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth.verdict import verdict
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import printable

INSTANCE_STATES = ("running", "stopped", "failed", "unknown")  # instance_state.STATES


def all_findings(results):
    """Every finding of every host, worst first, then by host."""
    found = [f for r in results for f in r["findings"]]
    return sorted(found, key=lambda f: (-severity_rank(f["severity"]), f["host"], f["code"], f["subject"]))


def instance_state_text(inst):
    """An instance's state as the reports show it: "running", or with the
    placement problem, "unknown; elsewhere"."""
    state = inst.get("state") if inst.get("state") in INSTANCE_STATES else "unknown"
    return "%s; %s" % (state, inst["problem"]) if inst.get("problem") else state


def instance_counts(instances):
    """"; planned instances: 2 running, 1 unknown" (only the states seen; an
    unknown one is never counted as running); "" without a plan."""
    if not instances:
        return ""
    counts = {}
    for inst in instances:
        state = inst.get("state") if inst.get("state") in INSTANCE_STATES else "unknown"
        counts[state] = counts.get(state, 0) + 1
    return "; planned instances: " + ", ".join("%d %s" % (counts[s], s) for s in INSTANCE_STATES if s in counts)


def text_table(results):
    """Lines: a summary per host (and its measured bandwidth's verdict, when
    the kept plan holds one), then one row per finding (worst first) with
    its fix on the next line."""
    lines = []
    for r in results:
        counts = r.get("counts") or {}
        lines.append("%s: %s; %d GPU process(es) (%s)%s" % (
            r["host"], ", ".join("%d %s" % (counts.get(s, 0), s) for s in reversed(SEVERITIES)),
            sum(len(g.get("pids") or []) for g in r.get("groups") or []), r.get("process_source") or "no process source",
            instance_counts(r.get("instances"))))
        if r.get("bandwidth"):
            lines.append(printable("%s: measured bandwidth: %s" % (r["host"], verdict(r["bandwidth"])["text"])))
    findings = all_findings(results)
    if not findings:
        lines.append("no findings")
        return lines
    rows = [("SEVERITY", "HOST", "CODE", "SUBJECT")] + [(f["severity"], f["host"], f["code"], f["subject"]) for f in findings]
    widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
    lines.append("  ".join(str(c).ljust(w) for c, w in zip(rows[0], widths)) + "  FINDING")
    for f, row in zip(findings, rows[1:]):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + f["message"])
        lines.append("    fix: " + f["fix"])
    return lines
