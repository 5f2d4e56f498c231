# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The helpers a rolling restart runs, against real processes.

- gpufleet-wait-ready (every unit's ExecStartPost=) against the stand-in
  vLLM that opens its port only after a start-up delay;
- gpufleet-gateway-server (the role delegates it to each gateway) against a
  real HAProxy with its runtime API on a UNIX socket, in front of two
  stand-in instances: drain waits for the in-flight request, a drained
  server gets no new request, ready brings it back, and the cases the role
  must skip cleanly (no socket, a server HAProxy does not know) change nothing.
- the gateway role's L7 retries: an instance killed with requests in flight
  loses none of them (non-streamed);
- the roll itself on two local hosts under the stand-in service manager of
  benchmarks/bench_parallel_rollout.py: one include per instance ordinal
  for both hosts, every unit restarted.

Nothing here asserts a duration: waits are bounded, outcomes are checked.
"""

import csv
import os
import re
import sys
import json
import pathlib
import shutil
import signal
import socket
import subprocess
import threading
import time

import jinja2
import pytest
import yaml

from fleet_processes import free_port, http_request, wait_for_health, wait_until
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings

REPO = pathlib.Path(__file__).resolve().parents[2]
STUB = REPO / "tests" / "stub" / "vllm-stub"
FILES = REPO / "roles" / "vllm" / "files"
WAIT_READY = FILES / "gpufleet-wait-ready"
GATEWAY_SERVER = FILES / "gpufleet-gateway-server"
TEMPLATE = REPO / "roles" / "gateway" / "templates" / "haproxy.cfg.j2"
HAPROXY = "/usr/sbin/haproxy"
ADDRESS = "127.0.0.32"
MODEL = "m"
BACKEND = "model-m"  # gateway_settings.backend_name of model m


def start_stub(processes, name, extra=(), port=None, wait=True):
    port = port or free_port(ADDRESS)
    processes.start(name, [str(STUB), "serve", MODEL, "--host", ADDRESS, "--port", str(port)] + list(extra), None)
    if wait:
        wait_for_health(processes, name, ADDRESS, port)
    return port


def run(argv, timeout=60):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, timeout=timeout)


# --- gpufleet-wait-ready --------------------------------------------------

def test_wait_ready_returns_once_the_instance_serves(processes):
    port = start_stub(processes, "slow", ["--stub-startup-delay", "1.5"], wait=False)
    url = "http://%s:%d/health" % (ADDRESS, port)
    result = run([WAIT_READY, url, "60"])
    assert result.returncode == 0, result.stderr
    # It returned because the instance answers, not because time passed.
    assert http_request(ADDRESS, port, "GET", "/health")[0] == 200


def test_wait_ready_fails_naming_the_url_when_nothing_answers():
    url = "http://%s:%d/health" % (ADDRESS, free_port(ADDRESS))
    result = run([WAIT_READY, url, "1"])
    assert result.returncode == 1
    assert url in result.stderr and "within 1 s" in result.stderr


def test_wait_ready_ignores_proxies_of_the_environment(processes):
    port = start_stub(processes, "stub")
    result = subprocess.run([str(WAIT_READY), "http://%s:%d/health" % (ADDRESS, port), "5"], capture_output=True,
                            text=True, check=False, timeout=60,
                            env={"http_proxy": "http://%s:%d" % (ADDRESS, free_port(ADDRESS)),
                                 "HTTP_PROXY": "http://192.0.2.1:3128", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr


def test_wait_ready_tcp_returns_once_the_port_accepts_connections():
    # A multi-node instance's headless rank waits for the head's rendezvous port.
    port = free_port(ADDRESS)
    waiter = subprocess.Popen([str(WAIT_READY), "tcp://%s:%d" % (ADDRESS, port), "60"], stderr=subprocess.PIPE,
                              text=True)
    try:
        time.sleep(1.5)
        assert waiter.poll() is None, "returned before anything listened: %s" % waiter.stderr.read()
        with socket.create_server((ADDRESS, port)):
            assert waiter.wait(timeout=30) == 0, waiter.stderr.read()
    finally:
        if waiter.poll() is None:
            waiter.kill()
        waiter.wait()


def test_wait_ready_tcp_fails_naming_the_port_when_nothing_listens():
    url = "tcp://%s:%d" % (ADDRESS, free_port(ADDRESS))
    result = run([WAIT_READY, url, "1"])
    assert result.returncode == 1
    assert url in result.stderr and "did not accept a connection within 1 s" in result.stderr


@pytest.mark.parametrize("argv", [[], ["http://127.0.0.1:1/health"], ["http://127.0.0.1:1/health", "soon"],
                                  ["tcp://127.0.0.1/", "5"], ["tcp://:29501", "5"]])
def test_wait_ready_usage(argv):
    result = run([WAIT_READY] + argv)
    assert result.returncode == 2 and result.stderr


# --- HAProxy and its runtime API -------------------------------------------

def render_gateway(tmp_path, servers, retries=True):
    """The gateway role's own template with its own settings check
    (gpufleet.numa.gateway_settings) over the role's defaults and what a test
    needs: HAProxy in the foreground as this user, the runtime API socket
    in TMP_PATH, quick checks, one model served by SERVERS [(name, port)]."""
    defaults = yaml.safe_load((REPO / "roles" / "gateway" / "defaults" / "main.yml").read_text())
    variables = {key: defaults[key] for key in gateway_settings.VARIABLES if key in defaults}
    variables.update({
        "gateway_log_target": "", "gateway_chroot": "", "gateway_user": "", "gateway_group": "",
        "gateway_admin_socket": str(tmp_path / "admin.sock"), "gateway_listen_address": ADDRESS,
        "gateway_listen_port": free_port(ADDRESS), "gateway_monitor_uri": "", "gateway_balance": "roundrobin",
        "gateway_check_interval": "200ms", "gateway_check_fall": 2, "gateway_check_rise": 1,
        "gateway_timeout_connect": "2s", "gateway_config_path": str(tmp_path / "haproxy.cfg"),
        "gateway_backends": [{"name": name, "host": "h", "address": ADDRESS, "port": port, "model": MODEL,
                              "backend": BACKEND} for name, port in servers],
    })
    settings = gateway_settings.check_settings(variables)
    # The configuration loads the role's reader of the body's model.
    shutil.copy(REPO / "roles" / "gateway" / "files" / gateway_settings.BODY_READER, settings["body_reader"])
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    environment.filters["comment"] = lambda text: "# " + text
    text = environment.from_string(TEMPLATE.read_text()).render(__gateway=settings, ansible_managed="test")
    if not retries:
        text = "\n".join(line for line in text.splitlines() if "retry-on" not in line) + "\n"
    config = tmp_path / "haproxy.cfg"
    config.write_text(text)
    check = run([HAPROXY, "-c", "-f", config])
    assert check.returncode == 0, check.stdout + check.stderr
    return config, settings["admin_socket"], settings["listen_port"]


def start_gateway(processes, tmp_path, servers, retries=True):
    config, socket_path, port = render_gateway(tmp_path, servers, retries)
    processes.start("haproxy", [HAPROXY, "-db", "-f", str(config)], None)
    wait_until(lambda: all(status(socket_path, name) == "UP" for name, dummy in servers), 15,
               what="HAProxy checks every server UP")
    return socket_path, port


def show_stat(socket_path, server):
    """HAProxy's `show stat` row of vllm/SERVER, straight from the socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(socket_path)
        conn.sendall(b"show stat\n")
        text = b"".join(iter(lambda: conn.recv(65536), b"")).decode()
    lines = text.splitlines()
    for row in csv.DictReader([lines[0][2:]] + lines[1:]):
        if row["pxname"] == BACKEND and row["svname"] == server:
            return row
    return {}


def status(socket_path, server):
    try:
        return show_stat(socket_path, server).get("status")
    except OSError:
        return None


def session_count(socket_path, server):
    return int(show_stat(socket_path, server).get("scur") or 0)


def gateway_server(socket_path, server, action, seconds=30, backend=BACKEND):
    result = run([GATEWAY_SERVER, socket_path, backend, server, action, seconds], timeout=seconds + 30)
    answer = json.loads(result.stdout) if result.stdout.strip() else None
    return result.returncode, answer, result.stderr


def completion(port, delay=None):
    body = {"model": MODEL, "prompt": "x", "max_tokens": 8}
    if delay is not None:
        body["stub_token_delay"] = delay
    code, headers, data = http_request(ADDRESS, port, "POST", "/v1/completions", body, timeout=30)
    return code, headers.get("x-stub-instance")


def test_drain_waits_for_requests_and_ready_brings_the_server_back(processes, tmp_path):
    ports = [start_stub(processes, "vllm-%d" % i) for i in range(2)]
    servers = [("h-vllm-%d" % i, port) for i, port in enumerate(ports)]
    socket_path, front = start_gateway(processes, tmp_path, servers)
    first = "%s:%d" % (ADDRESS, ports[0])

    # Slow requests (2 s each) through HAProxy, in turn on both servers.
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault(
        "through", [completion(front, 0.25) for dummy in range(2)]))
    thread.start()
    wait_until(lambda: session_count(socket_path, "h-vllm-0") > 0, 15, what="a session on h-vllm-0")
    code, answer, stderr = gateway_server(socket_path, "h-vllm-0", "drain")
    assert code == 0 and answer["changed"] is True, (answer, stderr)
    # drain returned only once HAProxy had no session left on the server.
    assert session_count(socket_path, "h-vllm-0") == 0
    thread.join(60)
    assert all(code == 200 for code, dummy in done["through"]), done
    # Drained: no new request reaches it.
    assert {completion(front)[1] for dummy in range(6)} == {"%s:%d" % (ADDRESS, ports[1])}
    # Draining again changes nothing.
    assert gateway_server(socket_path, "h-vllm-0", "drain")[1]["changed"] is False

    # The instance restarts; HAProxy's checks see it go and come back.
    processes.stop("vllm-0")
    wait_until(lambda: status(socket_path, "h-vllm-0") == "DOWN", 15, what="h-vllm-0 DOWN")
    start_stub(processes, "vllm-0b", port=ports[0])
    code, answer, stderr = gateway_server(socket_path, "h-vllm-0", "ready")
    assert code == 0 and answer["changed"] is True and answer["status"] == "UP", (answer, stderr)
    wait_until(lambda: first in {completion(front)[1] for dummy in range(4)}, 15, what="requests on h-vllm-0")
    assert gateway_server(socket_path, "h-vllm-0", "ready")[1]["changed"] is False


