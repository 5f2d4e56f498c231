# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The keeper of a run's etcd lease (state/keepalive.py), its loop on a
small stand-in cluster with a clock of its own: it renews every third of
the lease while the run lives, frees the lock once the run is gone, and
exits once the lock is no longer on its lease (tests/system/test_state_backend_etcd.py
runs the real process against a real cluster)."""

from __future__ import annotations

import io
import json
import os

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock, keepalive, lock

PREFIX = "/gpufleet/demo/"
HOLDER = dict(lock.this_run(), revision="absent")


class Cluster(object):
    """The lock key on lease 7; keepalive answers the lease's TTL while it lives."""

    settings = {"endpoints": ["http://127.0.0.1:1"], "prefix": PREFIX}

    def __init__(self):
        self.lease, self.renewals, self.revoked, self.failing = 7, [], [], 0

    def get(self, key):
        assert key == ec.lock_key(PREFIX)
        if self.lease is None:
            return None
        return {"value": etcd_lock.encode_holder(HOLDER).encode(), "lease": self.lease, "mod_revision": 3}

    def keepalive(self, lease):
        if self.failing:
            self.failing -= 1
            raise ec.EtcdError("no etcd member served /v3/lease/keepalive")
        self.renewals.append(lease)
        return 30 if lease == self.lease else 0

    def txn(self, compares, success, failure=()):
        self.lease = None
        return True, {}

    def revoke(self, lease):
        self.revoked.append(lease)
        return True


class Clock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def keep(cluster, run_ends=None, every=10):
    """Why the keeper stopped, and when; the run ends at `run_ends` seconds (None: never)."""
    clock = Clock()
    store = etcd_lock.Store(cluster, PREFIX)
    why = keepalive.keep(store, 7, HOLDER, every, alive=lambda: run_ends is None or clock.now < run_ends,
                         clock=clock, sleep=clock.sleep)
    return why, clock.now


def test_it_renews_every_third_of_the_lease_while_the_run_lives_then_frees_the_lock():
    assert keepalive.interval(30) == 10 and keepalive.interval(2) == 1
    cluster = Cluster()
    why, when = keep(cluster, run_ends=35)
    assert why == "the run ended: lock freed" and cluster.lease is None and cluster.revoked == [7]
    assert cluster.renewals == [7, 7, 7] and when == 35


def test_it_exits_once_the_lock_is_on_another_lease_or_its_lease_ended():
    cluster = Cluster()
    cluster.lease = 8  # the run took the lock again, on a new lease with its own keeper
    assert keep(cluster) == ("the lock is no longer on lease 7", 10)
    assert cluster.renewals == [] and cluster.revoked == []
    cluster.lease = None  # freed by the run, or lost
    assert keep(cluster)[0] == "the lock is no longer on lease 7"


def test_a_renewal_no_member_answered_is_tried_again_a_second_later():
    cluster = Cluster()
    cluster.failing = 2
    why, dummy = keep(cluster, run_ends=20)
    assert why == "the run ended: lock freed" and cluster.renewals == [7]  # at 12 s, after two failures


def test_it_finds_the_collections_tree_it_was_loaded_from():
    root = keepalive.collections_root()
    assert os.path.isfile(os.path.join(root, "ansible_collections", "gpufleet", "numa", "plugins", "module_utils",
                                       "state", "keepalive.py"))
    assert keepalive.collections_root("ansible.module_utils.keepalive", keepalive.__file__) is None


def test_a_keeper_whose_lease_ended_says_so_and_does_not_start(monkeypatch, capsys):
    cluster = Cluster()
    cluster.lease = 8
    monkeypatch.setattr(ec, "Client", lambda settings: cluster)
    stdin = io.StringIO(json.dumps({"settings": cluster.settings, "lease": 7, "holder": HOLDER, "interval": 10}))
    assert keepalive.main(stdin) == 1
    assert capsys.readouterr().out == "lease 7 has ended already\n"  # what start() then reports
