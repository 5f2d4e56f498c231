# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The fleet's Prometheus alert rules, as data.

alert_rules() returns the rule file (one group, "gpufleet") that the
deploy writes beside the inventory and the prometheus role installs:
an instance or gateway that does not answer its scrape, an audit that
found instances not bound as planned, and an instance whose memory the
audit found on NUMA nodes other than its GPUs' above the audit's own
threshold. The jobs and metric names are the ones scrape_config() and
textfile.py write; docs/metrics.md explains each rule. Pure functions,
standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks

VLLM_JOB = "gpufleet-vllm"
GATEWAY_JOB = "gpufleet-gateway"
NODE_JOB = "gpufleet-node"
GROUP = "gpufleet"

# Prometheus's duration (prometheus/common model.ParseDuration): units
# from years down to milliseconds, each at most once, largest first
# ("1m", "1h30m", "0s"), or "0" alone.
_DURATION = re.compile(r"(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?"
                       r"(?:([0-9]+)ms)?")
_UNIT_MS = (365 * 86400000, 7 * 86400000, 86400000, 3600000, 60000, 1000, 1)
# The total must fit a Go time.Duration (int64 nanoseconds): promtool
# refuses a longer one as "duration out of range".
MAX_DURATION_MS = (2 ** 63 - 1) // 10 ** 6
MAX_DURATION = "292y24w3d23h47m16s854ms"
DURATION_RULE = "must be a Prometheus duration such as 30s, 2m or 1h30m (units y w d h m s ms, largest first)"
DEFAULT_DOWN_FOR = "1m"


def duration(name, value):
    """A Prometheus duration, checked whole, at most MAX_DURATION."""
    checks.text(name, value, max_length=32)
    if value == "0":
        return value
    match = _DURATION.fullmatch(value)
    if not match or not re.search(r"[0-9]", value):
        checks.fail(name, DURATION_RULE, value)
    total = sum(int(count) * unit for count, unit in zip(match.groups(), _UNIT_MS) if count)
    if total > MAX_DURATION_MS:
        checks.fail(name, "must be at most %s (Prometheus's longest duration, 2^63-1 nanoseconds)"
                          % MAX_DURATION, value)
    return value


def alert_rules(down_for=DEFAULT_DOWN_FOR):
    """The rule file as a dict (write it as YAML).

    down_for: how long a vLLM instance or a gateway must fail its scrape
    before its alert fires (gpufleet_alert_down_for).
    """
    down_for = duration("gpufleet_alert_down_for", down_for)
    where = "GPUs {{ $labels.gpus }} on NUMA node(s) {{ $labels.numa_nodes }}, socket {{ $labels.socket }}"
    return {"groups": [{"name": GROUP, "rules": [
        {
            "alert": "GpufleetInstanceDown",
            "expr": 'up{job="%s"} == 0' % VLLM_JOB,
            "for": down_for,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "vLLM instance {{ $labels.instance }} is down",
                "description": "{{ $labels.instance }} (model {{ $labels.model }}, %s) has not answered its "
                               "/metrics scrape for %s: systemctl status on {{ $labels.host }}." % (where, down_for),
            },
        },
        {
            "alert": "GpufleetGatewayDown",
            "expr": 'up{job="%s"} == 0' % GATEWAY_JOB,
            "for": down_for,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Gateway {{ $labels.host }} is down",
                "description": "The HAProxy exporter of {{ $labels.host }} has not answered its scrape for %s."
                               % down_for,
            },
        },
        {
            "alert": "GpufleetBindingDrift",
            "expr": "gpufleet_audit_instances_not_bound > 0",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "{{ $value }} instance(s) on {{ $labels.host }} not bound as planned",
                "description": "The last topology audit of {{ $labels.host }} found planned instances whose "
                               "processes run or allocate outside their NUMA node(s): run ansible-playbook "
                               "gpufleet.numa.audit_topology for the findings and their fixes.",
            },
        },
        {
            "alert": "GpufleetNumaRemoteMemory",
            # The audit writes its own threshold beside the shares, so the
            # rule and the audit's findings agree (audit_memory_threshold).
            "expr": "gpufleet_audit_remote_memory_percent > on(instance, job) group_left "
                    "gpufleet_audit_remote_memory_threshold_percent",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "{{ $labels.vllm_instance }} on {{ $labels.host }}: {{ $value }}% of its memory "
                           "on other NUMA nodes",
                "description": "The last topology audit found {{ $value }}% of the memory of instance "
                               "{{ $labels.vllm_instance }} on NUMA nodes other than its GPUs', above the "
                               "audit's threshold: its memory is not bound, or was allocated before binding.",
            },
        },
    ]}]}
