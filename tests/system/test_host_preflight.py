# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The host preflight in the deploy (docs/preflight.md), on the demo fleet
with the real playbooks: the recorded hosts run clean (what needs a live
host is "not checked (recorded capture)", info); a host whose capture shows
its cgroup cpuset excluding a node the plan binds to is refused before any
of its units changes, keeps its recorded instances while the others
deploy, and fails the run at its end; gpufleet_preflight: warn reports the
same and deploys; a bad value is refused by the variable check."""

import copy
import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    A6000, H100, RTX, demo_copy, record, run_playbook, write_inventory)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture

CPUSET = "/sys/fs/cgroup/system.slice/cpuset.mems.effective"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    return demo_copy(tmp_path_factory.mktemp("host_preflight"))


def h100_capture(fleet):
    """The demo h100's capture with its services' cpuset limited to node 0 (derived): its vllm-1 binds node 1."""
    capture = copy.deepcopy(load_capture(os.path.join(fixture_paths.FIXTURES, "machines", "h100_sxm_8gpu_nvswitch",
                                                      "capture.yml")))
    capture.setdefault("files", {})[CPUSET] = "0\n"
    path = fleet["tmp"] / "h100-cpuset.yml"
    path.write_text(yaml.safe_dump(capture))
    return str(path)


def host_vars(variables):
    def change(groups):
        for host, values in variables.items():
            groups["gpu_servers"]["hosts"][host].update(values)
    return change


def units(fleet, host):
    """unit file name -> content of HOST's staged units."""
    where = fleet["staging"] / host / "etc" / "systemd" / "system"
    return dict((p.name, p.read_text()) for p in sorted(where.glob("gpufleet-*.service")))


def test_deploy_refuses_a_host_that_cannot_bind_before_its_units_change(fleet):
    out = run_playbook(fleet, "deploy_inference.yml", write_inventory(fleet, "hosts.yml"))
    assert "Say what the host preflight found on every host" in out
    assert "%s: info not checked (recorded capture): its capture cannot answer numactl" % H100 in out
    assert " critical " not in out and " warning " not in out
    before = dict((h, units(fleet, h)) for h in (H100, RTX, A6000))
    kept = [i for i in record(fleet)["instances"] if i["host"] == H100]

    # A new served name changes every unit; the h100's cpuset now excludes node 1.
    change = host_vars({h: {"vllm_served_model_name": "llama-renamed"} for h in (H100, RTX, A6000)})

    def refused(groups):
        change(groups)
        groups["gpu_servers"]["hosts"][H100]["numa_capture"] = h100_capture(fleet)
    out = run_playbook(fleet, "deploy_inference.yml", write_inventory(fleet, "cpuset.yml", refused), any_failure=True)
    assert "%s: critical cpuset_mems %s: vllm-1 binds memory to NUMA node(s) 1" % (H100, CPUSET) in out
    assert "AllowedMemoryNodes=0-1" in out
    assert "%s: refused, keeps its recorded instances" % H100 in out
    assert units(fleet, H100) == before[H100]
    assert [i for i in record(fleet)["instances"] if i["host"] == H100] == kept
    for host in (RTX, A6000):
        assert units(fleet, host) != before[host] and "llama-renamed" in "".join(units(fleet, host).values())
    assert "refused by the host preflight (gpufleet_preflight: fail): cpuset_mems" in out
    # refused before the deploy play, failed at the end of the run
    assert out.index("refused, keeps its recorded instances") < out.index("Deploy one NUMA-bound vLLM unit")
    assert out.index("Configure the load balancer") < out.rindex("could not be planned: refused by the host preflight")

    # warn: reported, deployed
    def warned(groups):
        refused(groups)
        groups["gpu_servers"]["hosts"][H100]["gpufleet_preflight"] = "warn"
    out = run_playbook(fleet, "deploy_inference.yml", write_inventory(fleet, "warn.yml", warned))
    assert "%s: critical cpuset_mems" % H100 in out and "refused" not in out
    assert "llama-renamed" in "".join(units(fleet, H100).values())


def test_deploy_checks_gpufleet_preflight(fleet):
    inventory = write_inventory(fleet, "bad.yml", host_vars({RTX: {"gpufleet_preflight": "maybe"}}))
    out = run_playbook(fleet, "deploy_inference.yml", inventory, any_failure=True)
    assert "%s: gpufleet_preflight: must be one of fail, warn, off" % RTX in out
