# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The keeper of a run's etcd lease (docs/state.md, "The lease is kept
while the run lives"): a small detached process that renews the lease of
the run's lock every ttl/3 seconds while the run's ansible-playbook
process lives.

Why a process: a deploy lasts minutes to hours, and one play can wait an
hour for its instances' health without touching the record. Renewing only
where the run touches the record (plan_record renews at each call) would
need a lease as long as the longest play, and a run that died would keep
every other run out that long. With a keeper the lease stays short (30 s
by default): the keeper watches the run's process (its pid and the pid's
start time, as the lock names it) and, once that is gone, frees the lock
at once (the key deleted while on the run's lease, the lease revoked).
When the keeper itself is gone too (a controller that lost power or its
network), the lease ends `ttl` seconds after its last renewal, by itself.
The keeper exits as soon as the lock is no longer on its lease (the run
freed it, or lost it: the run's next write is then refused).

start() runs it as `python -c BOOT <the directory holding
ansible_collections>`, its settings (the password among them) on its
standard input, never on its command line; it detaches (a new session, a
second fork, no inherited descriptors: a test that reads
ansible-playbook's output to its end is not held open) and says "ready
PID" once it renewed the lease once. Controller only; standard library
only.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock

BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
        "from ansible_collections.gpufleet.numa.plugins.module_utils.state import keepalive; "
        "sys.exit(keepalive.main())")
READY = "ready"
START_SECONDS = 30
POLL_SECONDS = 0.5
# After a renewal that failed (no member answered within retry_seconds), the next try.
RETRY_SECONDS = 1


def interval(ttl):
    """Seconds between renewals: a third of the lease, as etcd's own clients do."""
    return max(1, ttl // 3)


def collections_root(name=__name__, path=__file__):
    """The directory that holds ansible_collections/ for module `name` at
    `path` (its dotted name walked up from its file), or None."""
    parts = name.split(".")
    if parts[0] != "ansible_collections":
        return None
    path = os.path.abspath(path)
    for dummy in parts:
        path = os.path.dirname(path)
    return path if os.path.isdir(os.path.join(path, "ansible_collections")) else None


def _read_ready(proc, seconds, clock=time.monotonic):
    """What the keeper said until its ready line (or its end, or `seconds`)."""
    said, deadline = b"", clock() + seconds
    fd = proc.stdout.fileno()
    while b"\n" not in said or not said.startswith(READY.encode()):
        left = deadline - clock()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        said += chunk
    return said.decode("utf-8", "replace")


def start(settings, lease, holder, ttl, python=sys.executable):
    """Start the keeper of `lease` for the run `holder`; its pid once it
    renewed the lease once. ValueError (with what it said) or OSError when
    it does not start."""
    root = collections_root()
    if root is None:
        raise ValueError("this module was not loaded from an ansible_collections tree (%s)" % __file__)
    job = json.dumps({"settings": settings, "lease": lease, "holder": holder, "interval": interval(ttl)})
    proc = subprocess.Popen([python, "-c", BOOT, root], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, cwd="/", close_fds=True, start_new_session=True)
    try:
        proc.stdin.write(job.encode("utf-8"))
        proc.stdin.close()
        said = _read_ready(proc, START_SECONDS)
    finally:
        proc.stdout.close()
    if not said.startswith(READY + " "):
        proc.kill()
        proc.wait()
        raise ValueError("the keeper said: %s" % (said.strip()[-600:] or "nothing in %d s" % START_SECONDS))
    proc.wait()  # the first child, gone once the keeper forked
    return int(said.split()[1])


def free(store, holder):
    """The lock freed for the run `holder` that is gone: True when it was its."""
    return etcd_lock.release(store, holder)


def keep(store, lease, holder, every, alive=None, clock=time.monotonic, sleep=time.sleep):
    """Renew `lease` every `every` seconds while the run `holder` lives
    and the lock is on the lease; free the lock once the run is gone.
    Returns why it stopped, in words."""
    if alive is None:
        def alive():
            return lock.process_start(holder["pid"]) == holder["start"]
    due = clock() + every
    while True:
        if not alive():
            try:
                return "the run ended: %s" % ("lock freed" if free(store, holder) else "the lock was not its")
            except ValueError as exc:  # EtcdError, LockError: the lease then ends by itself
                return "the run ended; the lock could not be freed (%s)" % exc
        if clock() >= due:
            try:
                kv = store.client.get(ec.lock_key(store.prefix))
                if kv is None or kv["lease"] != lease:
                    return "the lock is no longer on lease %d" % lease
                if store.client.keepalive(lease) <= 0:
                    return "lease %d ended" % lease
                due = clock() + every
            except ec.EtcdError:
                due = clock() + RETRY_SECONDS  # no member answered: the lease has ttl seconds
        sleep(POLL_SECONDS)


def _detach():
    """Fork once more (the first child exits, its parent reaps it) and
    leave standard input, output and error to /dev/null."""
    if os.fork() > 0:
        os._exit(0)  # pylint: disable=protected-access


def main(stdin=None):
    """The keeper: its job from standard input, one renewal, "ready PID",
    then keep() until the run or the lease ends."""
    job = json.loads((stdin or sys.stdin).read())
    store = etcd_lock.Store(ec.Client(job["settings"]))
    try:
        if store.client.keepalive(job["lease"]) <= 0:
            sys.stdout.write("lease %d has ended already\n" % job["lease"])
            return 1
    except ec.EtcdError as exc:
        sys.stdout.write("%s\n" % exc)
        return 1
    _detach()
    sys.stdout.write("%s %d\n" % (READY, os.getpid()))
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    keep(store, job["lease"], job["holder"], job["interval"])
    return 0
