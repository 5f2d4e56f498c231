# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""One run at a time on a record kept in etcd (docs/state.md): the lock is
the key <prefix>lock, holding the holder entry of state/lock.py (host,
boot, pid and its start time, user, command, since, revision) and attached
to an etcd lease of `ttl` seconds.

A lease ends when nobody renews it for `ttl` seconds, and etcd then deletes
the lock key itself: a holder that died anywhere (a crash, a controller
that lost its network) frees the lock by itself, `ttl` seconds later (a
new leader of the cluster gives each lease an election's length more). So a live run renews it: keep_alive() before the lease runs out
(every plan_record call and every write does; a play longer than `ttl`
without one loses the lock, and its next write is refused). Nothing is
kept in the process: each call finds the run's lease on the lock key, so
the forked workers of one ansible-playbook run (one holder: its pid) can
each renew, write and release.

A holder on this controller that is certainly gone (lock.is_dead) is taken
over at once, as with the file lock. Taking the lock is one txn that puts
the key only while it does not exist (create_revision == 0); every write
of the record compares the key's lease with the run's (state/etcd_record.py).
Controller only; standard library only.
"""

from __future__ import annotations

import json
import time

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock

DEFAULT_TTL = 30
MIN_TTL = 2
MAX_TTL = 3600


class Store(object):
    """A client (etcd_client.Client) and the key prefix the record lives under."""

    def __init__(self, client, prefix=None):
        self.client = client
        self.prefix = client.settings["prefix"] if prefix is None else prefix
        checks.text("prefix", self.prefix, ec.PREFIX_PATTERN, ec.PREFIX_RULE, max_length=512)

    def where(self):
        return "the record %s in etcd (%s)" % (ec.record_key(self.prefix), ", ".join(self.client.settings["endpoints"]))


def check_ttl(name, value):
    return checks.integer(name, value, MIN_TTL, MAX_TTL)


def parse_holder(kv, key):
    """The holder entry of the lock's key-value; None when free. LockError
    for a value this collection did not write."""
    if kv is None:
        return None
    try:
        holder = json.loads(kv["value"].decode("utf-8"))
    except ValueError:
        holder = None
    if not isinstance(holder, dict) or not set(lock.HOLDER_FIELDS) <= set(holder):
        raise lock.LockError("etcd key %s does not hold a lock this collection wrote: look at it (etcdctl get %s), "
                             "and delete it once no run uses the record" % (key, key))
    return holder


def encode_holder(holder):
    return json.dumps(holder, sort_keys=True)


def read(store):
    """(holder or None, the lock's key-value or None)."""
    key = ec.lock_key(store.prefix)
    kv = store.client.get(key)
    return parse_holder(kv, key), kv


def not_ours(store, holder, kv, me):
    """The LockError for a run that does not hold the lock (it is free, another's, or was never leased)."""
    state = "it is free: its lease ran out, or another run freed it" if holder is None else \
        "held by " + lock.describe(holder)
    if holder is not None and lock.same_run(holder, me) and not kv["lease"]:
        state = "its key has no lease"
    return lock.LockError("this run does not hold the lock of %s (%s): another run may have written the record "
                          "since this one read it, so nothing was written; run again" % (store.where(), state))


def ours(store, me=None):
    """(holder, lease id) when `me` holds the lock; LockError otherwise."""
    me = lock.this_run() if me is None else me
    holder, kv = read(store)
    if holder is None or not lock.same_run(holder, me) or not kv["lease"]:
        raise not_ours(store, holder, kv, me)
    return holder, kv["lease"]


def _take(store, me, ttl, seen):
    """One try to put our holder entry on the lock key: it must still be
    as `seen` (absent, or a dead holder's at its mod_revision). The holder
    entry keeps the record's revision, compared in the same txn. The
    holder entry, or None when another run was quicker."""
    rec = store.client.get(ec.record_key(store.prefix))
    lease, dummy = store.client.grant(ttl)
    mine = dict(me, revision=ec.revision_of(rec))
    key = ec.lock_key(store.prefix)
    compares = [ec.compare(key, "MOD", seen["mod_revision"]) if seen else ec.compare(key, "CREATE", 0),
                ec.compare(ec.record_key(store.prefix), "MOD", rec["mod_revision"]) if rec else
                ec.compare(ec.record_key(store.prefix), "CREATE", 0)]
    succeeded, dummy = store.client.txn(compares, [ec.put(key, encode_holder(mine), lease)])
    if not succeeded:
        store.client.revoke(lease)
        return None
    if seen and seen["lease"]:
        store.client.revoke(seen["lease"])  # the dead holder's: nothing else is on it
    return mine


def _again(store, holder, kv):
    """The same run takes the lock again (an imported playbook, another
    worker): its lease renewed, the holder entry as it is."""
    if not kv["lease"] or store.client.keepalive(kv["lease"]) == 0:
        return None
    return holder


def acquire(store, timeout=0, ttl=DEFAULT_TTL, me=None, clock=time.monotonic, sleep=time.sleep, waiting=None):
    """Take the lock of `store` for the run `me` (lock.this_run() by default),
    leased for `ttl` seconds: the same contract as lock.acquire. Waits up to
    `timeout` seconds for a live holder (waiting(holder) is told once, when
    the wait starts; 0: no wait), then raises LockError naming it. Returns
    {holder, took_over, ttl}: took_over is the dead holder's entry whose
    lock was taken (one on this controller; a holder elsewhere frees the
    lock by itself when its lease runs out), or None."""
    me = lock.this_run() if me is None else me
    ttl = check_ttl("the lock's ttl", ttl)
    timeout = lock.check_timeout("gpufleet_lock_timeout", timeout)
    deadline = clock() + timeout
    told, lost = False, 0
    while True:
        holder, kv = read(store)
        mine, took_over = None, None
        if holder is None:
            mine = _take(store, me, ttl, None)
        elif lock.same_run(holder, me):
            mine = _again(store, holder, kv)
        elif lock.is_dead(holder, me):
            mine = _take(store, me, ttl, kv)
            took_over = holder
        if mine is not None:
            return {"holder": mine, "took_over": took_over, "ttl": ttl}
        if holder is None or took_over is not None or lock.same_run(holder, me):
            # Another run (or a write) was quicker, or this run's lease ended: look again while the wait allows.
            lost += 1
            if lost > 2 and clock() >= deadline:
                raise lock.LockError("the lock of %s changed under each of this run's %d tries to take it (another "
                                     "run, or writes to the record without the lock); nothing was changed, run again"
                                     % (store.where(), lost))
            if lost > 2:
                sleep(lock.POLL_SECONDS)
            continue
        if clock() >= deadline:
            raise lock.LockError(
                "%s is locked by another run: %s. Wait for it to finish (or give gpufleet_lock_timeout, in seconds, "
                "to wait here); a run that died frees it by itself when its lease runs out%s"
                % (store.where(), lock.describe(holder), _lease_ttl(store, kv)))
        if waiting is not None and not told:
            waiting(holder)
            told = True
        sleep(lock.POLL_SECONDS)


def _lease_ttl(store, kv):
    """' (N s after its last renewal)': the TTL the holder's lease
    was granted with; '' when etcd does not say."""
    try:
        answer = store.client.call("/v3/lease/timetolive", {"ID": str(kv["lease"])})
    except ec.EtcdError:
        return ""
    granted = int(answer.get("grantedTTL") or 0)
    return " (%d s after its last renewal)" % granted if granted > 0 else ""


def keep_alive(store, me=None):
    """Renew the run's lease: the seconds the lock is now held for without
    another renewal. LockError when the run no longer holds it."""
    holder, lease = ours(store, me)
    left = store.client.keepalive(lease)
    if left <= 0:
        raise not_ours(store, None, None, lock.this_run() if me is None else me)
    return left


def held(store, me=None):
    """The lock's holder entry when `me` holds it; LockError otherwise."""
    return ours(store, me)[0]


def release(store, me=None):
    """Free the lock if `me` holds it (delete the key only while it is on
    the run's lease, then end the lease). True when it was ours."""
    me = lock.this_run() if me is None else me
    holder, kv = read(store)
    if holder is None or not lock.same_run(holder, me) or not kv["lease"]:
        return False
    key = ec.lock_key(store.prefix)
    succeeded, dummy = store.client.txn([ec.compare(key, "LEASE", kv["lease"])], [ec.delete(key)])
    store.client.revoke(kv["lease"])
    return succeeded
