# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The record and its lock kept in a real etcd cluster (Debian's
etcd-server; scripts/setup installs it): three members on loopback, each
with its own data directory, reached only over etcd's HTTP/JSON API.

A write against an old revision changes nothing; two runs at once end with
one refused before it changed anything; a holder whose lease is not renewed
frees the lock by itself, and one that died on this controller is taken
over; a write without the lock is refused; the history keeps the last N and
an old record can be read back and written again; the cluster's leader
killed with SIGKILL in the middle of a sequence of writes loses none of
them; and a member that asks for client certificates refuses a client
without one, in words.
"""

import os
import signal
import subprocess
import threading
import time

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_lock, etcd_record, lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state.record import RecordChanged

from etcd_cluster import NEEDS_ETCD, cluster_of
from fleet_processes import wait_until

pytestmark = NEEDS_ETCD


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three members, shared by the tests that kill none (each its own key prefix)."""
    yield from cluster_of(tmp_path_factory)


@pytest.fixture
def own_cluster(tmp_path_factory):
    yield from cluster_of(tmp_path_factory)


@pytest.fixture
def store(cluster, request):
    return etcd_lock.Store(ec.Client(cluster.settings("/gpufleet/%s/" % request.node.name.replace("[", "-")[:60])))


@pytest.fixture(scope="module")
def other_pid():
    """A live process: a second run on this controller (never judged dead)."""
    proc = subprocess.Popen(["sleep", "300"])
    wait_until(lambda: lock.process_start(proc.pid), 10, what="the second run's process")
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_write_replaces_only_the_revision_the_run_read(store):
    assert etcd_record.revision(store) == ec.ABSENT and etcd_record.read_bytes(store) is None
    taken = etcd_lock.acquire(store)
    assert taken["holder"]["revision"] == ec.ABSENT and taken["took_over"] is None
    first, changed = etcd_record.write(store, '{"a": 1}\n', ec.ABSENT)
    assert changed and first == etcd_record.revision(store) and first.startswith("etcd:")
    assert etcd_record.read_bytes(store) == b'{"a": 1}\n'
    assert etcd_lock.held(store)["revision"] == first  # the lock keeps what the run wrote
    assert etcd_record.write(store, '{"a": 1}\n', first) == (first, False)  # unchanged: not written
    second = etcd_record.advance(store, '{"a": 2}\n')
    with pytest.raises(RecordChanged) as err:
        etcd_record.write(store, '{"a": 3}\n', first)
    assert "changed since this run read it (it was %s, it is %s now)" % (first, second) in str(err.value)
    assert etcd_record.read_bytes(store) == b'{"a": 2}\n' and etcd_record.revision(store) == second
    # A hand edit (etcdctl put) is never overwritten either.
    store.client.txn([], [ec.put(ec.record_key(store.prefix), "by hand\n")])
    with pytest.raises(RecordChanged):
        etcd_record.write(store, '{"a": 4}\n', second)
    assert etcd_record.read_bytes(store) == b"by hand\n"
    assert etcd_lock.release(store) is True and etcd_lock.release(store) is False


