# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The names the take-down trusts only by their rule."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.common import names


@pytest.mark.parametrize("prefix", ["gpufleet-", "gpufleet-team_a.", "gpufleet-" + "x" * 54])
def test_unit_prefixes_of_the_role(prefix):
    assert names.unit_prefix("vllm_unit_prefix", prefix) == prefix


@pytest.mark.parametrize("prefix, message", [
    ("", "must not be empty"), ("ssh", "must start with 'gpufleet-'"), ("gpufleet", "must start with 'gpufleet-'"),
    ("gpufleet-/", "must start with 'gpufleet-'"), ("gpufleet-" + "x" * 55, "must start with 'gpufleet-'"),
    ("gpufleet-\n", "must not contain control characters"), (None, "must be a string")])
def test_other_prefixes_are_refused(prefix, message):
    with pytest.raises(ValueError, match="^vllm_unit_prefix: " + message):
        names.unit_prefix("vllm_unit_prefix", prefix)


def test_recorded_hosts_are_hosts_not_groups():
    assert names.recorded_host("hosts key", "gpu-a.example:22") == "gpu-a.example:22"
    for group in ("all", "ungrouped"):
        with pytest.raises(ValueError, match="^hosts key: must be a host, not Ansible's group '%s'" % group):
            names.recorded_host("hosts key", group)
    for bad in ("gpu-*", "a,b", "", "x" * 254):
        with pytest.raises(ValueError, match="^hosts key: "):
            names.recorded_host("hosts key", bad)
    assert names.inventory_host("vllm_rollout_hosts[0]", "all") == "all"
