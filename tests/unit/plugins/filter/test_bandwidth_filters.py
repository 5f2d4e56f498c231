# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The bandwidth filters (plugins/filter/bandwidth.py): thin shells whose
errors name the filter and the field or variable."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter import bandwidth as filters
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record


def figures():
    return {"version": 1, "measured_at": "2025-05-01T12:00:00Z", "python": "/opt/vllm/bin/python", "size_mib": 64,
            "seconds": 0.2, "memory": {"method": "stdlib-copy", "notes": [], "pairs": [
                {"cpu_node": 0, "memory_node": 0, "gbps": 40.0, "threads": 2}]},
            "gpus": {"method": None, "copies": [], "notes": ["not measured: no torch in /usr/bin/python3"]}}


def test_bandwidth_settings_reads_the_hosts_variables_over_the_role_defaults():
    hostvars = {"gpu-a": {"gpufleet_bandwidth_size_mib": "32", "ansible_host": "10.0.0.1"},
                "gpu-b": {"vllm_venv": "/srv/vllm", "gpufleet_bandwidth_gpus": "maybe"}}
    assert filters.bandwidth_settings(hostvars, "gpu-a") == {
        "python": ["/opt/vllm/bin/python"], "kernel": "auto", "size_mib": 32, "seconds": 0.5, "timeout": 120,
        "gpus": True}
    with pytest.raises(AnsibleFilterError) as caught:
        filters.bandwidth_settings(hostvars, "gpu-b")
    assert str(caught.value) == ("gpufleet.numa.bandwidth_settings: gpu-b: gpufleet_bandwidth_gpus: must be a boolean "
                                 "(true or false) (got 'maybe')")
    with pytest.raises(AnsibleFilterError, match="expects hostvars"):
        filters.bandwidth_settings(["gpu-a"], "gpu-a")


def test_bandwidth_verdict_and_lines():
    assert filters.bandwidth_verdict(figures())["text"] == "one NUMA node: nothing to compare"
    assert filters.bandwidth_lines(figures(), "gpu-a") == [
        "gpu-a: one NUMA node: nothing to compare", "  memory (stdlib-copy) CPU node 0, memory node 0: 40.0 GB/s",
        "  note: not measured: no torch in /usr/bin/python3"]
    with pytest.raises(AnsibleFilterError) as caught:
        filters.bandwidth_lines(dict(figures(), size_mib=-1), "gpu-a")
    assert str(caught.value) == "gpufleet.numa.bandwidth_lines: bandwidth.size_mib: must be at least 1 (got -1)"


def test_record_bandwidth_on_an_empty_record_keeps_nothing_and_checks_its_input():
    found = filters.record_bandwidth("", {"gpu-a": figures()})
    assert found == {"record": plan_record.empty_record(), "kept": [],
                     "not_kept": {"gpu-a": "not in the kept plan (deploy it first; its figures are shown above)"}}
    with pytest.raises(AnsibleFilterError, match="measured must map host"):
        filters.record_bandwidth("", [figures()])
    with pytest.raises(AnsibleFilterError, match="the record must be the kept plan"):
        filters.record_bandwidth(json.dumps(plan_record.empty_record()), {})
