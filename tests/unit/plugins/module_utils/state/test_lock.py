# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The run's lock on the record, with real processes as holders: a live
one stops a run naming it, a dead one is taken over, another controller's
is never judged dead, and two processes racing for it lose no update."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import time

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock


def _revision():
    return "absent"


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "300"])
    # Popen may return (vfork) before the kernel has set the new program's
    # arguments: wait until /proc shows them, as a holder's own lock would.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open("/proc/%d/cmdline" % proc.pid, "rb") as handle:
            if handle.read():
                break
        time.sleep(0.01)
    yield proc
    proc.kill()
    proc.wait()


def _write_holder(path, holder):
    with open(lock.lock_path(path), "w") as handle:
        json.dump(dict(holder, revision="absent"), handle)


def test_a_free_lock_is_taken_and_names_this_run(tmp_path):
    path = str(tmp_path / "plan.json")
    taken = lock.acquire(path, _revision)
    assert taken["took_over"] is None
    held = json.loads(open(lock.lock_path(path)).read())
    assert held["pid"] == os.getpid() and held["revision"] == "absent" and held["start"] == lock.process_start(os.getpid())
    assert held == lock.held(path)
    # The same run takes it again (a playbook imported twice), then frees it.
    assert lock.acquire(path, lambda: "sha256:x")["holder"]["revision"] == "sha256:x"
    assert lock.release(path) is True
    assert open(lock.lock_path(path)).read() == ""
    assert lock.release(path) is False


def test_a_live_holder_is_named_and_waited_for_no_longer_than_asked(tmp_path, sleeper):
    path = str(tmp_path / "plan.json")
    _write_holder(path, lock.this_run(sleeper.pid))
    told = []
    clock = iter(range(100)).__next__
    with pytest.raises(lock.LockError) as err:
        lock.acquire(path, _revision, timeout=3, clock=clock, sleep=lambda s: None, waiting=told.append)
    message = str(err.value)
    assert "the record %s is locked by another run" % path in message
    assert "pid %d (sleep 300)" % sleeper.pid in message and "gpufleet_lock_timeout" in message
    assert "truncate" not in message  # on this host its end is seen
    assert [h["pid"] for h in told] == [sleeper.pid]
    with pytest.raises(lock.LockError):
        lock.acquire(path, _revision, timeout=0)
    assert json.loads(open(lock.lock_path(path)).read())["pid"] == sleeper.pid  # untouched


def test_the_wait_ends_when_the_holder_frees_the_lock(tmp_path, sleeper):
    path = str(tmp_path / "plan.json")
    other = lock.this_run(sleeper.pid)
    _write_holder(path, other)
    polls = []

    def sleep(_seconds):
        polls.append(1)
        if len(polls) == 2:
            lock.release(path, me=other)
    taken = lock.acquire(path, _revision, timeout=60, sleep=sleep)
    assert taken["holder"]["pid"] == os.getpid() and len(polls) == 2


def test_a_dead_holder_is_taken_over(tmp_path):
    path = str(tmp_path / "plan.json")
    gone = subprocess.Popen(["true"])
    gone.wait()
    _write_holder(path, lock.this_run(os.getpid()) | {"pid": gone.pid, "start": "1"})
    taken = lock.acquire(path, _revision)
    assert taken["took_over"]["pid"] == gone.pid
    # Another process under the holder's pid (the pid was reused) is no holder either.
    _write_holder(path, lock.this_run(os.getpid()) | {"pid": os.getppid(), "start": "1"})
    assert lock.acquire(path, _revision)["took_over"]["pid"] == os.getppid()
    # Nor is a holder of an earlier boot.
    _write_holder(path, lock.this_run(os.getppid()) | {"boot_id": "an-earlier-boot"})
    assert lock.acquire(path, _revision)["took_over"]["boot_id"] == "an-earlier-boot"


def test_another_controllers_holder_is_never_judged_dead(tmp_path):
    path = str(tmp_path / "plan.json")
    _write_holder(path, lock.this_run(os.getpid()) | {"host": "laptop-of-ana", "pid": 1, "start": "1"})
    with pytest.raises(lock.LockError) as err:
        lock.acquire(path, _revision)
    assert "@laptop-of-ana pid 1" in str(err.value)
    assert "truncate -s 0 %s.lock" % path in str(err.value)


@pytest.mark.parametrize("text", ["not json", "[]", '{"pid": 1}', "x" * (lock.LOCK_MAX_BYTES + 1)])
def test_a_lock_file_this_collection_did_not_write_is_refused(tmp_path, text):
    path = str(tmp_path / "plan.json")
    with open(lock.lock_path(path), "w") as handle:
        handle.write(text)
    with pytest.raises(lock.LockError) as err:
        lock.acquire(path, _revision)
    assert lock.lock_path(path) in str(err.value)


def test_control_characters_of_a_holder_never_reach_a_message(tmp_path):
    path = str(tmp_path / "plan.json")
    _write_holder(path, lock.this_run(os.getpid()) | {"host": "h\n[ERROR] x", "user": "\x1b[31mroot"})
    with pytest.raises(lock.LockError) as err:
        lock.acquire(path, _revision)
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value) and "h\\x0a[ERROR] x" in str(err.value)


def test_only_the_holder_advances_the_revision(tmp_path, sleeper):
    path = str(tmp_path / "plan.json")
    with pytest.raises(lock.LockError) as err:
        lock.advance(path, lambda expected: "sha256:new")
    assert "no longer holds the lock" in str(err.value) and "it is free" in str(err.value)
    _write_holder(path, lock.this_run(sleeper.pid))
    with pytest.raises(lock.LockError) as err:
        lock.advance(path, lambda expected: "sha256:new")
    assert "held by root@" in str(err.value) or "held by " in str(err.value)
    lock.release(path, me=lock.this_run(sleeper.pid))
    lock.acquire(path, _revision)
    seen = []
    assert lock.advance(path, lambda expected: seen.append(expected) or "sha256:new") == "sha256:new"
    assert seen == ["absent"] and lock.held(path)["revision"] == "sha256:new"
    assert lock.release(path, me=lock.this_run(sleeper.pid)) is False  # not its lock
    assert lock.held(path)["pid"] == os.getpid()


def test_timeout_bounds():
    assert lock.check_timeout("gpufleet_lock_timeout", 0) == 0
    assert lock.check_timeout("gpufleet_lock_timeout", "86400") == 86400
    for bad in (-1, 86401, "1h", True, 1.5):
        with pytest.raises(ValueError, match="gpufleet_lock_timeout"):
            lock.check_timeout("gpufleet_lock_timeout", bad)


def _racer(path, rounds, counter):
    me = lock.this_run(os.getpid())
    for dummy in range(rounds):
        lock.acquire(path, _revision, timeout=60, me=me, sleep=lambda s: None)
        with open(counter) as handle:
            value = int(handle.read())
        with open(counter, "w") as handle:
            handle.write(str(value + 1))
        assert lock.release(path, me=me)


def test_two_processes_racing_for_the_lock_lose_no_update(tmp_path):
    path, counter = str(tmp_path / "plan.json"), str(tmp_path / "counter")
    with open(counter, "w") as handle:
        handle.write("0")
    context = multiprocessing.get_context("fork")
    racers = [context.Process(target=_racer, args=(path, 200, counter)) for dummy in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(120)
    assert [r.exitcode for r in racers] == [0, 0]
    with open(counter) as handle:
        assert handle.read() == "400"
