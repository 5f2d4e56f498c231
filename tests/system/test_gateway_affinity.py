# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Prefix affinity (gateway_affinity) at the real HAProxy.

The role's template and settings check (tests/fixtures/gateway_render)
render a gateway for two models on loopback: "hashed" on four vLLM
stand-ins (tests/stub/vllm-stub) with prefix affinity (the first 64 bytes
of the prompt, or the X-Session-Id header; balance factor 125), "plain" on
two stand-ins with the defaults (leastconn). The real HAProxy 2.6 runs it
with the role's Lua reader. Each stand-in names itself in X-Stub-Instance.

- (a) every request whose prompt starts with the same 64 bytes (a
  completion's prompt; a chat's system prompt and first user message,
  whatever turns follow) reaches the same instance, and different prefixes
  spread over the instances; a session header wins over the prompt;
- (b) one hot prefix under load: 24 clients, 80% of their requests with one
  prefix, each held 0.3 s by its instance. No instance ever has more than
  ceil((in flight + 1) x 1.25 / 4) requests in flight (HAProxy's
  bounded-load rule, read as each server's smax from the statistics CSV);
  the same configuration without hash-balance-factor piles them onto one;
- (c) the default is unchanged: the plain model's backend is leastconn and
  one prompt sent again and again reaches both its instances.
"""

import collections
import math
import os
import pathlib
import shutil
import subprocess
import threading

import pytest

from fleet_processes import ProcessGroup, free_port, haproxy_server_rows, http_request, wait_for_health, wait_until
from ansible_collections.gpufleet.numa.tests.fixtures import gateway_render

REPO = pathlib.Path(__file__).resolve().parents[2]
STUB = REPO / "tests" / "stub" / "vllm-stub"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
ADDRESS = "127.0.0.1"
HASHED, PLAIN = "hashed", "plain"
HASHED_INSTANCES, PLAIN_INSTANCES = 4, 2
PREFIX_BYTES = 64
FACTOR = 125
SESSION_HEADER = "X-Session-Id"
# The skewed load: clients, requests each, the hot share, hold per request.
CLIENTS, REQUESTS, HOT_SHARE, TOKENS, TOKEN_DELAY = 24, 12, 0.8, 3, 0.1

pytestmark = pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (scripts/setup)")


def run_haproxy(processes, name, config, stats_port, servers):
    check = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    haproxy = processes.start(name, [HAPROXY, "-db", "-f", str(config)], dict(os.environ))

    def all_up():
        if haproxy.poll() is not None:
            raise AssertionError("haproxy exited:\n" + processes.log(name))
        try:
            rows = server_rows(stats_port)
        except OSError:
            return False
        return len(rows) == servers and all(row["status"] == "UP" for row in rows.values())

    wait_until(all_up, 20, what="every server UP")
    return haproxy


def server_rows(stats_port, backend=None):
    """{server name: its row of HAProxy's statistics CSV}."""
    return haproxy_server_rows(ADDRESS, stats_port, backend=backend)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway-affinity")
    processes = ProcessGroup(str(tmp))
    try:
        backends = []
        for model, count in ((HASHED, HASHED_INSTANCES), (PLAIN, PLAIN_INSTANCES)):
            for index in range(count):
                port = free_port(ADDRESS)
                name = "%s-%d" % (model, index)
                processes.start(name, [str(STUB), "serve", model, "--host", ADDRESS, "--port", str(port)],
                                dict(os.environ))
                wait_for_health(processes, name, ADDRESS, port)
                backends.append({"name": name, "host": "gpu", "address": ADDRESS, "port": port, "model": model})
        yield {"tmp": tmp, "processes": processes, "backends": backends,
               "ports": dict((b["port"], b["name"]) for b in backends)}
    finally:
        processes.stop_all()


@pytest.fixture(scope="module")
def gateway(fleet):
    """The gateway as the role renders it, running."""
    tmp = fleet["tmp"] / "bounded"
    tmp.mkdir()
    stats_port = free_port(ADDRESS)
    settings = gateway_render.render(
        tmp, ADDRESS, fleet["backends"], gateway_stats_port=stats_port, gateway_check_interval="300ms",
        gateway_check_fall=2, gateway_check_rise=1,
        gateway_affinity={HASHED: {"prefix_bytes": PREFIX_BYTES, "balance_factor": FACTOR,
                                   "session_header": SESSION_HEADER}})
    run_haproxy(fleet["processes"], "haproxy-bounded", settings["config_path"], stats_port, len(fleet["backends"]))
    return {"port": settings["listen_port"], "stats_port": stats_port, "config": settings["config_path"]}


def idle(gateway):
    """Wait until no request is in flight at the hashed model's instances.
    A client may send its next request before HAProxy has counted the last
    one's end: with one request in flight, four instances and the factor
    1.25, each instance may hold only one, and the next request with the
    same key would go to the next instance on the ring."""
    wait_until(lambda: all(row["scur"] == "0" for row in server_rows(gateway["stats_port"], "model-" + HASHED).values()),
               10, interval=0.01, what="no request in flight")


def answered_by(fleet, port, path, body, headers=None, timeout=10.0):
    status, answer_headers, answer = http_request(ADDRESS, port, "POST", path, body=body, headers=headers,
                                                  timeout=timeout)
    assert status == 200, answer
    return fleet["ports"][int(answer_headers["x-stub-instance"].rsplit(":", 1)[1])]


def prefix(number):
    """A prompt prefix of exactly PREFIX_BYTES bytes."""
    return ("Shared document %04d: " % number).ljust(PREFIX_BYTES, "#")


def completion(number, tail, **extra):
    return dict({"model": HASHED, "prompt": prefix(number) + tail, "max_tokens": 2}, **extra)


def chat(system, first, turns):
    """A chat: a system prompt and a first user message (as a text part),
    together shorter than PREFIX_BYTES, then TURNS more (assistant, user)
    pairs."""
    messages = [{"role": "system", "content": "You answer about document %d." % system},
                {"role": "user", "content": [{"type": "text", "text": "Question %d" % first}]}]
    for turn in range(turns):
        messages += [{"role": "assistant", "content": "answer %d" % turn},
                     {"role": "user", "content": "question %d" % turn}]
    return {"model": HASHED, "messages": messages, "max_tokens": 2}


def test_the_same_prefix_reaches_the_same_instance(fleet, gateway):
    port = gateway["port"]
    by_prefix = {}
    for number in range(16):
        seen = set(idle(gateway) or answered_by(fleet, port, "/v1/completions", completion(number, " tail %d" % tail))
                   for tail in range(4))
        assert len(seen) == 1, (number, seen)
        by_prefix[number] = seen.pop()
    # Different prefixes spread over the instances.
    assert len(set(by_prefix.values())) >= 3, by_prefix
    # A conversation: the system prompt and first turn decide, whatever follows.
    for number in (100, 101, 102):
        seen = set(idle(gateway) or answered_by(fleet, port, "/v1/chat/completions", chat(number, 1, turns))
                   for turns in range(4))
        assert len(seen) == 1, (number, seen)
    # ... and the first user message is part of the key, not the system prompt alone.
    seen = set(idle(gateway) or answered_by(fleet, port, "/v1/chat/completions", chat(100, first, 0))
               for first in range(8))
    assert len(seen) > 1, seen
    # A prompt of token ids: the first bytes of its JSON text are the key.
    for tokens in (list(range(100, 140)), list(range(900, 940))):
        seen = set(idle(gateway) or answered_by(fleet, port, "/v1/completions",
                                                {"model": HASHED, "prompt": tokens + [tail], "max_tokens": 2})
                   for tail in range(3))
        assert len(seen) == 1, (tokens, seen)
    # A request without a key (no prompt read) is spread round-robin.
    seen = set(idle(gateway) or answered_by(fleet, port, "/v1/completions", {"model": HASHED, "max_tokens": 2})
               for dummy in range(8))
    assert len(seen) > 1, seen
    # A session header wins over the prompt: one session, many prompts, one instance.
    for session in ("alice", "bob", "carol"):
        seen = set(idle(gateway) or answered_by(fleet, port, "/v1/completions", completion(number, ""),
                                                headers={SESSION_HEADER: session}) for number in range(200, 206))
        assert len(seen) == 1, (session, seen)


def test_the_default_is_leastconn_and_knows_no_prefix(fleet, gateway):
    text = pathlib.Path(gateway["config"]).read_text()
    plain = text.split("backend model-%s\n" % PLAIN, 1)[1].split("\n\n", 1)[0]
    assert "    balance leastconn\n" in plain and "hash" not in plain, plain
    seen = collections.Counter(
        answered_by(fleet, gateway["port"], "/v1/completions", dict(completion(7, ""), model=PLAIN))
        for dummy in range(8))
    assert set(seen) == {"%s-%d" % (PLAIN, index) for index in range(PLAIN_INSTANCES)}, seen


def skewed_load(fleet, port):
    """CLIENTS clients at once, REQUESTS each, HOT_SHARE of them with one
    prefix, each held TOKENS x TOKEN_DELAY s; {instance: requests}."""
    served = collections.Counter()
    failures = []
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS)

    def client(index):
        start.wait()
        for request in range(REQUESTS):
            hot = (index * REQUESTS + request) % 10 < HOT_SHARE * 10
            body = completion(0 if hot else 1000 + index * REQUESTS + request, " request %d-%d" % (index, request),
                              max_tokens=TOKENS, stub_token_delay=TOKEN_DELAY)
            try:
                name = answered_by(fleet, port, "/v1/completions", body, timeout=30.0)
            except (AssertionError, OSError) as error:
                with lock:
                    failures.append(repr(error))
                continue
            with lock:
                served[name] += 1

    threads = [threading.Thread(target=client, args=(index,)) for index in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures[:5]
    return served


def most_in_flight(stats_port):
    """{instance: the most requests it had in flight at once} (smax)."""
    return dict((name, int(row["smax"])) for name, row in server_rows(stats_port, "model-" + HASHED).items())


def test_a_hot_prefix_is_bounded_by_the_balance_factor(fleet, gateway, capsys):
    served = skewed_load(fleet, gateway["port"])
    peak = most_in_flight(gateway["stats_port"])
    # HAProxy's bound: a server takes a request while it has fewer than
    # ceil((in flight + 1) x factor / 100 / servers) (equal weights).
    bound = math.ceil((CLIENTS + 1) * FACTOR / 100.0 / HASHED_INSTANCES)
    total = sum(served.values())
    assert total == CLIENTS * REQUESTS
    assert max(peak.values()) <= bound, (peak, bound)
    busiest = max(served.values()) / float(total)

    # The same configuration without the bound: the hot prefix piles up.
    tmp = fleet["tmp"] / "unbounded"
    tmp.mkdir()
    text = pathlib.Path(gateway["config"]).read_text()
    assert "    hash-balance-factor %d\n" % FACTOR in text
    stats_port = free_port(ADDRESS)
    listen_port = free_port(ADDRESS)
    unbounded = text.replace("    hash-balance-factor %d\n" % FACTOR, "").replace(
        "%s:%d" % (ADDRESS, gateway["port"]), "%s:%d" % (ADDRESS, listen_port)).replace(
        "%s:%d" % (ADDRESS, gateway["stats_port"]), "%s:%d" % (ADDRESS, stats_port))
    (tmp / "haproxy.cfg").write_text(unbounded.replace(str(pathlib.Path(gateway["config"]).parent), str(tmp)))
    shutil.copy(pathlib.Path(gateway["config"]).parent / "gpufleet-request-model.lua", tmp)
    haproxy = run_haproxy(fleet["processes"], "haproxy-unbounded", tmp / "haproxy.cfg", stats_port,
                          len(fleet["backends"]))
    try:
        served_unbounded = skewed_load(fleet, listen_port)
        peak_unbounded = most_in_flight(stats_port)
    finally:
        fleet["processes"].stop("haproxy-unbounded")
    busiest_unbounded = max(served_unbounded.values()) / float(sum(served_unbounded.values()))
    assert max(peak_unbounded.values()) > bound, peak_unbounded
    with capsys.disabled():
        print("\nhot prefix, %d clients, %d%% hot: factor %d: busiest instance %.0f%% of requests, peak in flight %s "
              "(bound %d); unbounded: busiest %.0f%%, peak %s" % (
                  CLIENTS, HOT_SHARE * 100, FACTOR, busiest * 100, sorted(peak.values(), reverse=True), bound,
                  busiest_unbounded * 100, sorted(peak_unbounded.values(), reverse=True)))
    assert haproxy.returncode is not None