def test_gateway_server_skips_what_it_cannot_drain(processes, tmp_path):
    code, answer, dummy = gateway_server(str(tmp_path / "none.sock"), "h-vllm-0", "drain")
    assert code == 0 and answer["changed"] is False and "no runtime API socket" in answer["msg"]
    port = start_stub(processes, "vllm-0")
    socket_path, dummy = start_gateway(processes, tmp_path, [("h-vllm-0", port)])
    for backend, server in (("vllm", "h-vllm-9"), ("other", "h-vllm-0")):
        code, answer, dummy = gateway_server(socket_path, server, "drain", backend=backend)
        assert code == 0 and answer["changed"] is False and "has no server" in answer["msg"], answer
    assert status(socket_path, "h-vllm-0") == "UP"


def test_ready_fails_when_haproxy_does_not_take_the_server_back(processes, tmp_path):
    port = start_stub(processes, "vllm-0")
    socket_path, dummy = start_gateway(processes, tmp_path, [("h-vllm-0", port)])
    assert gateway_server(socket_path, "h-vllm-0", "drain")[0] == 0
    processes.stop("vllm-0")
    wait_until(lambda: status(socket_path, "h-vllm-0") == "DOWN", 15, what="h-vllm-0 DOWN")
    code, answer, dummy = gateway_server(socket_path, "h-vllm-0", "ready", seconds=1)
    assert code == 1 and "not reached within 1 s" in answer["msg"], answer


