# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The record kept in etcd (docs/state.md): the key <prefix>record, its
revision "etcd:<mod_revision>" ("absent" before the first write), and the
last `keep` records written under <prefix>history/<sequence>, so a record
can be gone back to.

write() is one txn: it compares the record's mod_revision with the one the
run started from (create_revision == 0 for "absent"), the lock key's lease
with the run's (state/etcd_lock.py) and the next history key's absence,
then puts the record and its history entry and deletes the entries past
`keep`. Both puts land at one etcd revision, so a history entry's
mod_revision is the record revision it holds. A compare that fails writes
nothing: RecordChanged (state/record.py) or LockError (state/lock.py) says
what changed. A txn sent again because its member died after it was sent
finds its own history entry and counts as written. Controller only;
standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state.record import RecordChanged

DEFAULT_KEEP = 10
MAX_KEEP = 1000
# etcd's default request limit is 1.5 MiB; a txn carries the record twice.
MAX_RECORD_BYTES = 640 * 1024


def check_keep(name, value):
    return checks.integer(name, value, 1, MAX_KEEP)


def plan_history(sequences, keep):
    """(the next history sequence, the first sequence to keep or None) for
    the history entries `sequences` once one more is written: the newest
    `keep` stay, counting the new one."""
    ordered = sorted(sequences)
    following = (ordered[-1] + 1) if ordered else 1
    kept = ordered[max(0, len(ordered) - (keep - 1)):] if keep > 1 else []
    first = kept[0] if kept else following
    return following, (first if ordered and first > ordered[0] else None)


def revision(store):
    """The record's revision now."""
    return ec.revision_of(store.client.get(ec.record_key(store.prefix)))


def read_bytes(store):
    """The record's bytes, None when absent."""
    kv = store.client.get(ec.record_key(store.prefix))
    return None if kv is None else kv["value"]


def _changed(store, expected, kv):
    return RecordChanged(
        "%s changed since this run read it (it was %s, it is %s now): another run or a hand edit wrote it, and "
        "this run's update would lose that one. Nothing was written; run again to plan from the record as it is "
        "now" % (store.where(), expected, ec.revision_of(kv)))


def require(store, expected):
    """The record's key-value (None when absent) when it is at revision `expected`; RecordChanged otherwise."""
    ec.mod_revision("the expected revision", expected)
    kv = store.client.get(ec.record_key(store.prefix))
    if ec.revision_of(kv) != expected:
        raise _changed(store, expected, kv)
    return kv


def write(store, text, expected, keep=DEFAULT_KEEP, me=None):
    """Replace the record with `text` when it is still at revision
    `expected` and the run `me` holds the lock. Returns (new revision,
    changed); RecordChanged or LockError otherwise, with nothing written."""
    me = lock.this_run() if me is None else me
    keep = check_keep("the history's length", keep)
    data = text.encode("utf-8")
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError("the record is %d bytes; the etcd store keeps at most %d" % (len(data), MAX_RECORD_BYTES))
    holder, lease = etcd_lock.ours(store, me)
    current = require(store, expected)
    if current is not None and current["value"] == data:
        return expected, False
    prefix = store.prefix
    sequences = [s for s in (ec.history_sequence(prefix, kv["key"])
                             for kv in store.client.range(ec.history_prefix(prefix), keys_only=True)) if s is not None]
    following, first_kept = plan_history(sequences, keep)
    entry = ec.history_key(prefix, following)
    record, lock_key = ec.record_key(prefix), ec.lock_key(prefix)
    compares = [ec.compare(record, "MOD", current["mod_revision"]) if current else ec.compare(record, "CREATE", 0),
                ec.compare(lock_key, "LEASE", lease), ec.compare(entry, "CREATE", 0)]
    success = [ec.put(record, data), ec.put(entry, data)]
    if first_kept is not None:
        success.append(ec.delete(ec.history_prefix(prefix), ec.history_key(prefix, first_kept)))
    succeeded, answer = store.client.txn(compares, success, [ec.get(record), ec.get(lock_key), ec.get(entry)])
    if succeeded:
        new = "%s%d" % (ec.REVISION_PREFIX, int(answer["header"]["revision"]))
    else:
        new = _refused(store, expected, data, lease, me, ec.responses(answer))
    _note(store, holder, lease, new)
    return new, True


def _refused(store, expected, data, lease, me, found):
    """Why the txn's compares failed, raised; or the new revision when the
    txn had landed already (sent again after its member died)."""
    record, lock_kv, entry = found
    if entry is not None and record is not None and entry["value"] == data \
            and entry["mod_revision"] == record["mod_revision"]:
        return ec.revision_of(record)
    holder = etcd_lock.parse_holder(lock_kv, ec.lock_key(store.prefix))
    if lock_kv is None or lock_kv["lease"] != lease:
        raise etcd_lock.not_ours(store, holder, lock_kv, me)
    if ec.revision_of(record) != expected:
        raise _changed(store, expected, record)
    raise ValueError("%s: history entry %s was written by another hand; nothing was written, run again"
                     % (store.where(), checks.printable(entry["key"].decode("utf-8", "replace"))))


def _note(store, holder, lease, new):
    """The lock keeps the revision this run wrote (as lock.advance does);
    a lock lost since is found by the next write."""
    key = ec.lock_key(store.prefix)
    store.client.txn([ec.compare(key, "LEASE", lease)], [ec.put(key, etcd_lock.encode_holder(
        dict(holder, revision=new)), lease)])


def advance(store, text, keep=DEFAULT_KEEP, me=None):
    """write() from the revision the lock keeps (lock.advance's contract): the new revision."""
    holder = etcd_lock.held(store, me)
    return write(store, text, holder["revision"], keep, me)[0]


def history(store):
    """The kept records, newest first: [{"revision", "sequence", "bytes"}]."""
    entries = []
    for kv in store.client.range(ec.history_prefix(store.prefix)):
        sequence = ec.history_sequence(store.prefix, kv["key"])
        if sequence is not None:
            entries.append({"revision": ec.revision_of(kv), "sequence": sequence, "bytes": len(kv["value"])})
    return sorted(entries, key=lambda entry: entry["sequence"], reverse=True)


def read_history(store, revision_wanted):
    """The record's bytes as written at `revision_wanted` (a revision history()
    lists); ValueError naming the kept ones otherwise."""
    wanted = ec.mod_revision("the revision to go back to", revision_wanted)
    kept = []
    for kv in store.client.range(ec.history_prefix(store.prefix)):
        if ec.history_sequence(store.prefix, kv["key"]) is not None:
            if kv["mod_revision"] == wanted:
                return kv["value"]
            kept.append(ec.revision_of(kv))
    raise ValueError("%s: revision %s is not kept (the kept ones: %s)"
                     % (store.where(), revision_wanted, ", ".join(kept) or "none"))
