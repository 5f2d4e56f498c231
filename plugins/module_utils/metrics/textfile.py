# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""An audit result as node_exporter textfile metrics.

audit_metrics() turns one host's audit result (audit/result.py) into the
Prometheus text exposition format that node_exporter's textfile
collector serves from a *.prom file: the findings per severity, the
planned instances not bound as planned, and per instance the share of
its memory on NUMA nodes other than its GPUs' with the audit's threshold
beside it (the GpufleetNumaRemoteMemory rule compares the two). Pure
functions, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import locality
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks

# The file node_exporter's textfile collector reads (*.prom) in audit_textfile_dir.
FILE_NAME = "gpufleet-audit.prom"

# Findings that say a planned instance does not run where it was placed.
NOT_BOUND_CODES = ("process_locality", "instance_misplaced")

_HELP = (
    ("gpufleet_audit_findings", "Findings of the last gpufleet.numa topology audit of this host, per severity."),
    ("gpufleet_audit_instances_not_bound",
     "Planned vLLM instances whose processes the last audit found running or allocating outside their NUMA nodes."),
    ("gpufleet_audit_remote_memory_percent",
     "Share of an instance's memory on NUMA nodes other than its GPUs' (largest of its processes), last audit."),
    ("gpufleet_audit_remote_memory_threshold_percent",
     "The audit's memory threshold (audit_memory_threshold): a share above it is a finding."),
)


def _label_value(value):
    """A label value as the exposition format writes it (\\, " and newline escaped)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def not_bound(result):
    """The planned instances the audit found not bound as planned, sorted."""
    return sorted(set(f["instance"] for f in result.get("findings") or []
                      if f.get("code") in NOT_BOUND_CODES and f.get("instance")))


def remote_memory(result):
    """instance -> the largest remote-memory share of its process groups."""
    shares = {}
    for group in result.get("groups") or []:
        if group.get("instance") and group.get("remote_memory_percent") is not None:
            shares[group["instance"]] = max(shares.get(group["instance"], 0), group["remote_memory_percent"])
    return shares


def audit_metrics(result, memory_threshold=locality.DEFAULT_MEMORY_THRESHOLD):
    """The *.prom file's text for one host's audit result."""
    memory_threshold = checks.integer("audit_memory_threshold", memory_threshold, 0, 100)
    counts = result.get("counts") or {}
    samples = {
        "gpufleet_audit_findings": ['{severity="%s"} %d' % (s, counts.get(s, 0)) for s in locality.SEVERITIES],
        "gpufleet_audit_instances_not_bound": [" %d" % len(not_bound(result))],
        "gpufleet_audit_remote_memory_percent": [
            '{vllm_instance="%s"} %d' % (_label_value(name), share) for name, share in sorted(remote_memory(result).items())],
        "gpufleet_audit_remote_memory_threshold_percent": [" %d" % memory_threshold],
    }
    lines = []
    for name, text in _HELP:
        lines.append("# HELP %s %s" % (name, text))
        lines.append("# TYPE %s gauge" % name)
        lines.extend(name + sample for sample in samples[name])
    return "\n".join(lines) + "\n"


def textfile(result, memory_threshold, directory):
    """{path, text}: where the audit writes one host's metrics (FILE_NAME in
    directory, audit_textfile_dir) and what."""
    directory = checks.absolute_path("audit_textfile_dir", directory)
    return {"path": directory.rstrip("/") + "/" + FILE_NAME, "text": audit_metrics(result, memory_threshold)}
