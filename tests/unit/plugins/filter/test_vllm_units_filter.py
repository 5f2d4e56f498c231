# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filter vllm_units: a thin shell; errors come back as AnsibleFilterError naming the variable."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.vllm_unit import FilterModule
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import VARIABLES as FIXTURE_VARIABLES

VLLM_UNITS = FilterModule().filters()["vllm_units"]
VARIABLES = dict(FIXTURE_VARIABLES, vllm_model="org/model")
INSTANCE = {"name": "vllm-0", "tp_size": 1, "pp_size": 1, "gpu_indices": [0], "port": 8000, "dist_port": 29000,
            "binding": {"cpus": "0-3", "mems": [0], "policy": "bind", "by_node": False}}


def test_vllm_units_returns_each_unit_argv():
    result = VLLM_UNITS([INSTANCE], VARIABLES)
    assert result["units"][0]["argv"][:6] == ["/usr/bin/numactl", "--physcpubind=0-3", "--membind=0",
                                              "/opt/vllm/bin/vllm", "serve", "org/model"]


@pytest.mark.parametrize("instances,variables,message", [
    ([INSTANCE], dict(VARIABLES, vllm_model="--trust-remote-code"),
     "gpufleet.numa.vllm_units: vllm_model: must not start with '-'"),
    ([INSTANCE], ["vllm_model"], "gpufleet.numa.vllm_units: variables must be a mapping"),
    ([dict(INSTANCE, port="http")], VARIABLES, "gpufleet.numa.vllm_units: vllm_instances[0] (vllm-0).port: "),
])
def test_vllm_units_errors_are_filter_errors(instances, variables, message):
    with pytest.raises(AnsibleFilterError) as info:
        VLLM_UNITS(instances, variables)
    assert str(info.value).startswith(message), str(info.value)


def test_vllm_stale_and_restarting_are_filter_shells():
    filters = FilterModule().filters()
    files = VLLM_UNITS([INSTANCE], VARIABLES)["files"]
    assert filters["vllm_stale"]([{"path": "/etc/vllm/gpufleet-old.yaml"}], files) == ["/etc/vllm/gpufleet-old.yaml"]
    with pytest.raises(AnsibleFilterError, match="^gpufleet.numa.vllm_stale: found and files must be lists"):
        filters["vllm_stale"]([{"name": "x"}], files)
    with pytest.raises(AnsibleFilterError, match="^gpufleet.numa.vllm_restarting: written must be the results"):
        filters["vllm_restarting"]([], [{"changed": True}])


def rollout_of(hostvars, batch, host, check_mode=False):
    """HOST's share of the batch's rollout, as the role's task sets it on HOST."""
    shares = FilterModule().filters()["vllm_rollout"](hostvars, batch, check_mode)
    assert [share["host"] for share in shares] == batch
    return dict((share["host"], share["rollout"]) for share in shares)[host]


def test_vllm_rollout_reads_the_role_state_of_the_batch_from_hostvars():
    filters = FilterModule().filters()
    units = VLLM_UNITS([INSTANCE], VARIABLES)
    unit = next(f for f in units["files"] if f["path"].endswith("/gpufleet-vllm-0.service"))
    changed = [{"__vllm_file": unit, "changed": True}]
    hostvars = {"a": {"__vllm": units, "__vllm_written": {"results": changed}},
                "b": {"__vllm": VLLM_UNITS([INSTANCE, dict(INSTANCE, name="vllm-1", port=8001, dist_port=29100)],
                                           VARIABLES), "__vllm_written": {"results": []}},
                # A host of the batch that failed before the role wrote anything.
                "c": {"__vllm": units},
                # A host the role was skipped on (it deploys nothing in this run).
                "d": {"__vllm": {"skipped": True, "changed": False}, "__vllm_written": {"skipped": True}}}
    rolled = rollout_of(hostvars, ["a", "b", "c", "d"], "a")
    assert rolled["ordinals"] == 2
    assert rolled["steps"][0]["name"] == "vllm-0" and rolled["steps"][0]["restart"] is True
    assert rolled["steps"][1] is None
    with pytest.raises(AnsibleFilterError, match="^gpufleet.numa.vllm_rollout: hostvars must hold"):
        filters["vllm_rollout"]({"a": {"__vllm": {}, "__vllm_written": {"results": []}}}, ["a"])
    # The call of the per-host filter it was (a host where check_mode goes).
    with pytest.raises(AnsibleFilterError, match="^gpufleet.numa.vllm_rollout: check_mode must be a boolean"):
        filters["vllm_rollout"](hostvars, ["a"], "a")


