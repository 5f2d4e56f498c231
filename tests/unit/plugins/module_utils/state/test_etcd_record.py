# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The etcd record's pure parts: which history entries a write keeps, and
what a refused write says (tests/system/test_state_etcd.py writes to a
real cluster)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock, etcd_record, lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state.record import RecordChanged


@pytest.mark.parametrize("sequences, keep, planned", [
    ([], 10, (1, None)),
    ([1], 10, (2, None)),
    (list(range(1, 10)), 10, (10, None)),       # nine kept and the new one: ten
    (list(range(1, 11)), 10, (11, 2)),          # the eleventh write drops the first
    (list(range(1, 11)), 20, (11, None)),       # more room than entries
    ([3, 7, 5], 2, (8, 7)),                     # in any order, with gaps
    ([4, 5, 6], 1, (7, 7)),                     # only the new one stays
])
def test_a_write_keeps_the_newest_entries(sequences, keep, planned):
    assert etcd_record.plan_history(sequences, keep) == planned


def test_the_history_length_is_bounded():
    assert etcd_record.check_keep("keep", 10) == 10
    for wrong in (0, -1, 1001, "ten"):
        with pytest.raises(ValueError, match="keep: must"):
            etcd_record.check_keep("keep", wrong)


class NoClient(object):
    """A client that must never be called."""

    settings = {"endpoints": ["http://127.0.0.1:2379"], "prefix": "/g/f/"}

    def __getattr__(self, name):
        raise AssertionError("the cluster was asked (%s)" % name)


def _kv(key, value, mod_revision, lease=0):
    return {"key": key.encode(), "value": value, "mod_revision": mod_revision, "lease": lease, "create_revision": 1,
            "version": 1}


def test_a_record_too_large_or_a_wrong_revision_is_refused_before_the_cluster_is_asked():
    store = etcd_lock.Store(NoClient())
    with pytest.raises(ValueError, match="the etcd store keeps at most"):
        etcd_record.write(store, "x" * (etcd_record.MAX_RECORD_BYTES + 1), ec.ABSENT)
    with pytest.raises(ValueError, match="the expected revision: must be an etcd revision"):
        etcd_record.require(store, "sha256:abc")
    with pytest.raises(ValueError, match="the revision to go back to: must be an etcd revision"):
        etcd_record.read_history(store, "7")


def test_a_refused_write_says_what_changed_or_finds_its_own_entry():
    store, me = etcd_lock.Store(NoClient()), lock.this_run()
    mine = etcd_lock.encode_holder(dict(me, revision="etcd:5")).encode()
    holder_kv = _kv("/g/f/lock", mine, 6, lease=42)
    # Sent again after its member died: the first one landed.
    landed = [_kv("/g/f/record", b"new", 9), holder_kv, _kv(ec.history_key("/g/f/", 3), b"new", 9)]
    assert etcd_record._refused(store, "etcd:5", b"new", 42, me, landed) == "etcd:9"
    # Another's entry with other bytes is no proof.
    other = [_kv("/g/f/record", b"other", 9), holder_kv, _kv(ec.history_key("/g/f/", 3), b"other", 9)]
    with pytest.raises(RecordChanged, match="it was etcd:5, it is etcd:9 now"):
        etcd_record._refused(store, "etcd:5", b"new", 42, me, other)
    with pytest.raises(lock.LockError, match="does not hold the lock"):
        etcd_record._refused(store, "etcd:5", b"new", 43, me, [None, holder_kv, None])
    with pytest.raises(lock.LockError, match="it is free"):
        etcd_record._refused(store, "etcd:5", b"new", 42, me, [None, None, None])
    stray = [_kv("/g/f/record", b"old", 5), holder_kv, _kv(ec.history_key("/g/f/", 3), b"stray", 8)]
    with pytest.raises(ValueError, match="history entry /g/f/history/0+3 was written by another hand"):
        etcd_record._refused(store, "etcd:5", b"new", 42, me, stray)
