# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""One run at a time on a record (docs/plan.md, "One run at a time").

The lock is a small file beside the record (`<record>.lock`) that names
its holder: the ansible-playbook process (host, boot, pid and the pid's
start time), its user, its command line, when it took the lock, and the
record's revision as that run last saw it. The file is never removed (an
empty one is a free lock); every read and change of it happens under
flock(2) on it, a critical section of a few milliseconds, so two runs can
never both believe they hold it.

A holder on this host that is gone (no such pid, another pid under that
number, or another boot) is dead: its lock is taken over and said so. A
holder on another host cannot be judged from here: it is waited for, and
the message says how to free it by hand.

The revision (the sha256 of the record's bytes, or "absent") is the
compare-and-swap half: the holder replaces only the revision it started
from (state/record.py). Controller only; standard library only.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import multiprocessing
import os
import socket
import time

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks

LOCK_SUFFIX = ".lock"
# A holder entry is a few hundred bytes; more is not a lock this code wrote.
LOCK_MAX_BYTES = 64 * 1024
HOLDER_FIELDS = ("host", "boot_id", "pid", "start", "user", "command", "since", "revision")
# The longest wait a run may ask for: a day.
MAX_TIMEOUT = 86400
POLL_SECONDS = 0.5


class LockError(ValueError):
    """The lock could not be taken or is no longer ours (message says why)."""


def lock_path(record_path):
    return record_path + LOCK_SUFFIX


def _read_text(path, limit=4096):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def process_start(pid):
    """The start time of `pid` in clock ticks since boot (/proc/PID/stat
    field 22), or None when there is no such process."""
    text = _read_text("/proc/%d/stat" % pid)
    if not text:
        return None
    # The command name (field 2) may hold spaces and ')': split after the last ')'.
    fields = text.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def boot_id():
    return _read_text("/proc/sys/kernel/random/boot_id").strip()


def run_process():
    """The pid of the run: the ansible-playbook process. Plugins run in its
    forked workers; the controller's main process has no parent among them."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid else os.getpid()


def _command(pid):
    words = [w for w in _read_text("/proc/%d/cmdline" % pid).split("\0") if w]
    if len(words) > 1 and os.path.basename(words[0]).startswith("python"):
        words = words[1:]  # ansible-playbook's interpreter says nothing about the run
    return checks.printable(" ".join(words))[:300]


def _user():
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a container's uid)
        return "uid %d" % os.getuid()


def this_run(pid=None):
    """The holder entry of the calling run (no revision yet)."""
    pid = run_process() if pid is None else pid
    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid": pid, "start": process_start(pid),
            "user": _user(), "command": _command(pid),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def same_run(a, b):
    return all(a.get(k) == b.get(k) for k in ("host", "boot_id", "pid", "start"))


def is_dead(holder, me):
    """True when `holder` is certainly gone: it ran on this host, and its
    boot, its pid, or the process under that pid is another one now."""
    if holder.get("host") != me["host"]:
        return False
    if holder.get("boot_id") != me["boot_id"]:
        return True
    pid = holder.get("pid")
    return not isinstance(pid, int) or process_start(pid) != holder.get("start")


def describe(holder):
    return "%s@%s pid %s (%s), since %s" % (
        checks.printable(str(holder.get("user"))), checks.printable(str(holder.get("host"))), holder.get("pid"),
        checks.printable(str(holder.get("command") or "?"))[:300], checks.printable(str(holder.get("since"))))


def _parse(text, path):
    """The holder of a lock file's text; None when free (empty)."""
    if not text.strip():
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        holder = None
    if not isinstance(holder, dict) or not set(HOLDER_FIELDS) <= set(holder):
        raise LockError("lock file %s does not hold a lock this collection wrote: look at it, and empty it "
                        "(truncate -s 0 %s) once no run uses the record" % (path, path))
    return holder


class _Locked(object):
    """The lock file opened and flock'ed for one short critical section."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                              0o644)
        except OSError as exc:
            raise LockError("lock file %s cannot be opened: %s" % (self.path, exc.strerror))
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def read(self):
        os.lseek(self.fd, 0, os.SEEK_SET)
        data = os.read(self.fd, LOCK_MAX_BYTES + 1)
        if len(data) > LOCK_MAX_BYTES:
            raise LockError("lock file %s is larger than %d bytes: not a lock this collection wrote"
                            % (self.path, LOCK_MAX_BYTES))
        return _parse(data.decode("utf-8", "replace"), self.path)

    def write(self, holder):
        data = b"" if holder is None else (json.dumps(holder, sort_keys=True) + "\n").encode("utf-8")
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, data)
        os.fsync(self.fd)

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        return False


def check_timeout(name, value):
    return checks.integer(name, value, 0, MAX_TIMEOUT)


def acquire(record_path, revision_of, timeout=0, me=None, clock=time.monotonic, sleep=time.sleep, waiting=None):
    """Take the lock of `record_path` for the run `me` (this_run() by default).

    revision_of() is called under the lock and gives the record's revision,
    which the lock keeps. Waits up to `timeout` seconds for a live holder
    (waiting(holder) is told once, when the wait starts), then raises
    LockError naming it. Returns {holder, took_over} where
    took_over is the dead holder's entry whose lock was taken, or None. The
    run that already holds the lock takes it again (an imported playbook)."""
    me = this_run() if me is None else me
    path = lock_path(record_path)
    deadline = clock() + timeout
    told = False
    while True:
        with _Locked(path) as lock:
            holder = lock.read()
            took_over = holder if holder is not None and not same_run(holder, me) and is_dead(holder, me) else None
            if holder is None or same_run(holder, me) or took_over is not None:
                mine = dict(me, revision=revision_of())
                lock.write(mine)
                return {"holder": mine, "took_over": took_over}
        if clock() >= deadline:
            raise LockError("the record %s is locked by another run: %s. Wait for it to finish (or give "
                            "gpufleet_lock_timeout, in seconds, to wait here)%s"
                            % (record_path, describe(holder), _by_hand(holder, me, path)))
        if waiting is not None and not told:
            waiting(holder)
            told = True
        sleep(POLL_SECONDS)


def _by_hand(holder, me, path):
    if holder.get("host") == me["host"]:
        return ""
    return ("; it runs on another controller, so its end cannot be seen from here: once you are sure it "
            "stopped, empty the lock (truncate -s 0 %s)" % path)


def held(record_path, me=None):
    """The lock's entry when `me` holds it; LockError otherwise."""
    me = this_run() if me is None else me
    path = lock_path(record_path)
    with _Locked(path) as lock:
        holder = lock.read()
    _require_ours(holder, me, record_path)
    return holder


def _require_ours(holder, me, record_path):
    if holder is None or not same_run(holder, me):
        raise LockError("this run no longer holds the lock of the record %s (%s): another run may have written "
                        "the record since this one read it, so nothing was written; run again"
                        % (record_path, "it is free" if holder is None else "held by " + describe(holder)))


def advance(record_path, write, me=None):
    """Under the lock that `me` holds: write(expected_revision) replaces the
    record (it must refuse when the record is not at that revision) and
    returns the new revision, which the lock then keeps."""
    me = this_run() if me is None else me
    with _Locked(lock_path(record_path)) as lock:
        holder = lock.read()
        _require_ours(holder, me, record_path)
        new = write(holder["revision"])
        lock.write(dict(holder, revision=new))
        return new


def release(record_path, me=None):
    """Free the lock if `me` holds it. True when it was ours."""
    me = this_run() if me is None else me
    path = lock_path(record_path)
    if not os.path.exists(path):
        return False
    with _Locked(path) as lock:
        holder = lock.read()
        if holder is None or not same_run(holder, me):
            return False
        lock.write(None)
        return True
