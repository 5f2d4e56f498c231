# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""tests/stub/vllm-stub, started as a real process on loopback."""

import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading


from fleet_processes import free_port, http_request, wait_for_health, wait_until
from ansible_collections.gpufleet.numa.plugins.module_utils.cpulist import format_cpulist

STUB = pathlib.Path(__file__).resolve().parents[2] / "tests" / "stub" / "vllm-stub"
ADDRESS = "127.0.0.31"


def start_stub(processes, args, environment=None, name="stub"):
    port = free_port(ADDRESS)
    env = dict(os.environ)
    env.update(environment or {})
    processes.start(name, [str(STUB), "serve"] + args + ["--host", ADDRESS, "--port", str(port)], env)
    wait_for_health(processes, name, ADDRESS, port)
    return port


def test_vllm_stub_config_file_and_ignored_options(processes, tmp_path):
    config = tmp_path / "gpufleet-vllm-0.yaml"
    config.write_text("# options\nserved-model-name:\n  - chat\n  - 'it''s'\ntensor-parallel-size: 2\n"
                      "pipeline-parallel-size: 2\nmax-model-len: 4096\n")
    port = start_stub(processes, ["org/model", "--config", str(config), "--pipeline-parallel-size", "1",
                                  "--gpu-memory-utilization", "0.9", "--trust-remote-code"])
    report = json.loads(http_request(ADDRESS, port, "GET", "/debug/binding")[2])
    assert report["served_model_names"] == ["chat", "it's"]
    assert report["tensor_parallel_size"] == 2
    assert report["pipeline_parallel_size"] == 1  # the command line wins over the file
    assert "ignoring --gpu-memory-utilization 0.9 --trust-remote-code" in processes.log("stub")


def test_vllm_stub_reports_unbound_process(processes):
    port = start_stub(processes, ["m"], {"CUDA_VISIBLE_DEVICES": "3,1", "VLLM_PORT": "29100"})
    report = json.loads(http_request(ADDRESS, port, "GET", "/debug/binding")[2])
    assert report["memory_policy"] == "default"
    assert report["cpus"] == format_cpulist(os.sched_getaffinity(0))
    assert report["environment"]["CUDA_VISIBLE_DEVICES"] == "3,1"
    assert report["environment"]["VLLM_PORT"] == "29100"
    assert report["environment"]["CUDA_DEVICE_ORDER"] is None
    assert report["pid"] == processes.processes["stub"][0].pid


