# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What routing by model costs at the gateway.

    .venv/bin/python benchmarks/bench_gateway_routing.py [--requests 300] [--prompt-kib 0 64]

Renders the gateway with role gpufleet.numa.gateway (one ansible-playbook
run) for two models of one stand-in instance each (tests/stub/vllm-stub) on
loopback, with a gateway key, runs it with the real HAProxy, and times
sequential completions over one keep-alive connection:

- straight to the instance (the floor),
- through the gateway, model read from the JSON body (HAProxy waits for the
  body after the key check: wait-for-body, then the Lua reader),
- through the gateway, model from the X-Model header,

for each prompt size given. Prints the median and 95th percentile latency
in milliseconds. Asserts only that every request was answered by the
instance of its model. The floor is the stand-in's own (it writes headers
and body separately, so delayed ACKs dominate); compare the differences.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "system"), str(REPO / ".collections")]

from fleet_processes import ProcessGroup, free_port, haproxy_server_states, wait_for_health, wait_until  # noqa: E402

STUB = REPO / "tests" / "stub" / "vllm-stub"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
ADDRESS = "127.0.0.1"
KEY = "bench-gateway-key-0123456789"
MODELS = ["llama-3.1-70b", "Qwen/Qwen2.5-7B-Instruct"]
PLAYBOOK = """\
- name: Gateway for the benchmark
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.numa.gateway
      vars:
        gateway_backends: "{{ plan | gpufleet.numa.gateway_backends(addresses=addresses) }}"
"""


def render(tmp, ports, gateway_port, stats_port):
    plan = {"instances": [{"host": "gpu-%d" % i, "name": "vllm-0", "port": port, "served_model_name": model}
                          for i, (model, port) in enumerate(zip(MODELS, ports))]}
    variables = {
        "plan": plan, "addresses": {"gpu-%d" % i: ADDRESS for i in range(len(MODELS))},
        "gateway_install": False, "gateway_manage_service": False, "gateway_config_path": str(tmp / "haproxy.cfg"),
        "gateway_haproxy": HAPROXY, "gateway_user": "", "gateway_group": "", "gateway_chroot": "",
        "gateway_admin_socket": "", "gateway_log_target": "", "gateway_listen_address": ADDRESS,
        "gateway_listen_port": gateway_port, "gateway_stats_port": stats_port, "gateway_api_key": KEY,
    }
    (tmp / "vars.json").write_text(json.dumps(variables))
    (tmp / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp / ".ansible-tmp"))
    subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                    "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "@%s" % (tmp / "vars.json"),
                    str(tmp / "play.yml")], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return tmp / "haproxy.cfg"


def timed(port, count, body, headers):
    """Latencies (ms) of COUNT completions on one keep-alive connection; the
    instance that answered each."""
    connection = http.client.HTTPConnection(ADDRESS, port, timeout=30)
    latencies, answered = [], set()
    data = json.dumps(body).encode()
    try:
        for dummy in range(count):
            start = time.perf_counter()
            connection.request("POST", "/v1/completions", body=data,
                               headers=dict({"Content-Type": "application/json"}, **headers))
            response = connection.getresponse()
            response.read()
            latencies.append((time.perf_counter() - start) * 1000)
            assert response.status == 200, response.status
            answered.add(response.getheader("X-Stub-Instance"))
    finally:
        connection.close()
    return latencies, answered


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--prompt-kib", type=int, nargs="+", default=[0, 64])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        ports = [free_port(ADDRESS) for dummy in MODELS]
        gateway_port, stats_port = free_port(ADDRESS), free_port(ADDRESS)
        config = render(tmp, ports, gateway_port, stats_port)
        processes = ProcessGroup(str(tmp))
        try:
            for model, port in zip(MODELS, ports):
                processes.start(model.replace("/", "_"), [str(STUB), "serve", model, "--host", ADDRESS,
                                                          "--port", str(port), "--served-model-name", model],
                                dict(os.environ))
                wait_for_health(processes, model.replace("/", "_"), ADDRESS, port)
            processes.start("haproxy", [HAPROXY, "-W", "-db", "-f", str(config)], dict(os.environ))

            def up():
                try:
                    return set(haproxy_server_states(ADDRESS, stats_port).values()) == {"UP"}
                except OSError:
                    return False

            wait_until(up, 15, what="every server UP")
            auth = {"Authorization": "Bearer " + KEY}
            print("%-34s %10s %10s" % ("%d requests each, prompt size" % args.requests, "median ms", "p95 ms"))
            for kib in args.prompt_kib:
                prompt = "x" * (kib * 1024)
                model = MODELS[1]
                cases = [
                    ("straight to the instance", ports[1], {"model": model, "prompt": prompt, "max_tokens": 1}, {}),
                    ("gateway, JSON model", gateway_port, {"model": model, "prompt": prompt, "max_tokens": 1}, auth),
                    ("gateway, X-Model header", gateway_port, {"prompt": prompt, "max_tokens": 1},
                     dict(auth, **{"X-Model": model})),
                ]
                for title, port, body, headers in cases:
                    latencies, answered = timed(port, args.requests, body, headers)
                    assert answered == {"%s:%d" % (ADDRESS, ports[1])}, answered
                    latencies.sort()
                    print("%-34s %10.2f %10.2f" % ("%s, %d KiB" % (title, kib), statistics.median(latencies),
                                                   latencies[int(len(latencies) * 0.95) - 1]))
        finally:
            processes.stop_all()


if __name__ == "__main__":
    main()
