# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The one seam between a run and the store of its record (docs/state.md,
"Choosing the store"), chosen by one variable, gpufleet_state_backend.

Both stores answer the same calls, each with the contract of the file
store (state/lock.py, state/record.py), which FileStore only wraps:

    backend                 "file" or "etcd"
    location                where the record is, for messages: its path, or
                            "etcd <prefix>record at <endpoints>"
    read_text()             the record's text; "" when there is none yet
                            (what the kept_plan lookup returns)
    read_bytes()            the record's bytes; None when there is none yet
    revision()              the record's revision now ("absent" before
                            the first write)
    acquire(timeout, waiting=None)
                            the run's lock: {locked, revision, took_over}
                            (locked False, with msg, when the file store has
                            no record directory yet: its first write locks)
    renew()                 the run's lock kept: the seconds it holds without
                            another renewal (None: it needs none); LockError
                            when the run no longer holds it
    preview(text)           whether writing `text` would change the record,
                            checked against the lock and the revision (check
                            mode); nothing is written
    advance(text)           the record replaced under the run's lock, over
                            the revision it keeps: (new revision, changed)
    release()               the lock freed when the run holds it: True then
    held()                  the lock's holder entry; LockError when not ours
    describe(holder)        a holder entry in words

Every call takes `me`, the run (state/lock.this_run() by default). The
settings a store is opened with are what settings() makes from the
controller's variables, once per run (the fact __gpufleet_state); the
password is among them and is never part of a message. Controller only;
standard library only.
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common import secret_mask
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_record
from ansible_collections.gpufleet.numa.plugins.module_utils.state import keepalive
from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state import record

BACKENDS = ("file", "etcd")
BACKEND_VARIABLE = "gpufleet_state_backend"
TTL_VARIABLE = "gpufleet_etcd_lock_ttl"
# The controller's variables the store's settings come from, by setting.
ETCD_VARIABLES = dict(ec.NAMES)
VARIABLES = (BACKEND_VARIABLE,) + tuple(sorted(ETCD_VARIABLES.values())) + (TTL_VARIABLE,)
SECRET_VARIABLES = (ETCD_VARIABLES["password"],)


def location(backend, path=None, etcd=None):
    """Where the record is, in words (messages, the playbooks' lines)."""
    if backend == "file":
        return path
    return "etcd %s at %s" % (ec.record_key(etcd["prefix"]), ", ".join(etcd["endpoints"]))


def _endpoints(value):
    """A list of URLs, or one text of URLs separated by commas (-e gpufleet_etcd_endpoints=a,b)."""
    if isinstance(value, str) and value.strip():
        return [part.strip() for part in value.split(",")]
    return value


def settings(variables, plan_file=None):
    """The store's settings from the controller's variables (a mapping
    name -> value): gpufleet_state_backend (file, the default, or etcd) and,
    for etcd, gpufleet_etcd_* (etcd_client.check_settings, and the lock's
    lease gpufleet_etcd_lock_ttl). Checked: a ValueError names the variable
    (never the password's value). {backend, location, path} or {backend,
    location, etcd, lock_ttl}. `plan_file` is the file store's record."""
    backend = variables.get(BACKEND_VARIABLE)
    backend = "file" if backend is None else backend
    checks.choice(BACKEND_VARIABLE, backend, BACKENDS)
    if backend == "file":
        return {"backend": "file", "path": plan_file, "location": location("file", plan_file)}
    for key in ("endpoints", "prefix"):
        if variables.get(ETCD_VARIABLES[key]) is None:
            raise ValueError("%s: is required with %s etcd (%s)" % (
                ETCD_VARIABLES[key], BACKEND_VARIABLE,
                "the members' client URLs" if key == "endpoints" else "the record's key prefix: " + ec.PREFIX_RULE))
    etcd = {}
    for key, name in ETCD_VARIABLES.items():
        if variables.get(name) is not None:
            etcd[key] = variables[name]
    if "endpoints" in etcd:
        etcd["endpoints"] = _endpoints(etcd["endpoints"])
    etcd = ec.check_settings(etcd)
    ttl = etcd_lock.check_ttl(TTL_VARIABLE, etcd_lock.DEFAULT_TTL if variables.get(TTL_VARIABLE) is None
                              else variables[TTL_VARIABLE])
    return {"backend": "etcd", "etcd": etcd, "lock_ttl": ttl, "location": location("etcd", etcd=etcd)}


def open_store(value, me=None):
    """The store of settings `value` (what settings() made): a FileStore or
    an EtcdStore. ValueError for settings no store takes."""
    if not isinstance(value, dict) or value.get("backend") not in BACKENDS:
        raise ValueError("the store's settings must be what gpufleet.numa.state_settings made, a mapping with "
                         "backend %s" % " or ".join(BACKENDS))
    if value["backend"] == "file":
        path = value.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            checks.fail("the record's path", "must be an absolute path on the controller", path)
        return FileStore(path)
    return EtcdStore(value.get("etcd"), value.get("lock_ttl", etcd_lock.DEFAULT_TTL))