def test_vllm_stub_openai_endpoints_and_errors(processes):
    port = start_stub(processes, ["org/model", "--served-model-name", "a", "b"])
    status, dummy, body = http_request(ADDRESS, port, "GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == ["a", "b"]
    status, dummy, body = http_request(ADDRESS, port, "POST", "/v1/completions", {"model": "b", "max_tokens": 2})
    answer = json.loads(body)
    assert (status, answer["object"], answer["choices"][0]["text"]) == (200, "text_completion", "stub0 stub1")
    status, dummy, body = http_request(ADDRESS, port, "POST", "/v1/chat/completions",
                                       {"model": "a", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["role"] == "assistant"
    assert http_request(ADDRESS, port, "POST", "/v1/completions", {"model": "zzz"})[0] == 404
    assert http_request(ADDRESS, port, "GET", "/nope")[0] == 404
    connection = http.client.HTTPConnection(ADDRESS, port, timeout=5)
    connection.request("POST", "/v1/completions", body=b"not json", headers={"Content-Type": "application/json"})
    assert connection.getresponse().status == 400
    connection.close()


def test_vllm_stub_api_key_from_option_and_environment(processes):
    port = start_stub(processes, ["m", "--api-key", "one"], name="option")
    assert http_request(ADDRESS, port, "GET", "/v1/models")[0] == 401
    assert http_request(ADDRESS, port, "GET", "/v1/models", headers={"Authorization": "Bearer one"})[0] == 200
    assert http_request(ADDRESS, port, "GET", "/health")[0] == 200
    port = start_stub(processes, ["m"], {"VLLM_API_KEY": "two"}, name="environment")
    assert http_request(ADDRESS, port, "GET", "/v1/models", headers={"Authorization": "Bearer two"})[0] == 200
    assert http_request(ADDRESS, port, "GET", "/v1/models", headers={"Authorization": "Bearer one"})[0] == 401


def test_vllm_stub_sigterm_drains_a_stream_then_exits_zero(processes):
    port = start_stub(processes, ["m", "--shutdown-timeout", "10", "--stub-token-delay", "0.2"])
    result = {}

    def stream():
        result["answer"] = http_request(ADDRESS, port, "POST", "/v1/completions",
                                        {"model": "m", "max_tokens": 6, "stream": True}, timeout=10)

    client = threading.Thread(target=stream)
    client.start()
    # Wait until the request is being answered, then ask the stub to stop.
    wait_until(lambda: "POST /v1/completions" in processes.log("stub"), 10, what="the streamed request")
    processes.signal("stub", signal.SIGTERM)
    client.join(15)
    status, headers, body = result["answer"]
    assert status == 200
    assert body.decode().rstrip().endswith("data: [DONE]")
    assert processes.processes["stub"][0].wait(10) == 0


def test_vllm_stub_without_model_exits_with_usage_error():
    result = subprocess.run([sys.executable, str(STUB), "serve", "--port", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, check=False, timeout=30)
    assert result.returncode == 2
    assert "no model given" in result.stderr


def test_vllm_stub_numa_bind_reports_what_vllm_refuses_or_leaves_unbound(processes):
    first = min(os.sched_getaffinity(0))
    # Spawned workers, but one node and three CPU lists for two GPUs: rank 1 has no node.
    port = start_stub(processes, ["m", "-pp", "2", "--numa-bind", "--numa-bind-nodes", "0",
                                  "--numa-bind-cpus", str(first), str(first), str(first)],
                      {"CUDA_VISIBLE_DEVICES": "4,5", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}, name="short")
    report = json.loads(http_request(ADDRESS, port, "GET", "/debug/binding")[2])
    assert report["numa_bind"]["nodes"] == [0]
    assert report["numa_bind"]["cpus"] == [str(first)] * 3
    assert report["numa_bind"]["errors"] == [
        "--numa-bind-nodes lists 1 nodes for 2 GPUs (CUDA_VISIBLE_DEVICES=4,5)",
        "--numa-bind-cpus lists 3 CPU lists for 2 GPUs (CUDA_VISIBLE_DEVICES=4,5)"]
    zero, one = report["workers"]
    assert zero["numactl_args"] == ["--physcpubind=%d" % first, "--membind=0"]
    assert (zero["gpu"], zero["returncode"], zero["cpus"], zero["memory_policy"]) == ("4", 0, str(first), "bind:0")
    assert (one["gpu"], one["numactl_args"], one["argv"], one["returncode"]) == ("5", None, None, None)
    assert one["error"] == "no --numa-bind-nodes entry for local rank 1"

    # Forked workers never pass through numactl: they keep the API server's binding.
    port = start_stub(processes, ["m", "--numa-bind", "--numa-bind-nodes", "0"],
                      {"CUDA_VISIBLE_DEVICES": "2", "VLLM_WORKER_MULTIPROC_METHOD": "fork"}, name="forked")
    report = json.loads(http_request(ADDRESS, port, "GET", "/debug/binding")[2])
    (error,) = report["numa_bind"]["errors"]
    assert error.startswith("VLLM_WORKER_MULTIPROC_METHOD is 'fork', not spawn")
    (worker,) = report["workers"]
    assert (worker["numactl_args"], worker["returncode"], worker["error"]) == ([], 0, None)
    assert (worker["cpus"], worker["memory_policy"]) == (report["cpus"], "default")
    assert worker["argv"][1:] == [str(STUB), "--stub-report-binding"]


def test_vllm_stub_without_numa_bind_starts_no_workers(processes):
    port = start_stub(processes, ["m", "--numa-bind-nodes", "0"], {"CUDA_VISIBLE_DEVICES": "0"})
    report = json.loads(http_request(ADDRESS, port, "GET", "/debug/binding")[2])
    assert (report["numa_bind"], report["workers"]) == (None, [])