def test_two_runs_at_once_end_with_one_refused_before_it_changed_anything(store, other_pid):
    first, second = lock.this_run(os.getpid()), lock.this_run(other_pid)
    etcd_lock.acquire(store, me=first)
    etcd_record.write(store, "first's\n", ec.ABSENT, me=first)
    told, started = [], time.monotonic()
    with pytest.raises(lock.LockError) as err:
        etcd_lock.acquire(store, timeout=1, me=second, waiting=told.append)
    waited = time.monotonic() - started
    assert 1 <= waited < 3, waited
    assert "is locked by another run: %s" % lock.describe(etcd_lock.held(store, first)) in str(err.value)
    assert "frees it by itself when its lease runs out (30 s after its last renewal)" in str(err.value)
    assert [holder["pid"] for holder in told] == [os.getpid()]
    with pytest.raises(lock.LockError, match="held by .*pid %d" % os.getpid()):
        etcd_record.write(store, "second's\n", etcd_record.revision(store), me=second)
    assert etcd_record.read_bytes(store) == b"first's\n"
    assert etcd_lock.release(store, me=second) is False
    assert etcd_lock.release(store, me=first) is True
    # Both at the same moment: exactly one takes the lock and writes.
    results = {}

    def run(me):
        try:
            etcd_lock.acquire(store, me=me)
            results[me["pid"]] = etcd_record.write(store, "run %d\n" % me["pid"], etcd_record.revision(store), me=me)
        except lock.LockError as exc:
            results[me["pid"]] = exc
    threads = [threading.Thread(target=run, args=(me,)) for me in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [pid for pid, result in results.items() if not isinstance(result, Exception)]
    assert len(results) == 2 and len(winners) == 1, results
    assert etcd_record.read_bytes(store) == b"run %d\n" % winners[0]


def test_a_holder_that_stops_renewing_its_lease_frees_the_lock(store):
    elsewhere = dict(lock.this_run(), host="ctl-elsewhere")  # never judged dead from here
    etcd_lock.acquire(store, ttl=2, me=elsewhere)
    for dummy in range(6):  # three seconds, renewed: still held
        time.sleep(0.5)
        assert etcd_lock.keep_alive(store, me=elsewhere) >= 1
    with pytest.raises(lock.LockError, match="ctl-elsewhere"):
        etcd_lock.acquire(store, timeout=0)
    wait_until(lambda: store.client.get(ec.lock_key(store.prefix)) is None, 8, what="the lease to run out")
    with pytest.raises(lock.LockError, match="it is free: its lease ran out"):
        etcd_record.write(store, "late\n", ec.ABSENT, me=elsewhere)
    with pytest.raises(lock.LockError):
        etcd_lock.keep_alive(store, me=elsewhere)
    assert etcd_record.read_bytes(store) is None
    assert etcd_lock.acquire(store)["took_over"] is None


def test_a_dead_holder_on_this_controller_is_taken_over(store):
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = dict(lock.this_run(os.getpid()), pid=gone.pid, start="1")
    etcd_lock.acquire(store, me=dead)
    dead_lease = store.client.get(ec.lock_key(store.prefix))["lease"]
    taken = etcd_lock.acquire(store, timeout=0)
    assert taken["took_over"]["pid"] == gone.pid and taken["holder"]["pid"] == os.getpid()
    assert store.client.keepalive(dead_lease) == 0  # its lease ended with it
    with pytest.raises(lock.LockError, match="held by .*pid %d" % os.getpid()):
        etcd_record.write(store, "dead's\n", ec.ABSENT, me=dead)


def test_a_write_without_the_lock_is_refused(store):
    with pytest.raises(lock.LockError, match=r"does not hold the lock .*\(it is free"):
        etcd_record.write(store, "unlocked\n", ec.ABSENT)
    assert etcd_record.read_bytes(store) is None
    with pytest.raises(lock.LockError):
        etcd_lock.keep_alive(store)


def test_the_history_keeps_the_last_n_and_an_old_record_is_written_again(store):
    etcd_lock.acquire(store)
    revisions = [etcd_record.advance(store, "version %d\n" % i, keep=3) for i in range(5)]
    assert [entry["revision"] for entry in etcd_record.history(store)] == revisions[:1:-1]
    assert len(store.client.range(ec.history_prefix(store.prefix), keys_only=True)) == 3
    assert etcd_record.read_history(store, revisions[2]) == b"version 2\n"
    with pytest.raises(ValueError, match="revision %s is not kept" % revisions[1]):
        etcd_record.read_history(store, revisions[1])
    back = etcd_record.advance(store, etcd_record.read_history(store, revisions[2]).decode(), keep=3)
    assert etcd_record.read_bytes(store) == b"version 2\n"
    assert [entry["revision"] for entry in etcd_record.history(store)] == [back, revisions[4], revisions[3]]


class LosingClient(ec.Client):
    """A client whose first txn reaches the cluster but whose answer is lost
    (the member died after it was sent), and which notes every member that
    failed it."""

    lose = 1

    def _send(self, endpoint, path, body):
        try:
            status, data = ec.Client._send(self, endpoint, path, body)
        except OSError:
            self.failed.append(endpoint)
            raise
        if path == "/v3/kv/txn" and self.lose and len(body["success"]) > 1:
            self.lose -= 1
            raise ConnectionResetError("the answer was lost")
        return status, data


def test_a_write_whose_answer_was_lost_is_sent_again_and_lands_once(store):
    client = LosingClient(store.client.settings)
    client.failed = []
    lossy = etcd_lock.Store(client)
    etcd_lock.acquire(lossy)
    first = etcd_record.advance(lossy, "one\n")
    assert client.lose == 0 and etcd_record.read_bytes(store) == b"one\n" and etcd_record.revision(store) == first
    assert [entry["revision"] for entry in etcd_record.history(store)] == [first]
    assert etcd_record.advance(lossy, "two\n") == etcd_record.revision(store)


def test_the_leader_killed_in_the_middle_of_the_writes_loses_none(own_cluster):
    leader = own_cluster.leader()
    client = LosingClient(dict(own_cluster.settings("/gpufleet/kill/"), endpoints=own_cluster.endpoints(first=leader)))
    client.failed, client.lose = [], 0
    store = etcd_lock.Store(client)
    etcd_lock.acquire(store)
    written, started = [], threading.Event()

    def kill():
        started.wait(30)
        own_cluster.group.signal(leader, signal.SIGKILL)
    killer = threading.Thread(target=kill)
    killer.start()
    for i in range(16):
        if i == 4:
            started.set()  # the leader dies while the next writes go out
        written.append((etcd_record.advance(store, '{"write": %d}\n' % i, keep=20), '{"write": %d}\n' % i))
    killer.join(30)
    own_cluster.group.processes[leader][0].wait(10)
    assert own_cluster.clients[leader] in client.failed  # the writes went on with another member
    numbers = [ec.mod_revision("r", revision) for revision, dummy in written]
    assert numbers == sorted(set(numbers))
    assert own_cluster.leader() not in (None, leader)
    for name in own_cluster.names:
        if name == leader:
            continue
        one = etcd_lock.Store(ec.Client(dict(own_cluster.settings("/gpufleet/kill/"),
                                             endpoints=[own_cluster.clients[name]])))
        assert etcd_record.read_bytes(one) == written[-1][1].encode()
        assert etcd_record.revision(one) == written[-1][0]
        assert [(entry["revision"], etcd_record.read_history(one, entry["revision"]).decode())
                for entry in etcd_record.history(one)] == written[::-1]
        assert etcd_lock.held(one)["revision"] == written[-1][0]


def _openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


@pytest.fixture
def certificates(tmp_path):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""
    files = dict((name, str(tmp_path / name)) for name in (
        "ca", "ca_key", "server_cert", "server_key", "client_cert", "client_key", "other_ca", "other_ca_key"))
    for ca in ("ca", "other_ca"):
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                 "-subj", "/CN=test %s" % ca, "-keyout", files[ca + "_key"], "-out", files[ca])
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        csr = str(tmp_path / (name + ".csr"))
        ext = str(tmp_path / (name + ".ext"))
        with open(ext, "w") as handle:
            handle.write(extension + "\n")
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-subj", "/CN=%s" % name, "-keyout", files[name + "_key"], "-out", csr)
        _openssl("x509", "-req", "-in", csr, "-CA", files["ca"], "-CAkey", files["ca_key"], "-CAcreateserial",
                 "-days", "2", "-extfile", ext, "-out", files[name + "_cert"])
    return files


