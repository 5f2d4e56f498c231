# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the gateway says about itself, and what a host's agent tells it, against the real HAProxy.

The role's template and settings check (tests/fixtures/gateway_render)
render a gateway of two models behind a key: org/m, served by a stand-in
instance in this process, and spare, whose instance is a port nobody
listens on until a test opens it. GET /v1/models and /v1/models/{id} say
how many instances of each model are up now; GET /health (open, no model
named) and the monitor URI are 200 only while every model has an instance
up; an unknown model's card is a 404 in OpenAI's shape; the body limit's
message states the limit that holds.
"""

import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import gateway_render

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
ADDRESS = "127.0.0.47"
KEY = "sk-gateway-models-test"
MODEL, SPARE = "org/m", "spare"


class Instance(http.server.BaseHTTPRequestHandler):
    """A stand-in instance: /health 200, any POST answers {"model": its body's model}."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"{}"):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.answer(200 if self.path == "/health" else 404)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer(200, json.dumps({"answered": len(body)}).encode())


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # HAProxy ends a health check with a reset


def serve(port=0):
    server = Server((ADDRESS, port), Instance)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    if not os.access(HAPROXY, os.X_OK):
        pytest.fail("haproxy is not installed at %s: run scripts/setup (it installs it)" % HAPROXY)
    tmp = tmp_path_factory.mktemp("gateway-models")
    instance = serve()
    spare_port = gateway_render.free_port(ADDRESS)
    backends = [{"name": "a-vllm-0", "host": "a", "address": ADDRESS, "port": instance.server_address[1],
                 "model": MODEL},
                {"name": "b-vllm-0", "host": "b", "address": ADDRESS, "port": spare_port, "model": SPARE}]
    settings = gateway_render.render(tmp, ADDRESS, backends, gateway_api_key=KEY, gateway_check_interval="100ms",
                                     gateway_check_fall=1, gateway_check_rise=1, gateway_buffer_size=32768)
    check = subprocess.run([HAPROXY, "-c", "-f", settings["config_path"]], check=False, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    log = open(tmp / "haproxy.log", "w")
    haproxy = subprocess.Popen([HAPROXY, "-db", "-f", settings["config_path"]], stdout=log, stderr=log)
    try:
        port = settings["listen_port"]
        wait_for(lambda: models(port) == {MODEL: 1, SPARE: 0}, "the gateway's first checks", haproxy)
        yield {"port": port, "spare_port": spare_port, "settings": settings, "haproxy": haproxy}
    finally:
        haproxy.terminate()
        haproxy.wait(10)
        log.close()
        instance.shutdown()


def wait_for(condition, what, haproxy=None, seconds=15):
    deadline = time.monotonic() + seconds
    while True:
        assert haproxy is None or haproxy.poll() is None, "haproxy exited"
        try:
            if condition():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "waited %ds for %s" % (seconds, what)
        time.sleep(0.05)


def call(port, method, path, key=KEY, body=None, headers=None):
    """(status, content type, parsed JSON or raw body) of one request."""
    with socket.create_connection((ADDRESS, port), timeout=10) as conn:
        lines = ["%s %s HTTP/1.1" % (method, path), "Host: gateway", "Connection: close"]
        lines += ["Authorization: Bearer " + key] if key else []
        lines += ["%s: %s" % item for item in (headers or {}).items()]
        data = body or b""
        if body is not None:
            lines += ["Content-Type: application/json", "Content-Length: %d" % len(data)]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    head, dummy, payload = answer.partition(b"\r\n\r\n")
    head = head.decode("latin-1").split("\r\n")
    fields = dict((n.strip().lower(), v.strip()) for n, dummy, v in (line.partition(":") for line in head[1:]))
    try:
        payload = json.loads(payload)
    except ValueError:
        pass
    return int(head[0].split(" ")[1]), fields.get("content-type"), payload


def models(port):
    """GET /v1/models: id -> instances_up."""
    status, dummy, body = call(port, "GET", "/v1/models")
    assert status == 200, body
    return dict((entry["id"], entry["instances_up"]) for entry in body["data"])


def error_of(answer, status, kind):
    got, content_type, body = answer
    assert (got, content_type) == (status, "application/json"), answer
    assert body["error"]["type"] == kind and body["error"]["code"] == status and body["error"]["message"], body
    return body["error"]


def test_the_models_list_says_how_many_instances_serve_each_model(gateway):
    status, content_type, body = call(gateway["port"], "GET", "/v1/models")
    assert (status, content_type, body["object"]) == (200, "application/json", "list"), body
    assert body["data"] == [
        {"id": MODEL, "object": "model", "created": 0, "owned_by": "gpufleet", "instances_up": 1},
        {"id": SPARE, "object": "model", "created": 0, "owned_by": "gpufleet", "instances_up": 0}]


def test_a_models_card_answers_that_model_and_an_unknown_one_is_a_404(gateway):
    port = gateway["port"]
    for path in ("/v1/models/" + MODEL, "/v1/models/" + urllib.parse.quote(MODEL, safe="")):
        status, dummy, body = call(port, "GET", path)
        assert status == 200 and body == {"id": MODEL, "object": "model", "created": 0, "owned_by": "gpufleet",
                                          "instances_up": 1}, (path, body)
    assert call(port, "GET", "/v1/models/" + SPARE)[2]["instances_up"] == 0
    error = error_of(call(port, "GET", "/v1/models/org/none"), 404, "NotFoundError")
    assert error["message"].startswith('The model org/none does not exist') and error["param"] == "model", error
    # Behind the key like the list.
    error_of(call(port, "GET", "/v1/models/" + MODEL, key=None), 401, "AuthenticationError")


def test_health_is_200_only_while_every_model_has_an_instance_up(gateway):
    port, monitor = gateway["port"], gateway["settings"]["monitor_uri"]
    # spare has no instance: the gateway does not serve every model.
    error = error_of(call(port, "GET", "/health", key=None), 503, "ServiceUnavailableError")
    assert "%s 1" % MODEL in error["message"] and "%s 0" % SPARE in error["message"], error
    error_of(call(port, "GET", monitor, key=None), 503, "ServiceUnavailableError")
    # Naming a model reaches one of its instances' /health.
    assert call(port, "GET", "/health", key=None, headers={"X-Model": MODEL})[0] == 200
    spare = serve(gateway["spare_port"])
    try:
        wait_for(lambda: models(port).get(SPARE) == 1, "spare's instance up", gateway["haproxy"])
        assert call(port, "GET", "/health", key=None)[:2] == (200, "application/json")
        assert call(port, "GET", monitor, key=None)[0] == 200
    finally:
        spare.shutdown()
        spare.server_close()
    wait_for(lambda: models(port).get(SPARE) == 0, "spare's instance down", gateway["haproxy"])
    assert call(port, "GET", "/health", key=None)[0] == 503


def test_the_body_limit_message_states_the_limit_that_holds(gateway):
    """A request (line, headers, body) that fits in body_limit bytes is read
    whole; one a byte over the buffer is not, and the message says so."""
    port, limit = gateway["port"], gateway["settings"]["body_limit"]
    assert limit == 32768 - 1024

    def completion(size):
        prefix, suffix = b'{"model":"%s","prompt":"' % MODEL.encode(), b'"}'
        return prefix + b"x" * (size - len(prefix) - len(suffix)) + suffix

    error = error_of(call(port, "POST", "/v1/completions", body=completion(limit)), 400, "BadRequestError")
    assert "must fit in %d bytes" % limit in error["message"], error
    # Headers of this request take under 300 bytes, and HAProxy's own
    # bookkeeping of them a little more: a body that leaves 600 fits.
    status, dummy, body = call(port, "POST", "/v1/completions", body=completion(limit - 600))
    assert status == 200 and body == {"answered": limit - 600}, body


def test_a_request_naming_no_model_is_refused_with_two_models(gateway):
    error = error_of(call(gateway["port"], "POST", "/v1/completions", body=b'{"prompt":"x"}'), 400,
                     "BadRequestError")
    assert error["message"].startswith("No model in the request"), error


def test_the_hosts_agent_takes_a_stopping_instance_out_and_puts_it_back(tmp_path):
    """A backend with `agent` asks its host's agent (port 8999) about the
    instance every second: 0% (its unit is stopping) takes it out of the
    balancing and out of instances_up, 100% puts it back."""
    address = "127.0.0.49"
    answer = [b"0%\n"]
    asked = []
    agent = socket.socket()
    agent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    agent.bind((address, 8999))
    agent.listen(16)

    def serve_agent():
        while True:
            try:
                conn, dummy = agent.accept()
            except OSError:
                return
            with conn:
                asked.append(conn.recv(100))
                conn.sendall(answer[0])
    threading.Thread(target=serve_agent, daemon=True).start()
    instance = Server((address, 0), Instance)
    threading.Thread(target=instance.serve_forever, daemon=True).start()
    settings = gateway_render.render(tmp_path, address, [
        {"name": "a-vllm-0", "host": "a", "address": address, "port": instance.server_address[1], "model": MODEL,
         "agent": "vllm-0"}], gateway_check_interval="100ms")
    haproxy = subprocess.Popen([HAPROXY, "-db", "-f", settings["config_path"]], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    port = settings["listen_port"]

    def up():
        with socket.create_connection((address, port), timeout=5) as conn:
            conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n")
            body = b"".join(iter(lambda: conn.recv(65536), b"")).partition(b"\r\n\r\n")[2]
        return json.loads(body)["data"][0]["instances_up"]
    try:
        wait_for(lambda: asked and up() == 0, "the agent's 0%", haproxy)
        assert asked[0] == b"vllm-0\n"
        answer[0] = b"100%\n"
        wait_for(lambda: up() == 1, "the agent's 100%", haproxy)
    finally:
        haproxy.terminate()
        haproxy.wait(10)
        agent.close()
        instance.shutdown()
