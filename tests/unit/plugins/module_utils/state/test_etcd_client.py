# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The etcd store's settings, key layout, revisions and errors, and the
client's way through the members (a fake transport; tests/system/
test_state_etcd.py runs a real cluster)."""

from __future__ import annotations

import json
import socket
import ssl

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec


def _settings(**more):
    return dict({"endpoints": ["http://127.0.0.1:2379"], "prefix": "/gpufleet/demo/"}, **more)


def test_settings_are_checked_and_given_their_defaults(tmp_path):
    checked = ec.check_settings(_settings(endpoints=["http://127.0.0.1:2379/", "http://[::1]:2380", "http://etcd-1:1"]))
    assert checked["endpoints"] == ["http://127.0.0.1:2379", "http://[::1]:2380", "http://etcd-1:1"]
    assert (checked["timeout"], checked["retry_seconds"], checked["cert_file"]) == (5, 15, "")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("x")
    tls = ec.check_settings(_settings(endpoints=["https://etcd:2379"], cert_file=str(cert), key_file=str(key),
                                      ca_file=str(cert), username="fleet", password="s3cret", timeout="7"))
    assert tls["timeout"] == 7 and tls["username"] == "fleet"


@pytest.mark.parametrize("change, message", [
    ({"endpoints": []}, "gpufleet_etcd_endpoints: must be a non-empty list"),
    ({"endpoints": "http://127.0.0.1:2379"}, "gpufleet_etcd_endpoints: must be a non-empty list"),
    ({"endpoints": ["ftp://127.0.0.1:2379"]}, r"gpufleet_etcd_endpoints\[0\]: must be an etcd client URL"),
    ({"endpoints": ["http://127.0.0.1"]}, "must be an etcd client URL"),
    ({"endpoints": ["http://127.0.0.1:2379/v3"]}, "must be an etcd client URL"),
    ({"endpoints": ["http://u:p@127.0.0.1:2379"]}, "must be an etcd client URL"),
    ({"endpoints": ["http://127.0.0.1:99999"]}, "must be an etcd client URL"),
    ({"endpoints": ["http://127.0.0.1:0"]}, "must be at least 1"),
    ({"endpoints": ["http://127.1:2379"]}, "legacy form"),
    ({"endpoints": ["http://a:1", "https://b:1"]}, "must be all http:// or all https://"),
    ({"endpoints": ["http://a:1\n"]}, "control characters"),
    ({"prefix": "/gpufleet/demo"}, "gpufleet_etcd_prefix: must be a key prefix"),
    ({"prefix": "/"}, "must be a key prefix"),
    ({"prefix": "/a//b/"}, "must be a key prefix"),
    ({"prefix": "gpufleet/"}, "must be a key prefix"),
    ({"prefix": None}, "gpufleet_etcd_prefix: must be a string"),
    ({"ca_file": "relative.pem"}, "gpufleet_etcd_ca_file: must be an absolute path"),
    ({"ca_file": "/nonexistent/ca.pem"}, "gpufleet_etcd_ca_file: must be a readable file"),
    ({"username": "fleet"}, "gpufleet_etcd_username and gpufleet_etcd_password go together"),
    ({"username": "fleet", "password": " x"}, r"gpufleet_etcd_password: .*\(value hidden\)"),
    ({"timeout": 0}, "gpufleet_etcd_timeout: must be at least 1"),
    ({"retry_seconds": True}, "gpufleet_etcd_retry_seconds: must be an integer, not a boolean"),
    ({"colour": "red"}, "unknown etcd setting"),
])
def test_a_wrong_setting_is_named_with_its_rule(change, message):
    with pytest.raises(ValueError, match=message):
        ec.check_settings(_settings(**change))


def test_certificates_need_https_and_each_other(tmp_path):
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ValueError, match="go together: give both"):
        ec.check_settings(_settings(endpoints=["https://a:1"], cert_file=str(cert)))
    with pytest.raises(ValueError, match="are for https:// endpoints"):
        ec.check_settings(_settings(ca_file=str(cert)))
    with pytest.raises(ValueError, match="must be a mapping"):
        ec.check_settings(["http://a:1"])


def test_the_layout_and_the_revisions():
    assert ec.record_key("/g/f/") == "/g/f/record" and ec.lock_key("/g/f/") == "/g/f/lock"
    keys = [ec.history_key("/g/f/", n) for n in (9, 10, 123456789012)]
    assert keys == sorted(keys) and keys[0] == "/g/f/history/" + "0" * 19 + "9"
    assert [ec.history_sequence("/g/f/", k.encode()) for k in keys] == [9, 10, 123456789012]
    assert ec.history_sequence("/g/f/", "/g/f/history/12") is None
    assert ec.history_sequence("/g/f/", "/g/other/history/" + "0" * 20) is None
    assert ec.prefix_end("/g/f/history/") == b"/g/f/history0"
    assert ec.prefix_end(b"a\xff\xff") == b"b" and ec.prefix_end(b"\xff") == b"\0"
    assert ec.revision_of(None) == "absent" and ec.revision_of({"mod_revision": 42}) == "etcd:42"
    assert ec.mod_revision("r", "etcd:42") == 42 and ec.mod_revision("r", "absent") == 0
    for wrong in ("sha256:abc", "etcd:", "etcd:-1", "etcd:4 2", 42, None, "etcd:" + "9" * 40):
        with pytest.raises(ValueError, match="r: must be an etcd revision"):
            ec.mod_revision("r", wrong)


def test_key_values_and_requests_in_etcds_json():
    kv = ec.decode_kv({"key": ec.b64("/a"), "value": ec.b64(b"\x00\xff"), "mod_revision": "7", "lease": "12"})
    assert kv == {"key": b"/a", "value": b"\x00\xff", "create_revision": 0, "mod_revision": 7, "version": 0,
                  "lease": 12}
    assert ec.compare("/a", "LEASE", 12) == {"key": "L2E=", "target": "LEASE", "result": "EQUAL", "lease": "12"}
    assert ec.compare("/a", "CREATE", 0)["create_revision"] == "0"
    assert ec.put("/a", "v", 5) == {"request_put": {"key": "L2E=", "value": "dg==", "lease": "5"}}
    assert ec.delete("/a", b"/b") == {"request_delete_range": {"key": "L2E=", "range_end": "L2I="}}
    answer = {"responses": [{"response_range": {"kvs": [{"key": "L2E=", "mod_revision": "3"}]}},
                            {"response_range": {}}]}
    assert [kv and kv["mod_revision"] for kv in ec.responses(answer)] == [3, None]


def test_errors_read_from_etcds_answers():
    body = json.dumps({"error": "etcdserver: leader changed", "message": "etcdserver: leader changed", "code": 14})
    assert ec.error_of(503, body.encode()) == (14, "etcdserver: leader changed")
    assert ec.error_of(502, b"<html>bad gateway\x1b") == (None, "HTTP 502 <html>bad gateway\\x1b")
    assert ec.retriable(14, "x") and ec.retriable(2, "etcdserver: no leader") and ec.retriable(None, "request timed out")
    assert not ec.retriable(7, "etcdserver: permission denied") and not ec.retriable(3, "invalid argument")


def test_a_failed_connection_in_words():
    assert ec.transport_error(ConnectionRefusedError(111, "Connection refused")) == "cannot connect (Connection refused)"
    assert ec.transport_error(socket.timeout("timed out")).startswith("no answer in time")
    verify = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    assert "not one gpufleet_etcd_ca_file trusts" in ec.transport_error(verify)
    eof = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert "wants a client certificate its CA signed, and this client has none" in ec.transport_error(eof, False)
    assert ec.transport_error(eof, True).startswith("TLS failed")


class FakeClient(ec.Client):
    """A client whose members answer from a script: endpoint -> list of
    (status, body) or exceptions, taken in turn."""

    def __init__(self, answers, **settings):
        self.now, self.slept, self.sent = 0.0, [], []
        ec.Client.__init__(self, _settings(**settings), clock=lambda: self.now, sleep=self._sleep)
        self.answers = answers

    def _sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds

    def _send(self, endpoint, path, body):
        self.sent.append((endpoint, path, self.token))
        answer = self.answers[endpoint].pop(0) if len(self.answers[endpoint]) > 1 else self.answers[endpoint][0]
        if isinstance(answer, Exception):
            raise answer
        return answer[0], json.dumps(answer[1]).encode()


A, B = "http://10.0.0.1:2379", "http://10.0.0.2:2379"
REFUSED = ConnectionRefusedError(111, "Connection refused")
NO_LEADER = (503, {"error": "etcdserver: no leader", "code": 14})


def test_a_dead_member_is_skipped_and_the_next_one_asked_first_after():
    client = FakeClient({A: [REFUSED], B: [(200, {"kvs": [{"key": "L2E=", "value": "dg==", "mod_revision": "4"}]})]},
                        endpoints=[A, B])
    assert client.get("/a")["value"] == b"v"
    assert client.endpoints == [B, A] and [s[0] for s in client.sent] == [A, B]
    client.get("/a")
    assert [s[0] for s in client.sent] == [A, B, B]  # the one that answered is asked first


def test_members_without_a_leader_are_asked_again_until_the_retry_time_ends():
    client = FakeClient({A: [NO_LEADER, NO_LEADER, (200, {"succeeded": True})], B: [REFUSED]}, endpoints=[A, B])
    assert client.txn([], []) == (True, {"succeeded": True})
    assert len(client.slept) == 2
    stuck = FakeClient({A: [NO_LEADER], B: [REFUSED]}, endpoints=[A, B], retry_seconds=3)
    with pytest.raises(ec.EtcdError) as err:
        stuck.get("/a")
    assert str(err.value) == ("no etcd member served /v3/kv/range: %s: etcdserver: no leader; %s: cannot connect "
                              "(Connection refused)" % (A, B))
    assert 3 <= stuck.now <= 3.2  # bounded by retry_seconds


def test_an_error_of_etcd_itself_ends_the_call_at_once():
    client = FakeClient({A: [(403, {"error": "etcdserver: permission denied", "code": 7})], B: [REFUSED]},
                        endpoints=[A, B])
    with pytest.raises(ec.EtcdError, match=r"etcd %s/v3/kv/txn refused the call: etcdserver: permission denied" % A):
        client.txn([], [])
    assert client.slept == [] and len(client.sent) == 1


def test_tls_refused_by_every_member_is_not_waited_on():
    eof = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    client = FakeClient({"https://a:1": [eof], "https://b:1": [eof]}, endpoints=["https://a:1", "https://b:1"])
    with pytest.raises(ec.EtcdError, match="https://a:1: TLS refused: .*https://b:1: TLS refused"):
        client.get("/a")
    assert client.slept == []


def test_a_user_logs_in_first_and_again_when_the_token_expires():
    expired = (401, {"error": "etcdserver: invalid auth token", "code": 16})
    client = FakeClient({A: [(200, {"token": "t1"}), expired, (200, {"token": "t2"}), (200, {"kvs": []})]},
                        endpoints=[A], username="fleet", password="s3cret-pass")
    assert client.get("/a") is None
    assert [(path, token) for dummy, path, token in client.sent] == [
        (ec.AUTHENTICATE, None), ("/v3/kv/range", "t1"), (ec.AUTHENTICATE, None), ("/v3/kv/range", "t2")]


def test_leases_and_answers_that_are_not_etcds():
    client = FakeClient({A: [(200, {"ID": "77", "TTL": "30"}), (200, {"result": {"ID": "77"}}), (200, [])]},
                        endpoints=[A])
    assert client.grant(30) == (77, 30)
    assert client.keepalive(77) == 0  # no TTL: the lease is gone
    with pytest.raises(ec.EtcdError, match="answered something that is not etcd's JSON"):
        client.revoke(77)
    gone = FakeClient({A: [(404, {"error": "etcdserver: requested lease not found", "code": 5})]}, endpoints=[A])
    assert gone.revoke(77) is False
