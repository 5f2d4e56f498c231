# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The deploy's policy for the host preflight (docs/preflight.md, "Policy"):
gpufleet_preflight per host.

- fail (default): a host with a critical finding is refused: it is
  reported with its findings and fixes, keeps its recorded instances, the
  other hosts deploy and the run fails at its end;
- warn: every finding is reported, nothing is refused;
- off: the preflight does not run on that host.

refusals() names the refused hosts and why; report_lines() prints every
finding of every host once, and "all passed" for a host without one;
summary_lines() is one host's module result. Pure functions, standard library only
(controller side).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import findings as findings_module

VARIABLE = "gpufleet_preflight"
POLICIES = ("fail", "warn", "off")
DEFAULT = "fail"
# A check a recorded capture cannot answer (findings.py words it so).
UNRECORDED = findings_module.RECORDED


def check_policy(value):
    """gpufleet_preflight, checked (fail, warn or off)."""
    return checks.choice(VARIABLE, DEFAULT if value is None else value, POLICIES)


def refusals(findings, policies):
    """FINDINGS (host -> findings) and POLICIES (host -> gpufleet_preflight)
    -> {host: why it is refused} for the hosts whose policy is fail and that
    have a critical finding."""
    out = {}
    for host in sorted(findings):
        if check_policy(policies.get(host)) != "fail":
            continue
        critical = [f for f in findings[host] if f["severity"] == "critical"]
        if critical:
            out[host] = "refused by the host preflight (%s: fail): %s" % (VARIABLE, "; ".join(
                "%s %s: %s" % (f["check"], f["subject"], f["message"]) for f in critical))
    return out


ALL_PASSED = "all passed"


def summary_lines(found):
    """One host's findings, one line each, critical first: "SEVERITY CHECK SUBJECT: MESSAGE (fix: FIX)";
    ["all passed"] for a clean host (its result says so, not an empty list)."""
    order = dict((name, -i) for i, name in enumerate(findings_module.SEVERITIES))
    return ["%s %s %s: %s%s" % (f["severity"], f["check"], f["subject"], f["message"],
                                " (fix: %s)" % f["fix"] if f["fix"] else "")
            for f in sorted(found, key=lambda f: order[f["severity"]])] or [ALL_PASSED]


def report_lines(findings, refused=None):
    """One line per finding, hosts sorted, critical first: "HOST: SEVERITY CHECK SUBJECT: MESSAGE (fix: FIX)",
    "HOST: all passed" for a host checked without a finding, then a line per refused host; ["no finding"] when no
    host was checked. Control
    characters are written as \\xNN (checks.printable). The checks a
    recorded capture cannot answer are one line per host (each finding, with its
    why, stays in the module's result): a recorded fleet would otherwise say it a
    dozen times."""
    order = {"critical": 0, "warning": 1, "info": 2}
    lines = []
    for host in sorted(findings):
        if not findings[host]:
            lines.append("%s: %s" % (host, ALL_PASSED))
            continue
        unrecorded = []
        for f in sorted(findings[host], key=lambda f: order.get(f["severity"], 3)):
            if f["severity"] == "info" and f["message"].startswith(UNRECORDED):
                unrecorded.append("%s %s" % (f["check"], f["subject"]))
                continue
            lines.append("%s: %s %s %s: %s%s" % (host, f["severity"], f["check"], f["subject"], f["message"],
                                                 " (fix: %s)" % f["fix"] if f["fix"] else ""))
        if unrecorded:
            lines.append("%s: info %s%s (record the host with its preflight inputs, or set "
                         "numa_preflight_capture: '' to check it live)" % (
                             host, UNRECORDED + "its capture cannot answer ", ", ".join(unrecorded)))
    for host in sorted(refused or {}):
        lines.append("%s: refused, keeps its recorded instances" % host)
    # What a host read (a unit's output, a path) is printed, never obeyed by the terminal.
    return [checks.printable(line) for line in lines] or ["no finding"]
