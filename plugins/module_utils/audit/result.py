# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The audit result of one host, computed once, on the controller, from
what the host's numa_audit module read (or a replayed capture):

audit_host(facts, processes, host=None, deployed=None, ...) takes
- facts: the topology facts (docs/facts.md, schema 1),
- processes: gpu_processes.read_processes() output, with `unit_states`
  (units.read_unit_states(): the planned units' systemd state) when the
  module read them (a replay has none),
- deployed: the deployed fleet plan (docs/audit.md, "Deployed plan"), or None,
and returns plain dicts: findings (locality.py, drift.py) worst first, the
process groups, and, with a plan, each planned instance's state and
today's plan. audit_result() adds the topology, processes and summary
lines (the task result); gate() applies fail_on_severity.

Pure functions over plain dicts; controller only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import drift
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import instance_state
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import locality
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_text
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.summary import summary as topology_summary


def audit_host(facts, processes, host=None, deployed=None, memory_threshold=locality.DEFAULT_MEMORY_THRESHOLD,
               unit_prefix=instance_state.DEFAULT_UNIT_PREFIX):
    """Audit one host; see the module docstring. ValueError on bad input."""
    host = host or facts.get("hostname") or "host"
    if not isinstance(memory_threshold, int) or isinstance(memory_threshold, bool) or not 0 <= memory_threshold <= 100:
        raise ValueError("memory_threshold: must be a percentage 0-100 (got %s)" % show(memory_threshold))
    view = locality.HostView(facts, host)
    processes = processes or {"source": None, "processes": [], "warnings": []}
    procs = processes.get("processes") or []
    findings = []
    if processes.get("source") is None and any(g.get("vendor") == "nvidia" for g in view.gpus):
        findings.append(locality.finding(
            host, "info", "processes_unknown", host,
            "which processes hold the GPUs is unknown (neither NVML nor nvidia-smi answered, or a capture "
            "recorded without a process list)",
            "install nvidia-ml-py or nvidia-smi on the host; record captures with ansible-playbook gpufleet.numa.record_topology"))
    groups = locality.process_groups(view, procs)
    states = []
    today = None
    if deployed is not None:
        plan_findings, states, today = drift.check_plan(view, deployed, groups, processes, unit_prefix)
    else:
        plan_findings = []
    instance_of = {}
    # The device class of each planned instance (a kept one without it: nvidia).
    device_of = dict((inst.get("name"), inst.get("device") or "nvidia") for inst in (
        drift.deployed_for_host(deployed, host)[0] if deployed is not None else []))
    for group in groups:
        for pid in group["pids"]:
            instance_of[pid] = group["instance"]
    placed = {}
    for proc in procs:
        instance = instance_of.get(proc["pid"])
        proc_findings, where = locality.check_process(view, proc, memory_threshold, instance,
                                                      device_of.get(instance))
        findings.extend(proc_findings)
        placed[proc["pid"]] = where
    for group in groups:
        findings.extend(locality.check_group(view, group))
        where = [placed[p] for p in group["pids"] if p in placed]
        group["misplaced"] = group["misplaced"] or any(w["misplaced"] for w in where)
        group["cpu_nodes"] = sorted(set(n for w in where for n in (w["cpu_nodes"] or [])))
        memory_nodes = [w["memory_node"] for w in where if w["memory_node"] is not None]
        group["memory_node"] = memory_nodes[0] if memory_nodes else None
        shares = [w["remote_memory_percent"] for w in where if w["remote_memory_percent"] is not None]
        group["remote_memory_percent"] = max(shares) if shares else None
    findings.extend(plan_findings)
    findings.sort(key=lambda f: (-locality.severity_rank(f["severity"]), f["code"], f["subject"]))
    counts = dict((s, 0) for s in locality.SEVERITIES)
    for f in findings:
        counts[f["severity"]] += 1
    worst = max((f["severity"] for f in findings), key=locality.severity_rank) if findings else None
    return {
        "host": host,
        "findings": findings,
        "groups": groups,
        "instances": states,
        "today_plan": today,
        "counts": counts,
        "worst": worst,
        "process_source": processes.get("source"),
        "warnings": list(processes.get("warnings") or []),
        "unit_states": processes.get("unit_states"),
    }


def audit_result(facts, processes, host, deployed=None, memory_threshold=locality.DEFAULT_MEMORY_THRESHOLD,
                 unit_prefix=instance_state.DEFAULT_UNIT_PREFIX):
    """The task's result dict (without changed/capture); ValueError on bad input."""
    result = audit_host(facts, processes, host=host, deployed=deployed, memory_threshold=memory_threshold,
                        unit_prefix=unit_prefix)
    result["topology"] = facts
    result["processes"] = (processes or {}).get("processes") or []
    result["summary"] = topology_summary(facts) + report_text.text_table([result])
    return result


def gate(result, severity):
    """(failed, msg) for fail_on_severity."""
    if severity in (None, "none"):
        return False, None
    hits = locality.at_or_above(result["findings"], severity)
    if not hits:
        return False, None
    return True, "%s: %d finding(s) at or above %s; first: %s" % (result["host"], len(hits), severity, hits[0]["message"])
