# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""metrics/textfile.py: audit results of the recorded DGX-2 with real
processes recorded under numactl (tests/fixtures/audit_scenarios.py), as
node_exporter textfile metrics, read back sample by sample and linted by
Debian's promtool (`promtool check metrics`, the exposition format's own
checker)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import textfile
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import (
    DGX2, DGX2_BUS, RUNNING, audit_scenario, capture_with_processes)

PROMTOOL = shutil.which("promtool")
_SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")


def deployed_plan(**options):
    facts, dummy = audit_replay.gather_capture(capture_with_processes(DGX2, {}))
    return {"options": options, "plan": placement.plan_fleet({"gpu-a": facts}, **options)}


def samples(text):
    """metric{labels} -> value for every sample line."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, line
        out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return out


def test_a_host_that_runs_as_planned():
    result = audit_scenario(DGX2, RUNNING, deployed=deployed_plan(tp_size=4, max_instances_per_host=1))
    assert result["findings"] == []
    assert samples(textfile.audit_metrics(result, 20)) == {
        'gpufleet_audit_findings{severity="info"}': 0, 'gpufleet_audit_findings{severity="warning"}': 0,
        'gpufleet_audit_findings{severity="error"}': 0, 'gpufleet_audit_findings{severity="critical"}': 0,
        "gpufleet_audit_instances_not_bound": 0,
        'gpufleet_audit_remote_memory_percent{vllm_instance="vllm-0"}': 0,
        "gpufleet_audit_remote_memory_threshold_percent": 20,
    }


def test_an_instance_on_the_wrong_socket():
    """vllm-8 (GPU 8, node 1) runs as a process bound to node 0: not bound
    as planned, and all of its memory on the other node."""
    result = audit_scenario(DGX2, {"bound_node0": [DGX2_BUS[8]]}, deployed=deployed_plan(tp_size=1))
    found = samples(textfile.audit_metrics(result, 30))
    assert textfile.not_bound(result) == ["vllm-8"]
    assert found["gpufleet_audit_instances_not_bound"] == 1
    assert found['gpufleet_audit_remote_memory_percent{vllm_instance="vllm-8"}'] == 100
    assert found["gpufleet_audit_remote_memory_threshold_percent"] == 30
    for severity in ("info", "warning", "error", "critical"):
        assert found['gpufleet_audit_findings{severity="%s"}' % severity] == result["counts"][severity]
    assert result["counts"]["critical"] >= 1


def test_an_instance_whose_gpus_another_process_holds():
    result = audit_scenario(DGX2, {"unbound": [DGX2_BUS[12]]}, deployed=deployed_plan(tp_size=4))
    assert samples(textfile.audit_metrics(result, 20))["gpufleet_audit_instances_not_bound"] == 1
    assert textfile.not_bound(result) == ["vllm-3"]


def test_label_values_are_escaped():
    result = {"counts": {}, "findings": [], "groups": [{"instance": 'a"b\\c\nd', "remote_memory_percent": 5}]}
    assert 'gpufleet_audit_remote_memory_percent{vllm_instance="a\\"b\\\\c\\nd"} 5' in textfile.audit_metrics(
        result, 20).splitlines()


@pytest.mark.parametrize("threshold", ["twenty", -1, 101, None, True])
def test_a_bad_threshold_is_named(threshold):
    with pytest.raises(ValueError, match="audit_memory_threshold"):
        textfile.audit_metrics({"counts": {}}, threshold)


@pytest.mark.parametrize("directory", ["", "var/lib/x", "/var/lib/../x", "/var/lib/x y", None])
def test_a_bad_textfile_directory_is_named(directory):
    with pytest.raises(ValueError, match="audit_textfile_dir"):
        textfile.textfile({"counts": {}}, 20, directory)


def test_the_file_is_a_prom_file_in_the_directory():
    written = textfile.textfile({"counts": {}}, 20, "/var/lib/prometheus/node-exporter/")
    assert written["path"] == "/var/lib/prometheus/node-exporter/gpufleet-audit.prom"
    assert written["text"] == textfile.audit_metrics({"counts": {}}, 20)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/setup installs Debian's prometheus")
def test_promtool_lints_the_exposition():
    result = audit_scenario(DGX2, {"bound_node0": [DGX2_BUS[8]]}, deployed=deployed_plan(tp_size=1))
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=textfile.audit_metrics(result, 20),
                             capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""
