# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Traffic through the gateway: streams, slow answers, clients that leave, errors.

The role's own template and settings check (tests/fixtures/gateway_render)
render a configuration with a short gateway_timeout_server; the real
HAProxy runs it in front of a stand-in instance in this process (raw
sockets, so the test sees every write and every close) and a model whose
only instance is a closed port. A stream must reach the client event by
event, as the instance writes it; a request that outlasts timeout server
is answered 504 and reaches the instance once; a client that closes its
connection closes the instance's too (vLLM then aborts the request); the
errors HAProxy writes itself are JSON in OpenAI's shape. pytest -s prints
the stream's figures.
"""

import json
import os
import select
import shutil
import socket
import subprocess
import threading
import time

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import gateway_render

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
ADDRESS = "127.0.0.46"
# Short enough to wait for, long enough that a client's close comes first.
TIMEOUT_SERVER = 2.0
TIMEOUT_HTTP_REQUEST = 1.0
EVENTS = 40
EVERY = 0.05
# The stand-in holds a request it does not answer this long at most.
HOLD = 5.0


class StandIn:
    """One model's instance: GET /health answers 200; a request's path says
    what it does: /stream writes EVENTS server-sent events EVERY seconds
    apart (chunked), /slow and /hold answer only after HOLD seconds, /pause
    writes one event and the rest after HOLD seconds, unless the gateway
    closes the connection first. Every request is counted by
    its X-Probe header; `closed[probe]` is when (after the request came) the
    gateway closed the connection of a held request."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind((ADDRESS, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.received = {}
        self.closed = {}
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, dummy = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        with conn:
            try:
                while self.answer(conn):
                    pass
            except OSError:
                pass  # HAProxy ends a health check with a reset

    def answer(self, conn):
        """One request on CONN; False once the connection is done."""
        head, rest = b"", b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            head += chunk
        head, dummy, rest = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict((name.strip().lower(), value.strip()) for name, dummy, value in
                       (line.partition(":") for line in lines[1:]))
        while len(rest) < int(headers.get("content-length", 0)):
            rest += conn.recv(65536)
        path = lines[0].split(" ")[1]
        if path == "/health" or path == "/ready":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            return True
        came = time.monotonic()
        probe = headers.get("x-probe", "")
        with self.lock:
            self.received[probe] = self.received.get(probe, 0) + 1
        if path == "/stream":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for index in range(EVENTS):
                time.sleep(EVERY)
                event = b'data: {"choices":[{"text":"t%d"}]}\n\n' % index
                conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
            conn.sendall(b"0\r\n\r\n")
            return False
        if path == "/pause":
            # A stream that pauses after its first event (the next token is slow to come).
            event = b'data: {"choices":[{"text":"t0"}]}\n\n'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"%x\r\n%s\r\n" % (len(event), event))
        # /slow, /hold, /pause: wait for the answer's time or for the gateway's close.
        while time.monotonic() - came < HOLD:
            if select.select([conn], [], [], 0.01)[0]:
                try:
                    gone = conn.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                if gone:
                    self.closed[probe] = time.monotonic() - came
                    return False
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}')
        return True

    def close(self):
        self.listener.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    if not os.access(HAPROXY, os.X_OK):
        pytest.fail("haproxy is not installed at %s: run scripts/setup (it installs it)" % HAPROXY)
    tmp = tmp_path_factory.mktemp("gateway-traffic")
    stand_in = StandIn()
    backends = [{"name": "up-0", "host": "h", "address": ADDRESS, "port": stand_in.port, "model": "m"},
                {"name": "dead-0", "host": "h", "address": ADDRESS, "port": gateway_render.free_port(ADDRESS),
                 "model": "dead"}]
    config = gateway_render.render(
        tmp, ADDRESS, backends, gateway_timeout_server="%dms" % (TIMEOUT_SERVER * 1000),
        gateway_timeout_http_request="%dms" % (TIMEOUT_HTTP_REQUEST * 1000), gateway_check_interval="200ms",
        gateway_check_fall=1)
    check = subprocess.run([HAPROXY, "-c", "-f", config["config_path"]], check=False, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    log = open(tmp / "haproxy.log", "w")
    haproxy = subprocess.Popen([HAPROXY, "-db", "-f", config["config_path"]], stdout=log, stderr=log)
    try:
        port = config["listen_port"]
        deadline = time.monotonic() + 15
        while True:
            assert haproxy.poll() is None, (tmp / "haproxy.log").read_text()
            try:
                if exchange(port, request("/ready", "m"))[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the gateway did not answer for model m"
            time.sleep(0.1)
        yield {"port": port, "stand_in": stand_in}
    finally:
        haproxy.terminate()
        haproxy.wait(10)
        log.close()
        stand_in.close()


def request(path, model, probe="", extra=b""):
    """A POST of a small JSON body naming MODEL, as bytes."""
    body = json.dumps({"model": model, "prompt": "Hi", "stream": path == "/stream"}).encode()
    return (b"POST %s HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"X-Probe: %s\r\nContent-Length: %d\r\n%s\r\n%s" % (path.encode(), probe.encode(), len(body), extra, body))


def exchange(port, data, timeout=15):
    """Send DATA, read to the end: (status, lower-case headers, body)."""
    with socket.create_connection((ADDRESS, port), timeout=timeout) as conn:
        conn.sendall(data)
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    return parse(answer)


def parse(answer):
    head, dummy, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((name.strip().lower(), value.strip()) for name, dummy, value in
                   (line.partition(":") for line in lines[1:]))
    return int(lines[0].split(" ")[1]), headers, body


def arrivals(port):
    """Read a /stream answer from PORT: how many recv() calls returned
    data, the longest time between two of them, when (from the request) the
    first event came, and how many events came in all."""
    times, data, first = [], b"", None
    with socket.create_connection((ADDRESS, port), timeout=15) as conn:
        started = time.monotonic()
        conn.sendall(request("/stream", "m", "stream"))
        for chunk in iter(lambda: conn.recv(65536), b""):
            times.append(time.monotonic() - started)
            data += chunk
            if first is None and b"data: " in data:
                first = times[-1]
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    return {"arrivals": len(times), "events": data.count(b"data: "), "first_event_s": round(first, 3),
            "max_gap_s": round(max(gaps), 3)}


def error_of(answer, status):
    """The OpenAI-shaped error of a (status, headers, body) answer."""
    got, headers, body = answer
    assert got == status, answer
    assert headers.get("content-type") == "application/json", answer
    error = json.loads(body)["error"]
    assert error["code"] == status and error["type"].endswith("Error") and error["message"], error
    return error


def test_a_stream_reaches_the_client_event_by_event(gateway):
    """Without http-no-delay HAProxy gathers small writes into full packets
    and the events arrive in bursts up to ~200 ms apart."""
    direct = arrivals(gateway["stand_in"].port)
    through = arrivals(gateway["port"])
    print("\nSSE stream, %d events %d ms apart: direct %s; through the gateway %s" % (
        EVENTS, EVERY * 1000, direct, through))
    assert through["events"] == EVENTS
    assert through["arrivals"] >= EVENTS - 5, through
    assert through["max_gap_s"] < 0.15 and through["first_event_s"] < 0.15, through


def test_a_slow_answer_is_not_sent_again(gateway):
    """An instance that does not answer within timeout server may still be
    working on the request: the client gets a 504 at once, the instance
    sees the request once (a replay would be another prefill)."""
    started = time.monotonic()
    answer = exchange(gateway["port"], request("/slow", "m", "slow"))
    waited = time.monotonic() - started
    time.sleep(0.3)  # a replay would follow the timeout at once
    assert gateway["stand_in"].received.get("slow") == 1, gateway["stand_in"].received
    assert waited < TIMEOUT_SERVER + 1, waited
    error = error_of(answer, 504)
    assert error["type"] == "GatewayTimeoutError" and "gateway_timeout_server" in error["message"], error


def test_a_client_that_leaves_closes_the_instances_connection(gateway):
    """vLLM aborts a request whose connection closes: the gateway must
    close it when the client goes, not when the answer is ready."""
    stand_in = gateway["stand_in"]
    with socket.create_connection((ADDRESS, gateway["port"]), timeout=10) as conn:
        conn.sendall(request("/hold", "m", "hold"))
        time.sleep(0.5)
    deadline = time.monotonic() + HOLD
    while "hold" not in stand_in.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    # Closed soon after the client left at 0.5 s: before timeout server, long before HOLD.
    assert stand_in.closed.get("hold", HOLD) < 1.5, stand_in.closed
    assert stand_in.received.get("hold") == 1, stand_in.received


def test_a_client_that_leaves_a_paused_stream_closes_the_instances_connection(gateway):
    """The same while a stream waits for its next event: the instance
    learns it now, not when it next writes."""
    stand_in = gateway["stand_in"]
    with socket.create_connection((ADDRESS, gateway["port"]), timeout=10) as conn:
        conn.sendall(request("/pause", "m", "pause"))
        seen = b""
        while b"data: " not in seen:
            seen += conn.recv(65536)
        left = time.monotonic()
    deadline = left + HOLD
    while "pause" not in stand_in.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "pause" in stand_in.closed and time.monotonic() - left < 1.0, stand_in.closed


def test_no_instance_up_is_a_json_503(gateway):
    error = error_of(exchange(gateway["port"], request("/v1/completions", "dead")), 503)
    assert error["type"] == "ServiceUnavailableError" and "retry later" in error["message"], error


def test_a_malformed_body_is_a_json_400(gateway):
    """HAProxy's parser refuses a chunk size that is no hex number; the
    bad chunk comes after the headers, once the request is being read."""
    with socket.create_connection((ADDRESS, gateway["port"]), timeout=10) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: gateway\r\nX-Model: m\r\nContent-Type: application/json"
                     b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        time.sleep(0.2)
        conn.sendall(b"zz\r\n{}\r\n0\r\n\r\n")
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    assert error_of(parse(answer), 400)["type"] == "BadRequestError"


def test_a_body_that_stops_coming_is_a_json_408(gateway):
    with socket.create_connection((ADDRESS, gateway["port"]), timeout=10) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: gateway\r\nX-Model: m\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\n\r\n{\"model\":")
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    error = error_of(parse(answer), 408)
    assert "gateway_timeout_http_request" in error["message"], error


@pytest.mark.xfail(strict=True, reason="HAProxy 2.6's HTTP/1 parser answers a request line it cannot parse with "
                                       "its built-in HTML page: neither http-error nor errorfile reaches it")
def test_a_malformed_request_line_is_a_json_400(gateway):
    error_of(exchange(gateway["port"], b"NOT AN HTTP REQUEST\r\n\r\n"), 400)
