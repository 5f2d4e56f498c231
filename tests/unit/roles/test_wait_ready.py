# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""roles/vllm/files/gpufleet-wait-ready against a real HTTP server on
loopback: ready is /health 200 and then a completion for the served model
(an engine can die on its first request while /health still answers 200)."""

import http.server
import json
import os
import subprocess
import sys
import threading

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

WAIT_READY = os.path.join(fixture_paths.REPO, "roles", "vllm", "files", "gpufleet-wait-ready")


class Engine(http.server.BaseHTTPRequestHandler):
    """/health answers 200; /v1/completions answers what the test says."""

    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((self.path, body, self.headers.get("Authorization")))
        self.send_response(self.server.completion_status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"choices": [{"text": "x"}]}')

    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    server.seen = []
    server.completion_status = 200
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def wait_ready(server, *words, key=None):
    env = dict(os.environ, VLLM_API_KEY=key) if key else {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    url = "http://127.0.0.1:%d/health" % server.server_address[1]
    return subprocess.run([sys.executable, WAIT_READY, url] + list(words), env=env, capture_output=True,
                          text=True, timeout=30, check=False)


def test_ready_once_a_completion_for_the_model_answers(engine):
    done = wait_ready(engine, "5", "tiny-chat", key="sk-test-0123456789")
    assert done.returncode == 0, done.stderr
    assert engine.seen == [("/v1/completions", {"model": "tiny-chat", "prompt": "ready", "max_tokens": 1},
                            "Bearer sk-test-0123456789")]


def test_an_engine_that_fails_its_first_request_is_not_ready(engine):
    engine.completion_status = 500
    done = wait_ready(engine, "2", "tiny-chat")
    assert done.returncode == 1
    assert "complete a request for tiny-chat" in done.stderr and "HTTP 500" in done.stderr
    assert len(engine.seen) > 1 and engine.seen[0][2] is None


def test_health_alone_without_a_model(engine):
    engine.completion_status = 500
    done = wait_ready(engine, "5")
    assert done.returncode == 0, done.stderr
    assert engine.seen == []
