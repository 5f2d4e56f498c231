# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plugin_utils/vllm_results.py: what role vllm registered on a host (its
look and its write) -> what the host runs, as rollout.deployed_record says;
read only where the role ran (registered both, not skipped), and only what
the record reads of the results."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import rollout
from ansible_collections.gpufleet.numa.plugins.plugin_utils import vllm_results
from ansible_collections.gpufleet.numa.tests.fixtures.fleet_runs import FILES, SHA, registered

SAID = {"engine": "vllm==0.11.0", "files": FILES, "instances": {
    "vllm-0": {"unit": "gpufleet-vllm-0.service", "unit_sha1": SHA, "engine": "vllm==0.11.0"},
    "vllm-1": {"unit": "gpufleet-vllm-1.service", "unit_sha1": "f" * 40, "engine": "vllm==0.11.0"}}}


class OnlyRead(dict):
    """A registered result whose keys other than READABLE must not be read."""

    def __init__(self, value, readable):
        super().__init__(value)
        self.readable = readable

    def __getitem__(self, key):
        assert key in self.readable, "read %s" % key
        return super().__getitem__(key)

    def _whole(self, *args):
        raise AssertionError("read whole")

    items = values = keys = __iter__ = _whole


def test_what_the_role_registered_is_what_its_record_says():
    results = registered(SAID)
    assert vllm_results.deployed(results["__vllm"], results["__vllm_written"]) == SAID
    units, written = results["__vllm"], results["__vllm_written"]["results"]
    assert vllm_results.deployed(units, {"results": written}) == rollout.deployed_record(
        units["units"], written, units["engine"], units["variables"])


def test_only_what_the_record_reads_is_read():
    results = registered(SAID)
    units = OnlyRead(dict(results["__vllm"], writes=["every file"], files=["again"]), ("units", "engine", "variables"))
    items = [OnlyRead(dict(item, diff={"before": "x"}), ("__vllm_file", "content_sha1"))
             for item in results["__vllm_written"]["results"]]
    assert vllm_results.deployed(units, {"results": items}) == SAID


def test_only_hosts_where_the_role_ran_are_read():
    ran = registered(SAID)
    hostvars = {
        "ran": dict(ran, vllm_listen_host="10.0.0.1"),
        "skipped": dict(ran, __vllm={"skipped": True, "changed": False}),
        "no-write": {"__vllm": ran["__vllm"]},
        "nothing": {"vllm_listen_host": "10.0.0.2"},
    }
    assert vllm_results.deployed_by_role(hostvars, ["ran", "skipped", "no-write", "nothing", "gone"]) == {"ran": SAID}


def test_a_unit_the_write_did_not_report_is_an_error():
    ran = registered(SAID)
    with pytest.raises(ValueError, match="content_sha1 of every unit"):
        vllm_results.deployed(ran["__vllm"], {"results": ran["__vllm_written"]["results"][:1]})


def test_the_role_ran_where_it_registered_a_look_not_skipped():
    look = registered(SAID)["__vllm"]
    hostvars = {"ran": {"__vllm": look}, "skipped": {"__vllm": {"skipped": True}}, "nothing": {}}
    assert vllm_results.role_look(hostvars, "ran") is look
    assert [vllm_results.role_look(hostvars, host) for host in ("skipped", "nothing", "gone")] == [None, None, None]
