# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The deploy with its record in etcd (gpufleet_state_backend: etcd,
docs/state.md): the real playbook on the demo fleet against a real
three-member etcd cluster on loopback (etcd_cluster.py), one cluster for
the module and four playbook runs in all.

The first deploy rolls one host at a time and the cluster's leader (the
member the run talks to first) is killed with SIGKILL as soon as the
first batch was recorded: the deploy succeeds, the later batches' writes
land on the remaining members, each of which holds the whole record and
the same history, and no plan file is written beside the inventory. A
second run on the two members left changes nothing. Two deploys at once
(each limited to one GPU host and the gateway) end with one refused before
it changed anything, or, had they not overlapped, both hosts recorded.
Without playbooks: the keeper process renews the lock's lease past its
TTL while the run lives and frees the lock once the run is gone, and a run
whose lock was lost is told so by plan_record and writes nothing.
"""

import json
import os
import re
import signal
import subprocess
import time
import types

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.gpufleet.numa.plugins.action import plan_record
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock, etcd_record, keepalive, lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state import store as state_store
from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    A6000, ANSIBLE_PLAYBOOK, H100, REPO, RTX, demo_copy, routed, run_playbook, write_inventory)

from etcd_cluster import NEEDS_ETCD, cluster_of
from fleet_processes import wait_until

pytestmark = NEEDS_ETCD

PREFIX = "/gpufleet/deploy/"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from cluster_of(tmp_path_factory)


def _store_vars(endpoints):
    """The controller's store variables, given with -e (JSON: a list and numbers)."""
    return json.dumps({"gpufleet_state_backend": "etcd", "gpufleet_etcd_endpoints": endpoints,
                       "gpufleet_etcd_prefix": PREFIX, "gpufleet_etcd_timeout": 2,
                       "gpufleet_etcd_retry_seconds": 20})