class CountedHostvars(dict):
    """hostvars that count how often each host's variables are read."""

    def __init__(self, *args):
        super(CountedHostvars, self).__init__(*args)
        self.reads = dict((host, 0) for host in self)

    def __getitem__(self, host):
        self.reads[host] += 1
        return dict.__getitem__(self, host)


def test_vllm_rollout_reads_each_hosts_state_once_for_the_whole_batch():
    """One call for the batch reads each host a few times whatever the
    batch's size (a call per host, each reading every host of the batch,
    grew with the square of the batch); a multi-node partner outside the
    batch is read too, and restarts its instance on the batch's host."""
    filters = FilterModule().filters()
    units = VLLM_UNITS([INSTANCE], VARIABLES)
    pair = dict(units, units=[dict(unit, multinode={"hosts": ["h0", "partner"]}) for unit in units["units"]])
    unit_file = next(f for f in units["files"] if f["path"].endswith("/gpufleet-vllm-0.service"))
    reads = {}
    for size in (5, 50):
        hostvars = CountedHostvars(("h%d" % i, {"__vllm": units, "__vllm_written": {"results": []}})
                                   for i in range(size))
        hostvars["h0"] = {"__vllm": pair, "__vllm_written": {"results": []}}
        changed = [{"__vllm_file": unit_file, "changed": True}]
        hostvars["partner"] = {"__vllm": pair, "__vllm_written": {"results": changed}}
        hostvars.reads.update(h0=0, partner=0)
        batch = ["h%d" % i for i in range(size)]
        shares = filters["vllm_rollout"](hostvars, batch, False)
        assert [share["host"] for share in shares] == batch
        assert [step["restart"] for step in shares[0]["rollout"]["steps"]] == [True]
        assert [step["restart"] for step in shares[1]["rollout"]["steps"]] == [False]
        reads[size] = hostvars.reads
    assert max(reads[50].values()) == max(reads[5].values()) <= 4, reads[50]
    assert reads[50]["partner"] > 0


def test_vllm_rollout_restarts_every_instance_after_this_runs_install():
    filters = FilterModule().filters()
    installing = VLLM_UNITS([INSTANCE, dict(INSTANCE, name="vllm-1", port=8001, dist_port=29100)],
                            dict(VARIABLES, vllm_install=True))
    # Units the host already has (check mode starts no others).
    installing["units"] = [dict(unit, installed=True) for unit in installing["units"]]
    hostvars = {"a": {"__vllm": installing, "__vllm_written": {"results": []}, "__vllm_installed": {"changed": True}}}
    steps = rollout_of(hostvars, ["a"], "a")["steps"]
    assert [(s["name"], s["restart"]) for s in steps] == [("vllm-0", True), ("vllm-1", True)]
    assert [s["restart"] for s in rollout_of(hostvars, ["a"], "a", True)["steps"]] == [False, False]
    # An install result left by an earlier run of the role in this playbook,
    # where this run installs nothing, restarts nothing.
    hostvars["a"]["__vllm"] = dict(installing, install=False)
    assert [s["restart"] for s in rollout_of(hostvars, ["a"], "a")["steps"]] == [False, False]


def test_vllm_deployed_is_a_filter_shell():
    deployed = FilterModule().filters()["vllm_deployed"]
    units = VLLM_UNITS([INSTANCE], VARIABLES)
    results = [{"__vllm_file": entry, "skipped": True, "content_sha1": "ab" * 20} for entry in units["files"]]
    assert deployed(units, {"results": results}) == {"engine": units["engine"], "instances": {
        "vllm-0": {"unit": "gpufleet-vllm-0.service", "unit_sha1": "ab" * 20, "engine": units["engine"]}},
        "files": {"unit_dir": "/etc/systemd/system", "config_dir": "/etc/vllm", "unit_prefix": "gpufleet-"}}
    with pytest.raises(AnsibleFilterError, match="^gpufleet.numa.vllm_deployed: written: must hold the content_sha1"):
        deployed(units, {"results": []})
    with pytest.raises(AnsibleFilterError, match="^gpufleet.numa.vllm_deployed: the input must be"):
        deployed({"units": []}, {"results": []})


def test_vllm_wants_service_mgr_is_a_filter_shell():
    wants = FilterModule().filters()["vllm_wants_service_mgr"]
    assert wants("auto") is True and wants("auto", "systemd") is False and wants(False, "") is False