# --- L7 retries --------------------------------------------------------------

def kill_under_load(processes, tmp_path, retries):
    """Four clients through the gateway; one instance is killed (SIGKILL)
    while requests are in flight on it. Returns the failed requests."""
    ports = [start_stub(processes, "vllm-%d" % i) for i in range(2)]
    socket_path, front = start_gateway(processes, tmp_path, [("h-vllm-%d" % i, p) for i, p in enumerate(ports)],
                                       retries)
    results = []
    stop = threading.Event()

    def client():
        while not stop.is_set():
            try:
                results.append(completion(front, 0.02)[0])
            except OSError as error:
                results.append(type(error).__name__)
    threads = [threading.Thread(target=client) for dummy in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: session_count(socket_path, "h-vllm-0") > 0 and len(results) > 20, 15,
                   what="requests in flight on h-vllm-0")
        processes.signal("vllm-0", signal.SIGKILL)
        wait_until(lambda: status(socket_path, "h-vllm-0") == "DOWN", 15, what="h-vllm-0 DOWN")
        count = len(results)
        wait_until(lambda: len(results) > count + 20, 15, what="more requests")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    return [r for r in results if r != 200]


def test_killed_instance_loses_no_request_with_retries(processes, tmp_path):
    assert kill_under_load(processes, tmp_path, retries=True) == []


# --- the roll itself: every host at once --------------------------------------

def test_every_host_rolls_its_instances_at_the_same_time(tmp_path):
    """Two local hosts with two units each, under the stand-in service manager
    of benchmarks/bench_parallel_rollout.py: each per-instance step is one
    include for both hosts (not one per host, which Ansible runs host after
    host), and every unit is restarted and serves again."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_parallel_rollout as bench

    bin_dir, state = bench.setup(str(tmp_path), 2, 2, 0)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), PATH=bin_dir + os.pathsep + os.environ["PATH"])
    try:
        outputs, pids = [], []
        for roll in ("deploy", "roll"):
            result = subprocess.run([bench.PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), "-f", "2", "-e",
                                     "bench_roll=" + roll, str(tmp_path / "roll.yml")], env=env,
                                    capture_output=True, text=True, check=False, timeout=600)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
            outputs.append(result.stdout)
            # the instances' services (each host's agent socket runs no process
            # here; its load reader does, and is no instance)
            pids.append({path.name: json.loads(path.read_text())["pid"]
                         for path in pathlib.Path(state).glob("*.service.json") if "-agent-" not in path.name})
        # one include per ordinal for both hosts (in whichever order they finished)
        for ordinal in (0, 1):
            assert re.search(r"^included: \S+/instance\.yml for (h00, h01|h01, h00) => \(item=instance %d\)$"
                             % ordinal, outputs[1], re.M), outputs[1]
        assert len(pids[1]) == 4 and all(pids[1][unit] != pids[0][unit] for unit in pids[0]), pids
        for index in (0, 1):
            for port in (8000, 8001):
                assert http_request("127.0.80.%d" % (index + 1), port, "GET", "/health")[0] == 200
    finally:
        bench.stop_all(state)
