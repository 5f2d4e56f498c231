# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The alert rules, checked by Debian's real promtool: `promtool check
rules` accepts what the filter writes, and `promtool test rules` evaluates
each alert over recorded series the way Prometheus would: it fires when it
should, stays quiet when it should not, and a rule file with a longer `for`
fails the same test (the test can fail)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.filter import metrics as metrics_filters
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import rules

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/setup installs Debian's prometheus")

VLLM = 'up{job="gpufleet-vllm", instance="gpu-a/vllm-0", host="gpu-a", model="llama", gpus="0,1,2,3", ' \
       'numa_nodes="0", socket="0"}'
NODE = '{job="gpufleet-node", instance="gpu-a/node", host="gpu-a"}'


def promtool(*args, cwd=None):
    return subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, cwd=cwd, timeout=60, check=False)


def write_rules(tmp_path, down_for):
    path = tmp_path / "rules.yml"
    path.write_text(metrics_filters._text("rules.yml", rules.alert_rules(down_for)))
    return path


def alert_test(down_for_expectation):
    """A promtool rule test: an instance that stops answering at 1m, a gateway
    that answers, an audit that finds one instance not bound and 35% of
    another's memory remote (threshold 20) while a third has 10% and a
    fourth exactly 20%."""
    return {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [
                {"series": VLLM, "values": "1x3 0x20"},
                {"series": 'up{job="gpufleet-gateway", instance="gw/gateway", host="gw"}', "values": "1x24"},
                {"series": "gpufleet_audit_instances_not_bound" + NODE, "values": "0x3 1x20"},
                {"series": 'gpufleet_audit_remote_memory_percent{job="gpufleet-node", instance="gpu-a/node", '
                           'host="gpu-a", vllm_instance="vllm-0"}', "values": "35x24"},
                {"series": 'gpufleet_audit_remote_memory_percent{job="gpufleet-node", instance="gpu-a/node", '
                           'host="gpu-a", vllm_instance="vllm-1"}', "values": "10x24"},
                # exactly at the threshold: not above it, no alert
                {"series": 'gpufleet_audit_remote_memory_percent{job="gpufleet-node", instance="gpu-a/node", '
                           'host="gpu-a", vllm_instance="vllm-2"}', "values": "20x24"},
                {"series": "gpufleet_audit_remote_memory_threshold_percent" + NODE, "values": "20x24"},
            ],
            "alert_rule_test": [
                # Down from 1m on: pending for `for`, then firing.
                {"eval_time": "1m30s", "alertname": "GpufleetInstanceDown", "exp_alerts": []},
                {"eval_time": down_for_expectation, "alertname": "GpufleetInstanceDown", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "job": "gpufleet-vllm", "instance": "gpu-a/vllm-0",
                                   "host": "gpu-a", "model": "llama", "gpus": "0,1,2,3", "numa_nodes": "0",
                                   "socket": "0"},
                    "exp_annotations": {
                        "summary": "vLLM instance gpu-a/vllm-0 is down",
                        "description": "gpu-a/vllm-0 (model llama, GPUs 0,1,2,3 on NUMA node(s) 0, socket 0) has not "
                                       "answered its /metrics scrape for 1m: systemctl status on gpu-a."}}]},
                {"eval_time": "5m", "alertname": "GpufleetGatewayDown", "exp_alerts": []},
                {"eval_time": "30s", "alertname": "GpufleetBindingDrift", "exp_alerts": []},
                {"eval_time": "2m", "alertname": "GpufleetBindingDrift", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "job": "gpufleet-node", "instance": "gpu-a/node",
                                   "host": "gpu-a"},
                    "exp_annotations": {
                        "summary": "1 instance(s) on gpu-a not bound as planned",
                        "description": "The last topology audit of gpu-a found planned instances whose processes run "
                                       "or allocate outside their NUMA node(s): run ansible-playbook gpufleet.numa.audit_topology for "
                                       "the findings and their fixes."}}]},
                {"eval_time": "2m", "alertname": "GpufleetNumaRemoteMemory", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "job": "gpufleet-node", "instance": "gpu-a/node",
                                   "host": "gpu-a", "vllm_instance": "vllm-0"},
                    "exp_annotations": {
                        "summary": "vllm-0 on gpu-a: 35% of its memory on other NUMA nodes",
                        "description": "The last topology audit found 35% of the memory of instance vllm-0 on NUMA "
                                       "nodes other than its GPUs', above the audit's threshold: its memory is not "
                                       "bound, or was allocated before binding."}}]},
            ],
        }],
    }


def run_alert_test(tmp_path, down_for, expectation):
    write_rules(tmp_path, down_for)
    (tmp_path / "test.yml").write_text(yaml.safe_dump(alert_test(expectation), sort_keys=False))
    return promtool("test", "rules", "test.yml", cwd=tmp_path)


def test_promtool_accepts_the_rules(tmp_path):
    result = promtool("check", "rules", str(write_rules(tmp_path, "1m")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 4 rules found" in result.stdout + result.stderr


def test_each_alert_fires_as_documented(tmp_path):
    result = run_alert_test(tmp_path, "1m", "2m30s")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rule_test_can_fail(tmp_path):
    """The same expectations against rules that wait 5m before an instance is down."""
    result = run_alert_test(tmp_path, "5m", "2m30s")
    assert result.returncode != 0
    assert "GpufleetInstanceDown" in result.stdout + result.stderr


@pytest.mark.parametrize("value", ["", "1 m", "m", "1m1h", "5", "1.5m", 60, None, "1m\n"])
def test_bad_durations_are_named(value):
    with pytest.raises(ValueError, match="gpufleet_alert_down_for"):
        rules.alert_rules(value)


# At and around each unit's end of Prometheus's range (2^63-1 nanoseconds),
# the whole range, and the forms its parser takes or refuses.
DURATION_PROBES = ["999999999y", "292y", "293y", "15250w", "15251w", "106751d", "106752d", "2562047h",
                   "2562048h", "153722867m", "153722868m", "9223372036s", "9223372037s", "9223372036854ms",
                   "9223372036855ms", "292y24w3d23h47m16s854ms", "292y24w3d23h47m16s855ms", "99999999999999999999s",
                   "0", "0s", "01m", "1d1s", "1h1h", "1m1h", "5"]


@pytest.mark.parametrize("value", DURATION_PROBES)
def test_durations_are_what_promtool_accepts(tmp_path, value):
    """promtool, the oracle: a duration it refuses (out of range, units out
    of order) is refused here, naming the variable, and one it accepts is
    kept."""
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"alert": "A", "expr": "up == 0", "for": value}]}]}))
    accepted = promtool("check", "rules", str(path)).returncode == 0
    if accepted:
        assert rules.duration("gpufleet_alert_down_for", value) == value
    else:
        with pytest.raises(ValueError, match="^gpufleet_alert_down_for: must be "):
            rules.duration("gpufleet_alert_down_for", value)


def test_the_longest_duration_is_named():
    with pytest.raises(ValueError, match=r"must be at most 292y24w3d23h47m16s854ms .*\(got '999999999y'\)"):
        rules.alert_rules("999999999y")
