# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plugins/filter/plan_record.py: thin shells that name themselves in every error, never a traceback."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter import plan_record as filters
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record


def test_no_kept_plan_is_an_empty_record():
    assert filters.kept_record("") == plan_record.empty_record()
    assert filters.kept_record(None) == plan_record.empty_record()


@pytest.mark.parametrize("call, message", [
    (lambda: filters.kept_record("{", "/srv/plan.json"), "gpufleet.numa.kept_record: plan file /srv/plan.json is not JSON"),
    (lambda: filters.kept_record(7), "gpufleet.numa.kept_record: <plan> must be the kept plan"),
    (lambda: filters.record_deployed("", "", ["a"], []), "gpufleet.numa.record_deployed: runs must map host"),
    (lambda: filters.record_deployed("", "", "a", {}), "gpufleet.numa.record_deployed: hosts must be a list"),
    (lambda: filters.forget_hosts("", None), "gpufleet.numa.forget_hosts: hosts must be a list"),
    (lambda: filters.routed_plan("", "a"), "gpufleet.numa.routed_plan: fleet must be a list"),
    (lambda: filters.hosts_to_remove("", 1), "gpufleet.numa.hosts_to_remove: fleet must be a list"),
    (lambda: filters.decommission_hosts("", None), "gpufleet.numa.decommission_hosts: gpufleet_decommission: is required"),
    (lambda: filters.deploy_report("", "", []), "gpufleet.numa.deploy_report: context must be a mapping"),
    (lambda: filters.deploy_report("", "", {"fleet": "a"}), "gpufleet.numa.deploy_report: fleet must be a list")])
def test_errors_name_the_filter(call, message):
    with pytest.raises(AnsibleFilterError) as error:
        call()
    assert str(error.value).startswith(message), str(error.value)


def test_report_defaults():
    assert filters.deploy_report("", "", {"fleet": [], "gateways": []}) == ["gateway: none in the inventory"]