def _start(fleet, inventory, *args):
    env = dict(os.environ, GPUFLEET_REPO=str(REPO), GPUFLEET_STAGING=str(fleet["staging"]),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.Popen([ANSIBLE_PLAYBOOK, os.path.join(REPO, "playbooks", "deploy_inference.yml"),
                             "-i", str(inventory), *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _folded(proc):
    return " ".join(proc.communicate(timeout=900)[0].split())


def _member(cluster, name):
    """What member `name` holds itself (serializable reads: its own copy, not the leader's):
    {record: key-value or None, lock: key-value or None, history: [key-values]}."""
    client = ec.Client(dict(cluster.settings(PREFIX), endpoints=[cluster.clients[name]], retry_seconds=5))

    def kvs(key, end=None):
        body = {"key": ec.b64(key), "serializable": True}
        if end is not None:
            body.update(range_end=ec.b64(end), sort_order="ASCEND", sort_target="KEY")
        return [ec.decode_kv(kv) for kv in client.call("/v3/kv/range", body).get("kvs") or []]
    history = ec.history_prefix(PREFIX)
    return {"record": (kvs(ec.record_key(PREFIX)) or [None])[0], "lock": (kvs(ec.lock_key(PREFIX)) or [None])[0],
            "history": kvs(history, ec.prefix_end(history))}


def _instances(kv, host):
    return [i for i in json.loads(kv["value"])["instances"] if i["host"] == host]


def _changed(out):
    return [int(n) for n in re.findall(r"changed=(\d+)", out)]


@pytest.fixture(scope="module")
def first(cluster, tmp_path_factory):
    """The first deploy, one host per batch, the leader killed with SIGKILL once the first batch was recorded."""
    fleet = demo_copy(tmp_path_factory.mktemp("fleet"))
    inventory = write_inventory(fleet, "hosts.yml")
    leader = cluster.leader()
    endpoints = cluster.endpoints(first=leader)
    started = time.monotonic()
    proc = _start(fleet, inventory, "-e", _store_vars(endpoints), "-e", "gpufleet_rollout_hosts_at_once=1")
    watch = ec.Client(cluster.settings(PREFIX))
    recorded = wait_until(lambda: proc.poll() is not None or watch.get(ec.record_key(PREFIX)), 600,
                          what="the first batch recorded")
    assert proc.poll() is None, "the deploy ended before its first batch was seen recorded"
    cluster.group.signal(leader, signal.SIGKILL)
    out = _folded(proc)
    return types.SimpleNamespace(fleet=fleet, inventory=inventory, leader=leader, endpoints=endpoints, out=out,
                                 rc=proc.returncode, killed_at=recorded["mod_revision"],
                                 seconds=time.monotonic() - started)


def test_the_first_deploy_keeps_its_record_in_etcd_and_a_member_killed_loses_nothing(cluster, first):
    assert first.rc == 0, first.out[-5000:]
    print("first deploy, a member killed: %.1f s" % first.seconds)
    assert cluster.group.processes[first.leader][0].wait(10) == -signal.SIGKILL
    location = "etcd %srecord at %s" % (PREFIX, ", ".join(first.endpoints))
    assert "kept as recorded in %s" % location in first.out
    # Nothing beside the inventory: no plan file, no lock file.
    assert not [p.name for p in first.fleet["staging"].iterdir() if p.name.startswith("gpufleet-plan")]
    assert {s.split("-vllm-")[0] for s, dummy in routed(first.fleet)} == {A6000, H100, RTX}
    left = [name for name in cluster.names if name != first.leader]
    members = [_member(cluster, name) for name in left]
    one = members[0]
    # Each remaining member holds the same whole record, the same history, and no lock (freed at the end).
    for member in members:
        assert member["lock"] is None
        assert member["record"]["value"] == one["record"]["value"]
        assert member["record"]["mod_revision"] == one["record"]["mod_revision"]
        assert [(h["key"], h["value"], h["mod_revision"]) for h in member["history"]] == [
            (h["key"], h["value"], h["mod_revision"]) for h in one["history"]]
    assert sorted(json.loads(one["record"]["value"])["hosts"]) == sorted([A6000, H100, RTX])
    for host in (A6000, H100, RTX):
        assert len(_instances(one["record"], host)) == 2
    # One history entry per batch, the newest the record; written before and after the kill.
    revisions = [h["mod_revision"] for h in one["history"]]
    assert len(revisions) == 3 and revisions == sorted(revisions), revisions
    assert one["history"][-1]["value"] == one["record"]["value"]
    assert revisions[0] <= first.killed_at < revisions[-1] == one["record"]["mod_revision"]


def test_a_second_run_on_the_members_left_changes_nothing(cluster, first):
    before = _member(cluster, [n for n in cluster.names if n != first.leader][0])
    out = run_playbook(first.fleet, "deploy_inference.yml", first.inventory, "-e", _store_vars(first.endpoints))
    assert _changed(out) and set(_changed(out)) == {0}, out[-3000:]
    after = _member(cluster, [n for n in cluster.names if n != first.leader][0])
    assert after["record"]["mod_revision"] == before["record"]["mod_revision"]
    assert len(after["history"]) == len(before["history"]) and after["lock"] is None


def test_two_deploys_at_once_record_both_or_refuse_one_before_it_changed_anything(cluster, first):
    fleet = first.fleet

    def tp2(groups):
        for host in (H100, RTX):
            groups["gpu_servers"]["hosts"][host]["gpufleet_tp_size"] = 2
    changed = write_inventory(fleet, "tp2.yml", tp2)
    runs = dict((host, _start(fleet, changed, "-l", host + ",gateways", "-e", _store_vars(first.endpoints)))
                for host in (H100, RTX))
    outs = dict((host, _folded(proc)) for host, proc in runs.items())
    codes = dict((host, proc.returncode) for host, proc in runs.items())
    record = _member(cluster, [n for n in cluster.names if n != first.leader][0])
    assert record["lock"] is None
    servers = [name for name, dummy in routed(fleet)]
    if sorted(codes.values()) == [0, 2]:
        winner, loser = sorted(codes, key=codes.get)
        print("two deploys at once: %s deployed, %s refused" % (winner, loser))
        refused = outs[loser]
        assert "the record %srecord in etcd (%s) is locked by another run: " % (PREFIX, ", ".join(first.endpoints)) \
            in refused, refused[-3000:]
        assert "deploy_inference.yml -i %s -l %s,gateways" % (changed, winner) in refused
        assert "Propose a plan" not in refused  # stopped in the first play, before the record was read
        assert len(_instances(record["record"], winner)) == 4 and len(_instances(record["record"], loser)) == 2
        assert ["%s-vllm-%d" % (winner, n) for n in range(4)] == [s for s in servers if s.startswith(winner)]
        assert ["%s-vllm-%d" % (loser, n) for n in range(2)] == [s for s in servers if s.startswith(loser)]
    else:  # they did not overlap: both deployed, one after the other
        assert list(codes.values()) == [0, 0], outs
        print("two deploys at once: they did not overlap, both deployed")
        for host in (H100, RTX):
            assert len(_instances(record["record"], host)) == 4
            assert ["%s-vllm-%d" % (host, n) for n in range(4)] == [s for s in servers if s.startswith(host)]


def _gone(pid):
    """No such process, or a zombie nobody reaped yet (the keeper's parent is init)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_keeper_holds_the_lease_while_the_run_lives_and_frees_the_lock_once_it_is_gone(cluster):
    run = subprocess.Popen(["sleep", "300"])  # stands in for the run's ansible-playbook process
    try:
        wait_until(lambda: lock.process_start(run.pid), 10, what="the run's process")
        me = lock.this_run(run.pid)
        keepers = []
        store = state_store.EtcdStore(cluster.settings("/gpufleet/keeper/"), ttl=6,
                                      keeper=lambda *args: keepers.append(keepalive.start(*args)))
        assert store.acquire(0, me=me)["locked"] and len(keepers) == 1
        store.acquire(0, me=me)  # the same run again (an imported playbook): no second keeper
        assert len(keepers) == 1
        time.sleep(7)  # past the lease's 6 s: renewed every 2 s
        assert store.held(me)["pid"] == run.pid
        run.kill()
        run.wait()
        killed = time.monotonic()
        wait_until(lambda: store.store.client.get(ec.lock_key("/gpufleet/keeper/")) is None, 10,
                   what="the lock freed")
        # Freed by the keeper: the lease alone would have lasted 4 s more at least.
        assert time.monotonic() - killed < 3.5
        wait_until(lambda: _gone(keepers[0]), 5, what="the keeper's end")
    finally:
        run.kill()
        run.wait()


def _action(settings, state, **more):
    task = types.SimpleNamespace(args=dict(store=settings, state=state, **more), async_val=0, check_mode=False,
                                 action="gpufleet.numa.plan_record")
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/nonexistent"))
    action = plan_record.ActionModule(task, connection, None, None, None)
    return action.run(task_vars={})


def test_a_run_whose_lock_was_lost_is_told_so_and_writes_nothing(cluster):
    settings = state_store.settings({"gpufleet_state_backend": "etcd", "gpufleet_etcd_endpoints": cluster.endpoints(),
                                     "gpufleet_etcd_prefix": "/gpufleet/lost/", "gpufleet_etcd_timeout": 2})
    assert _action(settings, "locked")["locked"] is True
    store = etcd_lock.Store(ec.Client(settings["etcd"]))
    store.client.txn([], [ec.delete(ec.lock_key(store.prefix))])  # its lease ran out, or a hand deleted it
    with pytest.raises(AnsibleActionFail) as err:
        _action(settings, "written", record={"artifact_version": 1})
    assert str(err.value).startswith(
        "gpufleet.numa.plan_record: this run does not hold the lock of the record /gpufleet/lost/record in etcd "
        "(%s) (it is free: its lease ran out, or another run freed it): another run may have written the record "
        "since this one read it, so nothing was written; run again" % ", ".join(cluster.endpoints())), str(err.value)
    assert etcd_record.read_bytes(store) is None
    assert _action(settings, "unlocked")["released"] is False
