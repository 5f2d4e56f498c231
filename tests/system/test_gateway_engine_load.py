# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The engine's own load at the real HAProxy: role vllm's agent and load
reader on two GPU hosts, role gateway's agent-check.

Two GPU hosts on loopback addresses the test owns (127.0.88.1 and
127.0.88.2), each with a vLLM stand-in (tests/stub/vllm-stub with
--max-num-seqs 1: one request runs, the others wait and show in
vllm:num_requests_waiting, as vLLM's do beyond its batch), its unit's
state written by the shipped gpufleet-agent-state (ready, with the
instance's /metrics URL), the host's load reader (gpufleet-agent-weights,
every 0.2 s) and the host's agent on port 8999 (gpufleet-agent, one
process per connection, standard input and output the connection, as the
socket unit's Accept=yes runs it). The real HAProxy runs the gateway as
the role renders it (leastconn, agent-check every second).

- idle, both servers weigh SERVER_WEIGHT (100% of it);
- eleven requests at once through the gateway spread evenly (leastconn);
- 16 or more requests waiting at host A's instance (sent straight to it): its
  weight at the gateway drops to the floor, 10, B's stays 100, and of
  eleven requests at once through the gateway A takes at most two
  (leastconn divides each server's connections by its weight);
- its queue gone, A weighs 100 again and takes its share again;
- A's unit stops (the drain's 0%): A weighs 0 and takes nothing.
"""

import os
import pathlib
import shutil
import socket
import subprocess
import threading

import pytest

from fleet_processes import ProcessGroup, free_port, haproxy_server_rows, http_request, wait_for_health, wait_until
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import agent
from ansible_collections.gpufleet.numa.tests.fixtures import gateway_render

REPO = pathlib.Path(__file__).resolve().parents[2]
STUB = REPO / "tests" / "stub" / "vllm-stub"
FILES = REPO / "roles" / "vllm" / "files"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
HOSTS = {"a": "127.0.88.1", "b": "127.0.88.2"}
MODEL = "llama"
GATEWAY = "127.0.88.9"

pytestmark = pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (scripts/setup)")


class HostAgent(object):
    """The agent's socket unit on ADDRESS:8999: one gpufleet-agent per connection."""

    def __init__(self, address, prefix, weights):
        self.argv = [str(FILES / "gpufleet-agent"), prefix, weights]
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((address, agent.AGENT_PORT))
        self.listener.listen(64)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                connection, dummy = self.listener.accept()
            except OSError:
                return
            with connection:
                subprocess.run(self.argv, stdin=connection, stdout=connection, timeout=10, check=False)

    def close(self):
        self.listener.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("engine-load")
    processes = ProcessGroup(str(tmp))
    agents = []
    try:
        backends, hosts = [], {}
        for host, address in sorted(HOSTS.items()):
            port = free_port(address)
            processes.start("stub-" + host, [str(STUB), "serve", MODEL, "--host", address, "--port", str(port),
                                             "--max-num-seqs", "1"], dict(os.environ))
            wait_for_health(processes, "stub-" + host, address, port)
            prefix = "%s/%s/gpufleet-" % (tmp, host)
            weights = prefix + agent.WEIGHTS
            os.makedirs(prefix + "vllm-0")
            os.makedirs(weights)
            state = prefix + "vllm-0/" + agent.STATE_FILE
            subprocess.run([str(FILES / "gpufleet-agent-state"), "ready", state,
                            "http://%s:%d/metrics" % (address, port)], check=True, timeout=10)
            processes.start("reader-" + host, [str(FILES / "gpufleet-agent-weights"), prefix, weights, "0.2"],
                            dict(os.environ))
            agents.append(HostAgent(address, prefix, weights))
            backends.append({"name": "%s-vllm-0" % host, "host": host, "address": address, "port": port,
                             "model": MODEL, "agent": "vllm-0"})
            hosts[host] = {"address": address, "port": port, "state": state}
        stats_port = free_port(GATEWAY)
        settings = gateway_render.render(tmp, GATEWAY, backends, gateway_stats_port=stats_port,
                                         gateway_stats_address=GATEWAY, gateway_check_interval="300ms")
        haproxy = processes.start("haproxy", [HAPROXY, "-db", "-f", settings["config_path"]], dict(os.environ))
        gateway = {"port": settings["listen_port"], "stats_port": stats_port, "haproxy": haproxy}
        yield {"processes": processes, "hosts": hosts, "gateway": gateway}
    finally:
        for host_agent in agents:
            host_agent.close()
        processes.stop_all()


def weights(fleet):
    """{host: its server's weight at the gateway} of the servers UP."""
    if fleet["gateway"]["haproxy"].poll() is not None:
        raise AssertionError("haproxy exited:\n" + fleet["processes"].log("haproxy"))
    try:
        rows = haproxy_server_rows(GATEWAY, fleet["gateway"]["stats_port"])
    except OSError:
        return {}  # not listening yet
    return dict((name.split("-", 1)[0], int(row["weight"])) for name, row in rows.items() if row["status"] == "UP")


def answered_by(fleet, count, seconds=0.0):
    """Which host answered each of COUNT completions sent through the
    gateway: one after another (SECONDS 0), or all at once, each held open
    SECONDS by its instance."""
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 10, "stream": True, "stub_token_delay": seconds / 10.0}
    hosts = []

    def send():
        status, headers, answer = http_request(GATEWAY, fleet["gateway"]["port"], "POST", "/v1/completions",
                                               body=body, timeout=60)
        assert status == 200, answer
        hosts.extend(host for host, address in HOSTS.items() if headers["x-stub-instance"].startswith(address + ":"))
    if not seconds:
        for dummy in range(count):
            send()
        return hosts
    threads = [threading.Thread(target=send, daemon=True) for dummy in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert len(hosts) == count, hosts
    return sorted(hosts)


def hold(fleet, host, count, seconds):
    """COUNT streamed requests straight to HOST's instance, each SECONDS long (one runs, the others wait)."""
    target = fleet["hosts"][host]
    body = {"model": MODEL, "prompt": "hold", "max_tokens": 20, "stream": True, "stub_token_delay": seconds / 20.0}

    def send():
        http_request(target["address"], target["port"], "POST", "/v1/completions", body=body,
                     timeout=count * seconds + 30)
    threads = [threading.Thread(target=send, daemon=True) for dummy in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_a_loaded_instance_weighs_less_at_the_gateway_and_a_drain_wins(fleet):
    full = agent.SERVER_WEIGHT
    wait_until(lambda: weights(fleet) == {"a": full, "b": full}, 20, what="both servers UP at full weight")
    # Eleven requests at once, each 1.5 s: leastconn spreads them evenly.
    even = answered_by(fleet, 11, 1.5)
    assert 4 <= even.count("a") <= 7, even
    # One request runs at A, the others wait behind it, 16 or more for
    # about 12 s (a window wide enough for a loaded 2-core machine to see
    # it, where 30 requests' 7 s was once missed): the lowest weight.
    threads = hold(fleet, "a", 40, 0.5)
    wait_until(lambda: weights(fleet).get("a") == 10, 15, what="A's weight for 16 waiting")
    assert weights(fleet)["b"] == full
    # leastconn counts A's connections ten times B's: B takes nearly all.
    loaded = answered_by(fleet, 11, 1.5)
    assert loaded.count("a") <= 2, loaded
    for thread in threads:
        thread.join(timeout=60)
    wait_until(lambda: weights(fleet) == {"a": full, "b": full}, 20, what="A's full weight again")
    assert 4 <= answered_by(fleet, 11, 1.5).count("a") <= 7
    # A's unit is asked to stop: 0%, whatever its load (no engine waited for here).
    environment = dict(os.environ)
    environment.pop("MAINPID", None)
    subprocess.run([str(FILES / "gpufleet-agent-state"), "drain", fleet["hosts"]["a"]["state"], "http://x/metrics",
                    "0", "0"], check=True, timeout=10, env=environment)
    wait_until(lambda: weights(fleet).get("a", 0) == 0, 10, what="A drained")
    assert answered_by(fleet, 6) == ["b"] * 6