class FileStore(object):
    """The record a file on the controller, its lock the file beside it
    (state/lock.py, state/record.py): exactly what plan_record did alone."""

    backend = "file"

    def __init__(self, path):
        self.path = path
        self.location = path

    def read_text(self):
        return artifact.read_plan_file(self.path) or ""

    def read_bytes(self):
        return record.read_bytes(self.path)

    def revision(self):
        return record.revision(self.path)

    def _revision_or_unreadable(self):
        """The record's revision; one that cannot be read is left to the
        record's reader (the kept_plan lookup) to refuse, naming the reason."""
        try:
            return self.revision()
        except ValueError:
            return "unreadable"

    def acquire(self, timeout=0, waiting=None, me=None):
        if not os.path.isdir(os.path.dirname(self.path)):
            # No record yet, and a run that fails before its first write
            # leaves nothing behind: the first write takes the lock (advance).
            return {"locked": False, "msg": "no record yet (%s): the first write locks it" % self.path}
        taken = lock.acquire(self.path, self._revision_or_unreadable, timeout, me=me, waiting=waiting)
        return {"locked": True, "revision": taken["holder"]["revision"], "took_over": taken["took_over"]}

    def renew(self, me=None):
        return None  # flock needs no renewal: the holder's process is its lease

    def _locked(self):
        return os.path.exists(lock.lock_path(self.path))

    def preview(self, text, me=None):
        if self._locked():
            current = record.require(self.path, lock.held(self.path, me)["revision"])
        else:
            current = record.read_bytes(self.path)
        return current != text.encode("utf-8")

    def advance(self, text, me=None):
        if not self._locked():
            # This run found no record (acquire took no lock): its first
            # write takes the lock and replaces only "no record".
            record.ensure_directory(self.path)
            lock.acquire(self.path, lambda: record.ABSENT, me=me)
        changed = []

        def replace(expected):
            new, did = record.write(self.path, text, expected)
            changed.append(did)
            return new

        new = lock.advance(self.path, replace, me=me)
        return new, changed[0]

    def release(self, me=None):
        return lock.release(self.path, me)

    def held(self, me=None):
        return lock.held(self.path, me)

    @staticmethod
    def describe(holder):
        return lock.describe(holder)


class EtcdStore(object):
    """The record and its lock in etcd (state/etcd_lock.py, etcd_record.py).
    The lock lives on a lease of `ttl` seconds that a keeper process renews
    while the run's ansible-playbook process lives (state/keepalive.py)."""

    backend = "etcd"

    def __init__(self, etcd_settings, ttl=etcd_lock.DEFAULT_TTL, keeper=keepalive.start):
        self.ttl = etcd_lock.check_ttl(TTL_VARIABLE, ttl)
        self.store = etcd_lock.Store(ec.Client(etcd_settings))
        self.location = location("etcd", etcd=self.store.client.settings)
        self.keeper = keeper

    def read_bytes(self):
        return etcd_record.read_bytes(self.store)

    def read_text(self):
        data = self.read_bytes()
        if data is None:
            return ""
        if not data.strip():
            raise ValueError("the record %s is empty: a record this collection wrote is never empty; put an earlier "
                             "one back (docs/state.md) or delete the key once no run uses it" % self.location)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError("the record %s is not UTF-8 text (%s)" % (self.location, exc))

    def revision(self):
        return etcd_record.revision(self.store)

    def _lease(self, me):
        holder, kv = etcd_lock.read(self.store)
        return kv["lease"] if holder is not None and lock.same_run(holder, me) else None

    @staticmethod
    def run_entry(me=None):
        """The run's holder entry, its command line masked: the lock's key is
        read by every run that shares the cluster, and a password given
        with -e would be on it (the run is the same: lock.same_run)."""
        me = lock.this_run() if me is None else me
        return dict(me, command=secret_mask.mask_text(me.get("command") or ""))

    def acquire(self, timeout=0, waiting=None, me=None):
        me = self.run_entry(me)
        before = self._lease(me)
        taken = etcd_lock.acquire(self.store, timeout, self.ttl, me, waiting=waiting)
        lease = self._lease(me)
        if lease is not None and lease != before:
            # A new lease: its keeper renews it while the run lives. One that
            # does not start frees the lock and stops the run here, before
            # anything changed (the lease would end in the middle of a play).
            try:
                self.keeper(self.store.client.settings, lease, taken["holder"], self.ttl)
            except (OSError, ValueError) as exc:
                etcd_lock.release(self.store, me)
                raise lock.LockError("the keeper of the lock's lease on %s did not start, so the lock was freed and "
                                     "nothing was changed: %s" % (self.location, exc))
        return {"locked": True, "revision": taken["holder"]["revision"], "took_over": taken["took_over"]}

    def renew(self, me=None):
        return etcd_lock.keep_alive(self.store, me)

    def preview(self, text, me=None):
        current = etcd_record.require(self.store, etcd_lock.held(self.store, me)["revision"])
        return current is None or current["value"] != text.encode("utf-8")

    def advance(self, text, me=None):
        holder = etcd_lock.held(self.store, me)
        return etcd_record.write(self.store, text, holder["revision"], me=me)

    def release(self, me=None):
        return etcd_lock.release(self.store, me)

    def held(self, me=None):
        return etcd_lock.held(self.store, me)

    @staticmethod
    def describe(holder):
        return lock.describe(holder)
