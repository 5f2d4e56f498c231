# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A host that cannot be planned never stops the fleet (docs/deploy.md, "A
host that cannot be planned"), on the demo fleet with the real playbooks and
real HAProxy configuration checks: the other hosts deploy and are routed,
the host keeps its recorded instances, and the run fails at its end naming it.
"""

import re

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    A6000, H100, RTX, demo_copy, record, routed, run_playbook, write_inventory)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    return demo_copy(tmp_path_factory.mktemp("unplannable"))


def run(fleet, inventory, rc=0):
    return run_playbook(fleet, "deploy_inference.yml", inventory, any_failure=rc != 0)


def host_vars(variables):
    """A change for write_inventory: these GPU hosts' variables updated."""
    def change(groups):
        for host, values in variables.items():
            groups["gpu_servers"]["hosts"][host].update(values)
    return change


def recorded(fleet, host):
    return [i for i in record(fleet)["instances"] if i["host"] == host]


def test_one_unplannable_host_keeps_its_instances_while_the_others_deploy(fleet):
    run(fleet, write_inventory(fleet, "hosts.yml"))
    before = dict((h, recorded(fleet, h)) for h in (H100, RTX, A6000))
    assert all(before.values())

    # tp 16 fits none of the rtx4090's 8 GPUs: the others are planned again and deployed
    out = run(fleet, write_inventory(fleet, "tp16.yml", host_vars({RTX: {"gpufleet_tp_size": 16}})), rc=2)
    assert recorded(fleet, RTX) == before[RTX]
    assert recorded(fleet, H100) == before[H100] and recorded(fleet, A6000) == before[A6000]
    assert "planned again: %s, %s" % (A6000, H100) in out
    expected = sorted((i["host"] + "-" + i["name"], str(i["port"])) for i in record(fleet)["instances"])
    assert routed(fleet) == expected
    assert any(name.startswith(RTX + "-") for name, _port in expected)
    assert "deployed: %s:" % A6000 in out and "deployed: %s:" % H100 in out
    assert re.search(r"unplannable: %s: tp_size 16 \S.*?; it keeps its recorded instances vllm-0 :8000" % RTX, out)
    # the run fails at its end for the rtx4090 alone: its own recap line says failed, no other host's
    assert re.search(r"fatal: \[%s\]: FAILED! => changed: false msg: 'could not be planned: tp_size 16 \S.*?; it keeps "
                     r"its recorded instances vllm-0 :8000, vllm-1 :8001'" % RTX, out), out[-3000:]
    assert out.count("FAILED!") == 1
    assert failed_in_recap(out) == {RTX: 1, H100: 0, A6000: 0, "demo-gateway": 0}
    # the failure comes at the end: after the gateway play
    assert out.index("Configure the load balancer") < out.index("could not be planned: tp_size 16")


def failed_in_recap(out):
    """host -> its failed= count in the PLAY RECAP."""
    recap = out[out.rindex("PLAY RECAP"):]
    found = re.findall(r"(\S+) : ok=\d+ changed=\d+ unreachable=\d+ failed=(\d+)", recap)
    return dict((host, int(count)) for host, count in found)


def test_a_first_run_fails_the_unplannable_host_alone_and_says_it_has_nothing_recorded(tmp_path):
    """Before its first deploy the host has no recorded instances: it is not
    said to keep any; the recap says failed of it, not of the first host."""
    fresh = demo_copy(tmp_path)
    out = run(fresh, write_inventory(fresh, "tp16.yml", host_vars({RTX: {"gpufleet_tp_size": 16}})), rc=2)
    assert recorded(fresh, RTX) == [] and recorded(fresh, H100) and recorded(fresh, A6000)
    assert re.search(r"unplannable: %s: tp_size 16 \S.*?; it has no recorded instances: nothing was deployed on it"
                     % RTX, out)
    assert re.search(r"fatal: \[%s\]: FAILED! => changed: false msg: 'could not be planned: tp_size 16 \S.*?; it has "
                     r"no recorded instances: nothing was deployed on it'" % RTX, out), out[-3000:]
    assert "keep their recorded instances" not in out and "keeps its recorded instances" not in out
    assert failed_in_recap(out) == {RTX: 1, H100: 0, A6000: 0, "demo-gateway": 0}