def test_tls_with_client_certificates(tmp_path_factory, certificates):
    member = cluster_of(tmp_path_factory, size=1, tls=certificates)
    cluster = next(member)
    try:
        settings = cluster.settings("/gpufleet/tls/", ca_file=certificates["ca"], retry_seconds=1)
        store = etcd_lock.Store(ec.Client(dict(settings, cert_file=certificates["client_cert"],
                                               key_file=certificates["client_key"])))
        wait_until(lambda: _answers(store), 30, what="the TLS member")
        etcd_lock.acquire(store)
        revision = etcd_record.advance(store, "over TLS\n")
        assert etcd_record.read_bytes(store) == b"over TLS\n" and etcd_record.revision(store) == revision
        with pytest.raises(ec.EtcdError) as err:
            etcd_record.read_bytes(etcd_lock.Store(ec.Client(settings)))
        assert "no etcd member served /v3/kv/range: %s: TLS refused: the member wants a client certificate" \
            % cluster.clients["m0"] in str(err.value)
        with pytest.raises(ec.EtcdError, match="the member's certificate is not one gpufleet_etcd_ca_file trusts"):
            etcd_record.read_bytes(etcd_lock.Store(ec.Client(dict(settings, ca_file=certificates["other_ca"]))))
    finally:
        member.close()


def _answers(store):
    try:
        store.client.get("/x")
        return True
    except ec.EtcdError:
        return False
