# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Request bodies at the gateway: HAProxy and vLLM must read one model.

The role's own template and settings check render a configuration for two
models on 127.0.0.45; the real HAProxy runs it with the role's Lua reader of
the body. Each model's instance is a stand-in in this process (a tiny
HTTP server) that reports the body and the Authorization header it got.
vLLM reads the body with Python's json (bytes in, the LAST of duplicate
keys, escapes decoded): whenever the gateway forwards a request without
the X-Model header, that reading must name the model of the instance it
reached (or none), and the instance must get its own key; otherwise the
gateway answers 4xx. With the header, the header's model is reached. Keys hold
what HAProxy would interpret ('%[...]', '%%', '$HOME', quotes).
"""

import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_processes import free_port, haproxy_fully_up, wait_until
from ansible_collections.gpufleet.numa.tests.fixtures import gateway_render

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
ADDRESS = "127.0.0.45"
GATEWAY_KEY = "gw-k3y-0123456789abcdef"
BUFFER = 16384
MODELS = ("alpha", "beta/b-2")
# Each instance's key: HAProxy reads set-header values as log-format and as
# a double-quoted word, so every special character of both is here.
KEYS = {
    "alpha": "Xk9%Qw7L%[env(HOME)]%%$HOME${HOME}",
    "beta/b-2": 'sk-b "q" \\ #x \'y\' %H %[str(x)]',
}
FORMS = ("multipart/form-data", "application/x-www-form-urlencoded")

pytestmark = pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (scripts/setup)")


class StandIn(http.server.ThreadingHTTPServer):
    """One model's instance: answers 200 and records what it received."""
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops connections while the test process is busy

    def __init__(self, model):
        self.model = model
        self.received = {}
        super().__init__((ADDRESS, 0), StandInHandler)

    def handle_error(self, request, client_address):
        pass  # a health check that hung up early


class StandInHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.answer(b"")

    def do_POST(self):
        # The whole body before the answer, as vLLM reads it: a stand-in
        # that answered a chunked body unread made HAProxy close the client's
        # connection while it still sent, and the client lost the answer.
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.answer(self.read_chunked())
        else:
            self.answer(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def read_chunked(self):
        parts = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # the chunk's CRLF

    def answer(self, body):
        probe = self.headers.get("X-Probe")
        if probe:
            self.server.received[probe] = {"body": body, "auth": self.headers.get_all("Authorization"),
                                           "content_type": self.headers.get("Content-Type")}
        out = json.dumps({"model": self.server.model}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Stand-In", self.server.model)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def render(tmp, backends, **extra):
    """The role's template and settings check, with the Lua reader beside it.
    This test process, busy generating cases on a loaded machine, can leave
    a health check unanswered for a while, and a stand-in marked down
    answers 503 (seen in CI): a check may take 500 ms (its interval), and
    10 failed in a row (5 s) mark one down, once the gateway fixture has
    seen every stand-in at full health."""
    variables = {"gateway_buffer_size": BUFFER, "gateway_api_key": GATEWAY_KEY, "gateway_check_interval": "500ms",
                 "gateway_check_fall": 10, "gateway_timeout_http_request": "2s"}
    variables.update(extra)
    return gateway_render.render(tmp, ADDRESS, backends, **variables)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway-bodies")
    stand_ins = {model: StandIn(model) for model in MODELS}
    threads = [threading.Thread(target=server.serve_forever, daemon=True) for server in stand_ins.values()]
    for thread in threads:
        thread.start()
    backends = [{"name": "i-%d" % index, "host": "h", "address": ADDRESS, "port": server.server_address[1],
                 "model": model} for index, (model, server) in enumerate(stand_ins.items())]
    stats_port = free_port(ADDRESS)
    config = render(tmp, backends, gateway_backend_api_keys=KEYS, gateway_stats_address=ADDRESS,
                    gateway_stats_port=stats_port)
    check = subprocess.run([HAPROXY, "-c", "-f", str(tmp / "haproxy.cfg")], check=False, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    log = open(tmp / "haproxy.log", "w")
    haproxy = subprocess.Popen([HAPROXY, "-db", "-f", str(tmp / "haproxy.cfg")], stdout=log, stderr=log)
    try:
        port = config["listen_port"]

        def both_up():
            assert haproxy.poll() is None, (tmp / "haproxy.log").read_text()
            try:
                return all(send(port, {"model": m}, probe="up-%s" % m)[0] == 200 for m in MODELS)
            except OSError:
                return False
        wait_until(both_up, 15, what="both models answer")
        wait_until(lambda: haproxy_fully_up(ADDRESS, stats_port), 30, what="both stand-ins at full health")
        yield {"port": port, "stand_ins": stand_ins, "tmp": tmp}
    finally:
        haproxy.terminate()
        haproxy.wait(10)
        log.close()
        for server in stand_ins.values():
            server.shutdown()
            server.server_close()


def send(port, body, probe, headers=None, key=GATEWAY_KEY, content_type="application/json", timeout=10,
         chunked=False):
    """One POST /v1/completions (a dict body is json.dumps'ed, CHUNKED sends
    it in chunks of 1,000 bytes); (status, answer)."""
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    lines = ["POST /v1/completions HTTP/1.1", "Host: gateway", "Connection: close", "X-Probe: " + probe]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        raw = b"".join(b"%x\r\n%s\r\n" % (len(raw[at:at + 1000]), raw[at:at + 1000])
                       for at in range(0, len(raw), 1000)) + b"0\r\n\r\n"
    else:
        lines.append("Content-Length: %d" % len(raw))
    if key is not None:
        lines.append("Authorization: Bearer " + key)
    if content_type is not None:
        lines.append("Content-Type: " + content_type)
    lines += ["%s: %s" % item for item in (headers or {}).items()]
    with socket.create_connection((ADDRESS, port), timeout=timeout) as conn:
        try:
            conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + raw)
        except OSError:
            pass  # HAProxy may answer and close before the whole body is sent
        chunks = []
        try:
            for chunk in iter(lambda: conn.recv(65536), b""):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    answer = b"".join(chunks)
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else None
    return status, answer.partition(b"\r\n\r\n")[2]


def as_vllm_reads(body, content_type):
    """What vLLM reads as the request's model: ('model', NAME), ('default',)
    for a body that names none (or names ''), ('refused',) when the body is
    no JSON object, ('not json',) for a Content-Type FastAPI does not parse
    as JSON (it does for none and application/json or application/*+json):
    vLLM answers 422."""
    media = (content_type or "").split(";")[0].strip().lower()
    if content_type is not None and not (media == "application/json" or
                                         (media.startswith("application/") and media.endswith("+json"))):
        return ("not json",)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return ("refused",)
    if not isinstance(data, dict) or "model" not in data:
        return ("default",) if isinstance(data, dict) else ("refused",)
    if data["model"] == "":
        return ("default",)
    return ("model", data["model"]) if isinstance(data["model"], str) else ("refused",)


def where_it_went(gateway, probe):
    for model, server in gateway["stand_ins"].items():
        if probe in server.received:
            return model, server.received.pop(probe)
    return None, None


# --- bodies a client may send, hostile ones first ------------------------------

NAMES = st.sampled_from(MODELS) | st.sampled_from(["gamma", "alpha\x00", "alpha ", "ALPHA", "", "beta/b-2\n",
                                                   "alpha\u00e9"])
SPACE = st.text(alphabet=" \t\r\n", max_size=3) | st.sampled_from(["\f", "\v", "\u00a0", "\x00"])


def escape_some(draw, text):
    """TEXT as a JSON string body with some characters \\u-escaped (either
    case) and the rest as JSON writes them."""
    out = []
    for char in text:
        if draw(st.integers(0, 3)) == 0:
            code = "%04x" % ord(char) if ord(char) < 0x10000 else None
            if code is not None:
                out.append("\\u" + (code.upper() if draw(st.booleans()) else code))
                continue
        out.append(json.dumps(char)[1:-1])
    return '"%s"' % "".join(out)


@st.composite
def json_text(draw, depth=0):
    """A JSON value (as text), sometimes holding "model" fields of its own."""
    kind = draw(st.sampled_from(["scalar", "object", "array"] if depth < 3 else ["scalar"]))
    if kind == "scalar":
        return draw(st.sampled_from(["1", "-0.5e3", "true", "null", '"x"', '"mod\\"el"', "01", "NaN", '"\\ud83d"',
                                     "1" * 30]))
    if kind == "array":
        return "[%s]" % ",".join(draw(st.lists(json_text(depth + 1), max_size=3)))
    fields = draw(st.lists(st.tuples(st.sampled_from(["model", "prompt", "Model", "x"]), json_text(depth + 1)),
                           max_size=3))
    return "{%s}" % ",".join("%s:%s" % (json.dumps(k), v) for k, v in fields)


@st.composite
def request_bodies(draw):
    """(body bytes, extra headers, content type) of one request."""
    fields = []
    for dummy in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(["model", "model", "model", "prompt", "max_tokens", "model\x00"]))
        if draw(st.booleans()):
            value = escape_some(draw, draw(NAMES)) if key.startswith("mod") else draw(json_text())
        else:
            value = json.dumps(draw(NAMES)) if key.startswith("mod") else draw(json_text())
        key_text = escape_some(draw, key) if draw(st.integers(0, 2)) == 0 else json.dumps(key)
        fields.append(draw(SPACE) + key_text + draw(SPACE) + ":" + draw(SPACE) + value + draw(SPACE))
    text = draw(SPACE) + "{" + ",".join(fields) + "}" + draw(SPACE)
    body = text.encode("utf-8", "surrogatepass")
    mutation = draw(st.sampled_from(["none"] * 6 + ["truncate", "garbage", "bom", "utf-16", "nul", "flip",
                                                    "padding", "oversized"]))
    if mutation == "truncate" and body:
        body = body[:draw(st.integers(0, len(body) - 1))]
    elif mutation == "garbage":
        body += draw(st.sampled_from([b"x", b'{"model":"beta/b-2"}', b"\x00", b",", b"\xff"]))
    elif mutation == "bom":
        body = b"\xef\xbb\xbf" + body
    elif mutation == "utf-16":
        body = text.encode("utf-16-le", "surrogatepass")
    elif mutation == "nul" and body:
        at = draw(st.integers(0, len(body)))
        body = body[:at] + b"\x00" + body[at:]
    elif mutation == "flip" and body:
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1:]
    elif mutation == "padding":
        # a long prompt before the fields: "model" beyond what HAProxy's json_query would read
        body = b'{"prompt":"' + b"p" * draw(st.integers(BUFFER // 2, BUFFER * 2)) + b'",' + body.lstrip()[1:]
    elif mutation == "oversized":
        body = body + b" " * (BUFFER * 2) + b'{"model":"beta/b-2"}'
    headers = {}
    if draw(st.integers(0, 3)) == 0:
        headers["X-Model"] = draw(st.sampled_from(list(MODELS) + ["gamma"]))
    content_type = draw(st.sampled_from(["application/json", "application/json; charset=utf-8", None,
                                         "text/plain", "application/vnd.x+json"]))
    return body, headers, content_type


COUNTER = iter(range(10 ** 9))


@settings(max_examples=200, deadline=5000, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(request=request_bodies())
def test_gateway_and_vllm_read_one_model(gateway, request):
    body, headers, content_type = request
    probe = "p%d" % next(COUNTER)
    status, answer = send(gateway["port"], body, probe, headers=headers, content_type=content_type)
    reached, received = where_it_went(gateway, probe)
    if reached is None:
        # HAProxy says here when it marked a stand-in down (a 503's cause).
        logged = (gateway["tmp"] / "haproxy.log").read_text()[-2000:]
        assert status is not None and 400 <= status < 500, (status, answer, body[:300], logged)
        # A known model in the header is always routed.
        assert headers.get("X-Model") not in MODELS, (status, answer, headers)
        return
    assert status == 200, (status, answer)
    assert received["body"] == body
    # The instance got its own key, exactly, and only that.
    assert received["auth"] == ["Bearer " + KEYS[reached]], received["auth"]
    if "X-Model" in headers:
        # The header names the model; the body is not read for it. vLLM
        # answers 404 to a body naming a model the instance does not serve.
        assert reached == headers["X-Model"], (reached, headers)
        return
    reading = as_vllm_reads(body, content_type)
    # ("refused",): the reader checks the structure and the model, not what
    # is inside every other string (a raw control character, a bad escape):
    # vLLM refuses such a body (400), so it is no other model's request.
    assert reading in (("model", reached), ("default",), ("refused",), ("not json",)), (reading, reached, body[:300])
    if reading == ("default",):
        assert len(MODELS) == 1, (reached, body[:300])


# --- the finding's probes, one each -------------------------------------------

PROBES = {
    "duplicate model keys (vLLM takes the last)": b'{"model":"alpha","prompt":"x","model":"beta/b-2"}',
    "an escaped key": b'{"mod\\u0065l":"beta/b-2","prompt":"x"}',
    "a control escape in the model": b'{"model":"alpha\\u0000"}',
    "a second model beyond the buffer": b'{"model":"alpha","prompt":"' + b"p" * BUFFER + b'","model":"beta/b-2"}',
    "a cut body": b'{"model":"alpha","prompt":"x"',
    "text after the object": b'{"model":"alpha"} {"model":"beta/b-2"}',
    "a trailing comma": b'{"model":"alpha","prompt":"x",}',
    "a whole object, spaces past the buffer, a second object":
        b'{"model":"alpha"}' + b" " * (BUFFER * 2) + b'{"model":"beta/b-2"}',
    "UTF-16": '{"model":"beta/b-2"}'.encode("utf-16-le"),
}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("body", list(PROBES.values()), ids=list(PROBES))
def test_ambiguous_bodies_are_refused_with_a_json_error(gateway, body, chunked):
    status, answer = send(gateway["port"], body, "probe", chunked=chunked)
    assert status == 400, answer
    error = json.loads(answer)["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400 and error["message"]
    assert where_it_went(gateway, "probe") == (None, None)


def test_the_header_names_the_model_and_its_body_is_not_read(gateway):
    """With X-Model the body is neither read for the model nor judged: a
    body naming another model, or one the reader refuses, reaches the
    header's model (whose vLLM answers 404 to a model it does not serve)."""
    for probe, body in (("other", b'{"model":"beta/b-2","prompt":"x"}'),
                        ("dup", PROBES["duplicate model keys (vLLM takes the last)"]),
                        ("cut", PROBES["a cut body"])):
        status, answer = send(gateway["port"], body, probe, headers={"X-Model": "alpha"})
        assert status == 200 and where_it_went(gateway, probe)[0] == "alpha", (probe, answer)
    status, answer = send(gateway["port"], b'{"model":"alpha"}', "gamma", headers={"X-Model": "gamma"})
    assert status == 404 and where_it_went(gateway, "gamma") == (None, None), answer


# Each names beta/b-2 once, at the top level, as Python reads it; a reader
# that ended a string at an escaped quote, or not at one after an escaped
# backslash, would read "alpha" or refuse the body.
ESCAPED_QUOTES = {
    "an escaped quote": rb'{"prompt":"x\",\"model\":\"alpha","model":"beta/b-2"}',
    "an escaped backslash before the closing quote": rb'{"prompt":"x\\","model":"beta/b-2"}',
    "both": rb'{"prompt":"x\\\",\"model\":\"alpha\\","model":"beta/b-2"}',
    "in a chat message (a nested value)": rb'{"messages":[{"role":"user","content":"a\",\"model\":\"alpha"}],'
                                          rb'"model":"beta/b-2"}',
    "many escaped quotes in a row": rb'{"prompt":"' + rb'\"' * 20 + rb'\\","model":"beta/b-2"}',
    "brackets after an escaped quote in a nested value": rb'{"messages":[{"role":"user","content":"x\"}]"}],'
                                                         rb'"model":"beta/b-2"}',
}
# The same nested values, long enough for the regex engine to read them
# (the reader reads a short one token by token).
LONG = rb'{"role":"system","content":"' + b"p" * 5000 + rb'"},'
ESCAPED_QUOTES.update({name + ", long": body.replace(b'{"messages":[', b'{"messages":[' + LONG)
                       for name, body in ESCAPED_QUOTES.items() if b'"messages"' in body})


@pytest.mark.parametrize("body", list(ESCAPED_QUOTES.values()), ids=list(ESCAPED_QUOTES))
def test_strings_end_where_python_ends_them(gateway, body):
    assert as_vllm_reads(body, "application/json") == ("model", "beta/b-2")
    status, answer = send(gateway["port"], body, "escaped")
    assert status == 200 and where_it_went(gateway, "escaped")[0] == "beta/b-2", answer


BAD_INSIDE = {
    "a raw newline in the prompt": b'{"model":"beta/b-2","prompt":"a\nb"}',
    "a bad escape in the prompt": b'{"model":"beta/b-2","prompt":"a\\qb"}',
    "bytes that are no UTF-8 in the prompt": b'{"model":"beta/b-2","prompt":"a\xff\xfeb"}',
    "a raw control character in a nested key": b'{"model":"beta/b-2","x":{"a\x01":1}}',
}


@pytest.mark.parametrize("body", list(BAD_INSIDE.values()), ids=list(BAD_INSIDE))
def test_a_body_vllm_refuses_for_what_is_inside_a_string_reaches_its_model(gateway, body):
    """Only the structure and the model are read: vLLM refuses these bodies
    (400) at the instance of the model they name."""
    assert as_vllm_reads(body, "application/json") == ("refused",)
    status, answer = send(gateway["port"], body, "inside")
    assert status == 200 and where_it_went(gateway, "inside")[0] == "beta/b-2", answer


def test_each_instance_gets_its_key_exactly(gateway):
    """'%[env(HOME)]' in a key is not evaluated, '%%' stays two characters."""
    for model in MODELS:
        status, answer = send(gateway["port"], {"model": model, "prompt": "x"}, "key-" + model)
        assert status == 200, answer
        reached, received = where_it_went(gateway, "key-" + model)
        assert reached == model and received["auth"] == ["Bearer " + KEYS[model]]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_larger_than_the_buffer_is_routed_by_the_header(gateway, chunked):
    body = json.dumps({"prompt": "p" * (BUFFER * 2), "model": "beta/b-2"}).encode()
    status, answer = send(gateway["port"], body, "big", headers={"X-Model": "beta/b-2"}, chunked=chunked)
    assert status == 200, answer
    # The instance gets the whole body, as sent.
    assert where_it_went(gateway, "big") == ("beta/b-2", {"body": body, "auth": ["Bearer " + KEYS["beta/b-2"]],
                                                          "content_type": "application/json"})
    # The same body with only spaces in the buffer's last half is no whole body either.
    body = b'{"model":"alpha"}' + b" " * (BUFFER * 2)
    status, answer = send(gateway["port"], body, "big2", headers={"X-Model": "beta/b-2"}, chunked=chunked)
    assert status == 200, answer
    assert where_it_went(gateway, "big2")[0] == "beta/b-2", answer


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_whole_body_in_the_buffer_is_routed_by_its_model(gateway, chunked):
    """Trailing spaces within the buffer are part of a whole body."""
    body = b'{"model":"beta/b-2","prompt":"x"}' + b" " * (BUFFER // 2)
    status, answer = send(gateway["port"], body, "whole", chunked=chunked)
    assert status == 200 and where_it_went(gateway, "whole")[0] == "beta/b-2", answer


def test_forms_take_the_model_from_the_header(gateway):
    body = b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nalpha\r\n--b--\r\n"
    status, answer = send(gateway["port"], body, "form", headers={"X-Model": "alpha"},
                          content_type="multipart/form-data; boundary=b")
    assert status == 200 and where_it_went(gateway, "form")[0] == "alpha"
    status, answer = send(gateway["port"], body, "form2", content_type="multipart/form-data; boundary=b")
    assert status == 400 and where_it_went(gateway, "form2") == (None, None)


def test_two_content_types_are_refused(gateway):
    status, answer = send(gateway["port"], b'{"model":"alpha"}', "ct",
                          headers={"Content-Type": "multipart/form-data; boundary=b"})
    assert status == 400 and where_it_went(gateway, "ct") == (None, None)


def test_unauthenticated_requests_are_refused_before_the_body_arrives(gateway):
    """A client without the key announces a large body and sends none of
    it: the 401 comes at once, not after the gateway waited to buffer it."""
    with socket.create_connection((ADDRESS, gateway["port"]), timeout=10) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 250000\r\n\r\n{\"model\":\"alpha\",")
        started = time.monotonic()
        answer = conn.recv(65536)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    # wait-for-body waits up to gateway_timeout_http_request (2 s here).
    assert waited < 1.0, waited
