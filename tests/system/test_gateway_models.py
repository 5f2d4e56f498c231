# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Several models behind one gateway, and no one in without the key.

The gateway role renders HAProxy's configuration (one ansible-playbook
run) from a plan of three stand-in instances on loopback: two serve
llama-3.1-70b, one serves Qwen/Qwen2.5-7B-Instruct and takes an API key of
its own. The real HAProxy runs that configuration with TLS (a certificate
made here with openssl) and a gateway key. Requests are routed by the JSON
body's "model", else the X-Model header; an unknown model is the gateway's
own 404; GET /v1/models is the gateway's own list; a request without the
key is refused with 401.
"""

import http.client
import json
import os
import pathlib
import shutil
import socket
import ssl
import subprocess

import pytest

from fleet_processes import (
    ProcessGroup, free_port, haproxy_fully_up, haproxy_server_states, http_request, wait_for_health, wait_until,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
STUB = REPO / "tests" / "stub" / "vllm-stub"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PYTHON = REPO / ".venv" / "bin" / "python"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
ADDRESS = "127.0.0.1"

LLAMA = "llama-3.1-70b"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
GATEWAY_KEY = "gw-k3y-0123456789abcdef"
# The Qwen instance's own key: the gateway must send it on exactly.
BACKEND_KEY = 'sk-qwen "k3y" $HOME \\ #x \'q\''
# Small enough that a long prompt overflows it.
BUFFER = 16384
# (host, instance, served name, model, vLLM's --api-key or None)
INSTANCES = [
    ("gpu-a", "vllm-0", LLAMA, "meta-llama/Llama-3.1-70B-Instruct", None),
    ("gpu-a", "vllm-1", LLAMA, "meta-llama/Llama-3.1-70B-Instruct", None),
    ("gpu-b", "vllm-0", QWEN, QWEN, BACKEND_KEY),
]

pytestmark = [
    pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (scripts/setup)"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed"),
]

PLAYBOOK = """\
- name: The gateway in front of a plan of two models
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.numa.gateway
      vars:
        gateway_backends: "{{ plan | gpufleet.numa.gateway_backends(addresses=addresses) }}"
        gateway_backend_api_keys: "{{ plan | gpufleet.numa.gateway_api_keys(api_keys=api_keys) }}"
