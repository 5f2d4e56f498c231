# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The etcd lock's pure parts: the holder entry on the key, the lease's
length, and what a run that does not hold the lock is told
(tests/system/test_state_etcd.py takes and loses it on a real cluster)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock, lock


def _store(prefix=None):
    client = ec.Client({"endpoints": ["http://127.0.0.1:2379"], "prefix": "/gpufleet/demo/"})
    return etcd_lock.Store(client, prefix)


def test_the_holder_entry_goes_to_the_key_and_back():
    holder = dict(lock.this_run(), revision="etcd:3")
    kv = {"value": etcd_lock.encode_holder(holder).encode(), "lease": 9}
    assert etcd_lock.parse_holder(kv, "/k") == holder
    assert etcd_lock.parse_holder(None, "/k") is None


@pytest.mark.parametrize("value", [b"not json", b"[]", b'{"pid": 1}', b"\xff"])
def test_a_lock_key_this_collection_did_not_write_is_refused(value):
    with pytest.raises(lock.LockError, match="etcd key /g/lock does not hold a lock this collection wrote.*etcdctl get"):
        etcd_lock.parse_holder({"value": value, "lease": 0}, "/g/lock")


def test_the_lease_length_is_bounded():
    assert etcd_lock.check_ttl("ttl", "30") == 30
    for wrong in (0, 1, 3601, "x", True):
        with pytest.raises(ValueError, match="ttl: must"):
            etcd_lock.check_ttl("ttl", wrong)


def test_the_store_takes_the_prefix_of_its_settings_or_a_checked_one():
    assert _store().prefix == "/gpufleet/demo/" and _store("/other/").prefix == "/other/"
    with pytest.raises(ValueError, match="must be a key prefix"):
        _store("/no-slash")
    assert _store().where() == "the record /gpufleet/demo/record in etcd (http://127.0.0.1:2379)"


def test_a_run_without_the_lock_is_told_who_has_it():
    store, me = _store(), lock.this_run()
    free = str(etcd_lock.not_ours(store, None, None, me))
    assert free.startswith("this run does not hold the lock of the record /gpufleet/demo/record in etcd")
    assert "(it is free: its lease ran out, or another run freed it)" in free and "nothing was written" in free
    other = dict(me, pid=me["pid"] + 1, user="ana")
    assert "(held by ana@" in str(etcd_lock.not_ours(store, other, {"lease": 5}, me))
    assert "(its key has no lease)" in str(etcd_lock.not_ours(store, me, {"lease": 0}, me))


class RacedClient(object):
    """A cluster where every try to take the free lock loses (its txn fails)."""

    settings = {"endpoints": ["http://127.0.0.1:2379"], "prefix": "/g/f/"}

    def __init__(self):
        self.granted, self.revoked = 0, 0

    def get(self, key):
        return None

    def grant(self, ttl):
        self.granted += 1
        return self.granted, ttl

    def txn(self, compares, success, failure=()):
        return False, {}

    def revoke(self, lease):
        self.revoked += 1
        return True


def test_a_lock_that_changes_under_every_try_ends_the_wait_in_time():
    client = RacedClient()
    with pytest.raises(lock.LockError, match="changed under each of this run's 3 tries"):
        etcd_lock.acquire(etcd_lock.Store(client), timeout=0, sleep=lambda s: None)
    assert client.granted == client.revoked == 3  # no lease left behind
    now, slept = [0.0], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds
    with pytest.raises(lock.LockError, match="changed under each"):
        etcd_lock.acquire(etcd_lock.Store(RacedClient()), timeout=5, clock=lambda: now[0], sleep=sleep)
    assert 5 <= now[0] <= 5.5 and len(slept) == 10
