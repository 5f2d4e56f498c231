# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""One run at a time on the record (docs/plan.md, "One run at a time"),
with the real playbooks on the demo fleet.

Two deploys started a second apart, each limited to one GPU host and the
gateway and each changing its host from tp 4 to tp 2: before the lock,
both ended rc 0 and the one that wrote last won (the record and HAProxy
lost the other's host). Now the second waits for the first, and the
record and the gateway hold both hosts' new instances. A live holder
stops a run before anything changes, naming it; a dead holder's lock is
taken over.
"""

import os
import socket
import subprocess
import time

from fleet_processes import wait_until

from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock
from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    ANSIBLE_PLAYBOOK, H100, REPO, RTX, demo_copy, record, routed, run_playbook as run, write_inventory)


def _start(fleet, inventory, *args):
    env = dict(os.environ, GPUFLEET_REPO=str(REPO), GPUFLEET_STAGING=str(fleet["staging"]),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.Popen([ANSIBLE_PLAYBOOK, os.path.join(REPO, "playbooks", "deploy_inference.yml"),
                             "-i", str(inventory), *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _instances(fleet, host):
    return [i for i in record(fleet)["instances"] if i["host"] == host]


def test_two_deploys_at_once_lose_nothing(tmp_path):
    fleet = demo_copy(tmp_path)
    run(fleet, "deploy_inference.yml", write_inventory(fleet, "hosts.yml"))
    assert len(_instances(fleet, H100)) == 2 and len(_instances(fleet, RTX)) == 2

    def tp2(groups):
        for host in (H100, RTX):
            groups["gpu_servers"]["hosts"][host]["gpufleet_tp_size"] = 2
    changed = write_inventory(fleet, "tp2.yml", tp2)
    first = _start(fleet, changed, "-l", H100 + ",gateways", "-e", "gpufleet_lock_timeout=600")
    time.sleep(1)
    second = _start(fleet, changed, "-l", RTX + ",gateways", "-e", "gpufleet_lock_timeout=600")
    outs = [" ".join(p.communicate(timeout=900)[0].split()) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    # They overlapped: one of them waited for the other's lock, naming it.
    waited = [out for out in outs if "waiting up to 600 s for the lock of %s" % (fleet["staging"] / "gpufleet-plan.json")
              in out]
    assert len(waited) == 1, outs
    assert "deploy_inference.yml" in waited[0], waited[0][waited[0].index("waiting up to"):][:600]
    # Both hosts' updates are in the record and in HAProxy.
    assert [len(i["gpu_indices"]) for i in _instances(fleet, H100)] == [2, 2, 2, 2]
    assert [len(i["gpu_indices"]) for i in _instances(fleet, RTX)] == [2, 2, 2, 2]
    servers = [name for name, _port in routed(fleet)]
    for host in (H100, RTX):
        assert ["%s-vllm-%d" % (host, n) for n in range(4)] == [s for s in servers if s.startswith(host)]
    assert (fleet["staging"] / "gpufleet-plan.json.lock").read_text() == ""  # freed


def _holder(pid):
    return dict(lock.this_run(pid), revision="absent")


def _started(argv):
    """A process running ARGV, once it has exec'd (until then its
    /proc/PID/cmdline is not yet ARGV, and a lock naming it would name no
    command: a race the loaded suite lost once)."""
    process = subprocess.Popen(argv)

    def running():
        with open("/proc/%d/cmdline" % process.pid, "rb") as handle:
            return handle.read().split(b"\0")[:-1] == [a.encode() for a in argv]

    wait_until(running, 30, interval=0.05, what="%s to start" % argv)
    return process


def test_a_live_holder_stops_the_run_before_anything_changes_and_a_dead_one_is_taken_over(tmp_path):
    fleet = demo_copy(tmp_path)
    inventory = write_inventory(fleet, "hosts.yml")
    run(fleet, "deploy_inference.yml", inventory)
    plan = fleet["staging"] / "gpufleet-plan.json"
    before = plan.read_bytes()
    config = fleet["staging"] / "demo-gateway" / "etc" / "haproxy" / "haproxy.cfg"
    config_before = config.stat().st_mtime_ns
    holder = _started(["sleep", "300"])
    try:
        with open(lock.lock_path(str(plan)), "w") as handle:
            handle.write(__import__("json").dumps(_holder(holder.pid)))
        out = run(fleet, "deploy_inference.yml", inventory, "-e", "gpufleet_tp_size=2", rc=2)
        assert ("the record %s is locked by another run: root@%s pid %d (sleep 300)"
                % (plan, socket.gethostname(), holder.pid)) in out, out[-3000:]
        assert "gpufleet_lock_timeout" in out
        assert plan.read_bytes() == before and config.stat().st_mtime_ns == config_before
        assert "Propose a plan" not in out  # stopped before the record was read
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone: its lock is taken over, said so, and the run deploys.
    out = run(fleet, "deploy_inference.yml", inventory, "-e", "gpufleet_tp_size=2")
    assert "was held by a run that is gone (root@%s pid %d (sleep 300)" % (socket.gethostname(), holder.pid) in out
    assert [len(i["gpu_indices"]) for i in _instances(fleet, H100)] == [2, 2, 2, 2]


def test_a_bad_lock_timeout_is_refused_with_the_fleets_variables(tmp_path):
    fleet = demo_copy(tmp_path)
    out = run(fleet, "deploy_inference.yml", write_inventory(fleet, "hosts.yml"), "--tags", "plan",
              "-e", "gpufleet_lock_timeout=forever", rc=2)
    assert "gpufleet_lock_timeout: must be an integer (got 'forever')" in out, out[-2000:]
    assert not (fleet["staging"] / "gpufleet-plan.json.lock").exists()