"""


def request(gateway, method, path, body=None, headers=None, key=GATEWAY_KEY, raw=None, timeout=10.0):
    """One HTTPS request to the gateway; (status, lower-case headers, body bytes)."""
    all_headers = {} if key is None else {"Authorization": "Bearer " + key}
    all_headers.update(headers or {})
    return http_request(ADDRESS, gateway["port"], method, path, body=body, headers=all_headers, timeout=timeout,
                        raw=raw, tls=gateway["tls"])


def completion(gateway, model=None, **extra):
    body = {"prompt": "Hi", "max_tokens": 2}
    if model is not None:
        body["model"] = model
    body.update(extra.pop("body", {}))
    return request(gateway, "POST", "/v1/completions", body, **extra)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway-models")
    certificate = tmp / "gateway.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(certificate), "-out", str(certificate)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    ports = [free_port(ADDRESS) for dummy in INSTANCES]
    gateway = {"port": free_port(ADDRESS), "stats_port": free_port(ADDRESS)}
    plan = {"instances": [{"host": host, "name": name, "port": port, "served_model_name": served, "model": model}
                          for (host, name, served, model, dummy), port in zip(INSTANCES, ports)]}
    config = tmp / "haproxy.cfg"
    variables = {
        "plan": plan, "addresses": {"gpu-a": ADDRESS, "gpu-b": ADDRESS},
        "api_keys": {"gpu-a": "", "gpu-b": BACKEND_KEY},
        "gateway_install": False, "gateway_manage_service": False, "gateway_config_path": str(config),
        "gateway_haproxy": HAPROXY, "gateway_user": "", "gateway_group": "", "gateway_chroot": "",
        "gateway_admin_socket": "", "gateway_log_target": "",
        "gateway_listen_address": ADDRESS, "gateway_listen_port": gateway["port"],
        "gateway_stats_port": gateway["stats_port"], "gateway_metrics_port": 0, "gateway_api_key": GATEWAY_KEY,
        "gateway_tls_certificate": str(certificate), "gateway_buffer_size": BUFFER,
        "gateway_check_interval": "300ms", "gateway_check_fall": 2, "gateway_check_rise": 1,
    }
    (tmp / "vars.json").write_text(json.dumps(variables))
    (tmp / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp / ".ansible-tmp"))
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=%s" % PYTHON,
         "-e", "@%s" % (tmp / "vars.json"), str(tmp / "play.yml")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:]

    processes = ProcessGroup(str(tmp))
    try:
        for (host, name, served, model, key), port in zip(INSTANCES, ports):
            argv = [str(STUB), "serve", model, "--host", ADDRESS, "--port", str(port), "--served-model-name", served]
            if key is not None:
                argv += ["--api-key", key]
            processes.start("%s-%s" % (host, name), argv, dict(os.environ))
            wait_for_health(processes, "%s-%s" % (host, name), ADDRESS, port)
        haproxy = processes.start("haproxy", [HAPROXY, "-W", "-db", "-f", str(config)], dict(os.environ))

        def all_up():
            if haproxy.poll() is not None:
                raise AssertionError("haproxy exited:\n" + processes.log("haproxy"))
            return haproxy_fully_up(ADDRESS, gateway["stats_port"])

        wait_until(all_up, 15, what="every server UP")
        gateway.update(tls=ssl.create_default_context(cafile=str(certificate)), config=config,
                       certificate=certificate, ports=dict(zip(("%s-%s" % i[:2] for i in INSTANCES), ports)),
                       output=result.stdout, processes=processes)
        yield gateway
    finally:
        processes.stop_all()


def instance_of(headers, gateway):
    """Which stand-in answered (it names itself in X-Stub-Instance)."""
    port = int(headers["x-stub-instance"].rsplit(":", 1)[1])
    return next(name for name, p in gateway["ports"].items() if p == port)


def test_gateway_lists_every_model_itself(gateway):
    status, headers, body = request(gateway, "GET", "/v1/models")
    assert status == 200, body
    listing = json.loads(body)
    assert listing["object"] == "list"
    assert [(m["id"], m["object"]) for m in listing["data"]] == [(LLAMA, "model"), (QWEN, "model")]
    assert "x-stub-instance" not in headers


def test_requests_reach_only_instances_of_their_json_model(gateway):
    seen = {LLAMA: set(), QWEN: set()}
    for index in range(24):
        model = (LLAMA, QWEN)[index % 2]
        status, headers, body = completion(gateway, model)
        assert status == 200, body
        assert json.loads(body)["model"] == model
        seen[model].add(instance_of(headers, gateway))
    # Both llama instances share the load; Qwen's takes its own key, which
    # only the gateway sends (the client's gateway key would be refused).
    assert seen == {LLAMA: {"gpu-a-vllm-0", "gpu-a-vllm-1"}, QWEN: {"gpu-b-vllm-0"}}


def test_model_comes_from_the_header_when_sent_else_from_the_body(gateway):
    status, headers, body = completion(gateway, headers={"X-Model": QWEN})
    assert status == 200, body
    assert instance_of(headers, gateway) == "gpu-b-vllm-0"
    status, headers, body = request(gateway, "POST", "/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": "Hi"}]}, headers={"X-Model": LLAMA})
    assert status == 200, body
    assert instance_of(headers, gateway).startswith("gpu-a-")
    # The header wins over the body, which is not read for the model: the
    # header's instance answers 404 for a model it does not serve, as vLLM does.
    status, headers, body = completion(gateway, LLAMA, headers={"X-Model": QWEN})
    assert status == 404 and instance_of(headers, gateway) == "gpu-b-vllm-0", (status, body)


def test_model_beyond_the_buffer_needs_the_header(gateway):
    """A prompt longer than the buffer before "model": the JSON field is out
    of reach, so the gateway asks for the header instead of guessing."""
    raw = json.dumps({"prompt": "x" * (BUFFER * 2), "max_tokens": 2, "model": QWEN}).encode()
    try:
        status, headers, body = request(gateway, "POST", "/v1/completions", raw=raw)
    except (ssl.SSLError, ConnectionError):
        # HAProxy answers before the rest of the body has arrived and closes
        # the connection; a client still sending may see the close (a reset)
        # instead of the answer. Either way no instance got the request.
        pass
    else:
        assert status == 400, body
        error = json.loads(body)["error"]
        assert "X-Model" in error["message"] and error["param"] == "model" and "x-stub-instance" not in headers
    status, headers, body = request(gateway, "POST", "/v1/completions", raw=raw, headers={"X-Model": QWEN})
    assert status == 200, body
    assert instance_of(headers, gateway) == "gpu-b-vllm-0"
    # "model" first is no exception: a second "model" beyond the buffer is
    # the one vLLM would read, so a body that does not fit needs the header.
    raw = json.dumps({"model": QWEN, "prompt": "x" * (BUFFER * 2), "max_tokens": 2}).encode()
    try:
        status, headers, body = request(gateway, "POST", "/v1/completions", raw=raw)
    except (ssl.SSLError, ConnectionError):
        pass
    else:
        assert status == 400 and "x-stub-instance" not in headers, body


@pytest.mark.parametrize("model", ["nope", "llama-3.1-70b ", 'x"}, {"y', "Qwen/Qwen2.5-7B-Instruct\\u0000"])
def test_unknown_model_is_the_gateways_own_404(gateway, model):
    status, headers, body = completion(gateway, model)
    assert status == 404, body
    assert "x-stub-instance" not in headers
    error = json.loads(body)["error"]  # valid JSON whatever the name held
    assert error["type"] == "NotFoundError" and error["code"] == 404 and error["param"] == "model"
    assert "does not exist" in error["message"]
    status, headers, body = completion(gateway, headers={"X-Model": "nope"})
    assert status == 404 and "x-stub-instance" not in headers


def test_no_one_in_without_the_key(gateway):
    for key in (None, "wrong", GATEWAY_KEY + "x", GATEWAY_KEY[:-1]):
        status, headers, body = completion(gateway, LLAMA, key=key)
        assert status == 401, (key, body)
        assert json.loads(body)["error"]["type"] == "AuthenticationError"
        assert headers.get("www-authenticate") == "Bearer" and "x-stub-instance" not in headers
        status, dummy, body = request(gateway, "GET", "/v1/models", key=key)
        assert status == 401, body
    status, dummy, body = request(gateway, "GET", "/metrics", key=None, headers={"X-Model": LLAMA})
    assert status == 401
    # The gateway's own health and /health stay open.
    assert request(gateway, "GET", "/gateway/health", key=None)[0] == 200
    status, headers, body = request(gateway, "GET", "/health", key=None, headers={"X-Model": LLAMA})
    assert status == 200 and instance_of(headers, gateway).startswith("gpu-a-")


def test_gateway_speaks_tls_only_with_its_certificate(gateway):
    with socket.create_connection((ADDRESS, gateway["port"]), timeout=5) as raw:
        with gateway["tls"].wrap_socket(raw, server_hostname=ADDRESS) as tls:
            der = tls.getpeercert(binary_form=True)
    pem = gateway["certificate"].read_text()
    assert ssl.DER_cert_to_PEM_cert(der).split("-----")[2].split() == \
        pem.split("-----BEGIN CERTIFICATE-----")[1].split("-----")[0].split()
    # Plain HTTP on the TLS port gets no answer from an instance.
    connection = http.client.HTTPConnection(ADDRESS, gateway["port"], timeout=5)
    try:
        with pytest.raises((http.client.HTTPException, OSError)):
            connection.request("GET", "/v1/models", headers={"Authorization": "Bearer " + GATEWAY_KEY})
            response = connection.getresponse()
            response.read()
            raise AssertionError("plain HTTP answered %s" % response.status)
    finally:
        connection.close()


def test_secrets_stay_out_of_the_output_and_the_gateway_key_out_of_the_config(gateway):
    text = gateway["config"].read_text()
    assert GATEWAY_KEY not in text
    assert oct(gateway["config"].stat().st_mode & 0o777) == "0o640"
    for secret in (GATEWAY_KEY, BACKEND_KEY, "sk-qwen"):
        assert secret not in gateway["output"]


def test_a_dead_models_instances_leave_the_other_model_serving(gateway):
    """Last: stops the Qwen instance. Its model answers 503 from the
    gateway; llama keeps serving."""
    gateway["processes"].stop("gpu-b-vllm-0")
    wait_until(lambda: haproxy_server_states(ADDRESS, gateway["stats_port"]).get("gpu-b-vllm-0", "").startswith("DOWN"),
               15, what="gpu-b-vllm-0 DOWN")
    status, headers, body = completion(gateway, QWEN)
    assert status == 503, body
    status, headers, body = completion(gateway, LLAMA)
    assert status == 200 and instance_of(headers, gateway).startswith("gpu-a-")
    # The gateway's health says a model has no instance: 503, and so does /health.
    assert request(gateway, "GET", "/gateway/health", key=None)[0] == 503
    assert request(gateway, "GET", "/health", key=None)[0] == 503
    status, dummy, body = request(gateway, "GET", "/v1/models")
    assert status == 200 and [m["instances_up"] for m in json.loads(body)["data"] if m["id"] == QWEN] == [0], body
