# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""tests/stub/vllm-stub, started as a real process on loopback."""

import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time


from fleet_processes import free_port, http_request, wait_for_health, wait_until
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist

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


# --- multi-node: --nnodes, --node-rank, --master-addr, --master-port, --headless

def multinode_args(nnodes, master_port, rank=0):
    """A multi-node instance's options for node RANK (the head is 0; the others run headless)."""
    args = ["--nnodes", str(nnodes), "--master-addr", ADDRESS, "--master-port", str(master_port)]
    return args + (["--node-rank", str(rank), "--headless"] if rank else [])


def health_status(port):
    try:
        return http_request(ADDRESS, port, "GET", "/health", timeout=0.5)[0]
    except OSError:
        return None


def start_head(processes, nnodes, master_port, name="head"):
    """Start a head and wait until its HTTP port answers (503 while ranks are missing); return that port."""
    port = free_port(ADDRESS)
    processes.start(name, [str(STUB), "serve", "m"] + multinode_args(nnodes, master_port)
                    + ["--host", ADDRESS, "--port", str(port)], dict(os.environ))
    process = processes.processes[name][0]

    def answers():
        assert process.poll() is None, processes.log(name)
        return health_status(port)
    wait_until(answers, 15, what="%s's HTTP port" % name)
    return port


def start_rank(processes, rank, nnodes, master_port, name, environment=None, extra=()):
    env = dict(os.environ, VLLM_ENGINE_READY_TIMEOUT_S="30")
    env.update(environment or {})
    return processes.start(name, [str(STUB), "serve", "m"] + multinode_args(nnodes, master_port, rank) + list(extra),
                           env)


def start_joined_pair(processes):
    """A two-node instance: a head and its rank 1 ("rank1"), joined and serving; (master port, API port)."""
    master_port = free_port(ADDRESS)
    port = start_head(processes, 2, master_port)
    start_rank(processes, 1, 2, master_port, "rank1")
    wait_joined(processes, "rank1")
    wait_for_health(processes, "head", ADDRESS, port)
    return master_port, port


def wait_joined(processes, name):
    process = processes.processes[name][0]

    def joined():
        assert process.poll() is None, "%s exited with %s:\n%s" % (name, process.returncode, processes.log(name))
        return "joined head" in processes.log(name)
    wait_until(joined, 15, what="%s to join its head" % name)


def run_stub(args, environment=None, timeout=30):
    env = dict(os.environ, VLLM_ENGINE_READY_TIMEOUT_S="5")
    env.update(environment or {})
    return subprocess.run([sys.executable, str(STUB), "serve", "m"] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, check=False, timeout=timeout, env=env)


def test_vllm_stub_refuses_node_ranks_vllm_refuses(tmp_path):
    config = tmp_path / "rank.yaml"
    config.write_text("nnodes: 2\nnode-rank: 3\nheadless: true\nmaster-port: 1\n")
    for args, message in [
        (["--nnodes", "2", "--node-rank", "2", "--headless"], "--node-rank 2 is out of range for --nnodes 2 (0..1)"),
        (["--nnodes", "2", "--node-rank", "-1", "--headless"], "--node-rank -1 is out of range for --nnodes 2"),
        (["--config", str(config)], "--node-rank 3 is out of range for --nnodes 2"),
        (["--nnodes", "2", "--headless"], "--headless on node rank 0"),
        (["--headless"], "--headless on node rank 0"),
        (["--nnodes", "2", "--node-rank", "1"], "--node-rank 1 needs --headless"),
        (["--nnodes", "0"], "--nnodes 0: at least 1 node"),
    ]:
        result = run_stub(args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)


def test_vllm_stub_head_serves_once_every_rank_joined(processes):
    master_port = free_port(ADDRESS)
    port = start_head(processes, 3, master_port)
    master = "%s:%d" % (ADDRESS, master_port)
    report = json.loads(http_request(ADDRESS, port, "GET", "/debug/binding")[2])
    assert (report["multinode"], report["ranks"]) == ({"nnodes": 3, "node_rank": 0, "master": master}, [])
    assert health_status(port) == 503
    status, dummy, body = http_request(ADDRESS, port, "POST", "/v1/completions", {"model": "m"})
    assert status == 503
    assert json.loads(body)["error"]["message"] == "node ranks 1,2 of 3 have not joined %s" % master
    # A port probe (gpufleet-wait-ready tcp://) connects and closes without a hello: no rank.
    socket.create_connection((ADDRESS, master_port), timeout=5).close()

    start_rank(processes, 2, 3, master_port, "rank2", {"CUDA_VISIBLE_DEVICES": "6,7"})
    wait_joined(processes, "rank2")
    assert "vllm-stub: node rank 2 of 3 joined head %s\n" % master in processes.log("rank2")
    assert health_status(port) == 503
    status, dummy, body = http_request(ADDRESS, port, "POST", "/v1/completions", {"model": "m"})
    assert (status, json.loads(body)["error"]["message"]) == (503, "node ranks 1 of 3 have not joined %s" % master)

    start_rank(processes, 1, 3, master_port, "rank1", {"CUDA_VISIBLE_DEVICES": ""})
    wait_for_health(processes, "head", ADDRESS, port)
    status, dummy, body = http_request(ADDRESS, port, "POST", "/v1/completions", {"model": "m", "max_tokens": 1})
    assert status == 200, body
    ranks = json.loads(body)["stub_binding"]["ranks"]
    pids = [processes.processes[name][0].pid for name in ("rank1", "rank2")]
    assert ranks == [
        {"node_rank": 1, "nnodes": 3, "master": master, "hostname": socket.gethostname(),
         "cuda_visible_devices": "", "pid": pids[0], "peer": ranks[0]["peer"]},
        {"node_rank": 2, "nnodes": 3, "master": master, "hostname": socket.gethostname(),
         "cuda_visible_devices": "6,7", "pid": pids[1], "peer": ranks[1]["peer"]}]
    assert all(rank["peer"].startswith("127.") for rank in ranks), ranks

    # A rank that stops (SIGTERM: exit 0) leaves; the head stops serving.
    assert processes.stop("rank1") == 0, processes.log("rank1")
    wait_until(lambda: health_status(port) == 503, 10, what="the head to miss rank 1")
    report = json.loads(http_request(ADDRESS, port, "GET", "/debug/binding")[2])
    assert [rank["node_rank"] for rank in report["ranks"]] == [2]
    assert "node rank 1 left" in processes.log("head")


def test_vllm_stub_head_refuses_duplicate_and_foreign_ranks(processes):
    master_port, port = start_joined_pair(processes)

    result = run_stub(multinode_args(2, master_port, 1))
    assert result.returncode == 1, result.stderr
    assert "head %s:%d refused this rank: node rank 1 has already joined" % (ADDRESS, master_port) in result.stderr
    result = run_stub(multinode_args(3, master_port, 2))
    assert result.returncode == 1, result.stderr
    assert "refused this rank: nnodes 3 does not match the head's 2" in result.stderr
    for hello, error in [({"node_rank": 5, "nnodes": 2}, "node rank 5 is out of range 1..1"),
                         ({"node_rank": 0, "nnodes": 2}, "node rank 0 is out of range 1..1")]:
        with socket.create_connection((ADDRESS, master_port), timeout=5) as connection:
            connection.sendall((json.dumps(hello) + "\n").encode())
            with connection.makefile("rb") as reader:
                assert json.loads(reader.readline()) == {"ok": False, "error": error}
                assert reader.read() == b"", "the head should close a refused connection"
    # The joined rank is still the only one, and the head still serves.
    report = json.loads(http_request(ADDRESS, port, "GET", "/debug/binding")[2])
    assert [rank["pid"] for rank in report["ranks"]] == [processes.processes["rank1"][0].pid]
    assert health_status(port) == 200


def test_vllm_stub_rank_retries_until_its_head_listens(processes):
    master_port = free_port(ADDRESS)
    first = min(os.sched_getaffinity(0))
    # Its GPU worker is bound before it connects, as on the head.
    start_rank(processes, 1, 2, master_port, "rank1",
               {"CUDA_VISIBLE_DEVICES": "3", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"},
               ["--numa-bind", "--numa-bind-nodes", "0", "--numa-bind-cpus", str(first)])
    wait_until(lambda: "joining head" in processes.log("rank1"), 15, what="rank 1 to try its head")
    time.sleep(1.5)  # three attempts refused
    assert processes.processes["rank1"][0].poll() is None, processes.log("rank1")
    assert "joined" not in processes.log("rank1")
    port = start_head(processes, 2, master_port)
    wait_joined(processes, "rank1")
    wait_for_health(processes, "head", ADDRESS, port)
    log = processes.log("rank1")
    worker = "vllm-stub: worker 0 (GPU 3): numactl --physcpubind=%d --membind=0: cpus %d, memory bind:0\n" % (
        first, first)
    assert worker in log and log.index(worker) < log.index("joining head"), log


def test_vllm_stub_rank_gives_up_without_a_head():
    started = time.monotonic()
    result = run_stub(multinode_args(2, free_port(ADDRESS), 1), {"VLLM_ENGINE_READY_TIMEOUT_S": "1"})
    assert result.returncode == 1, result.stderr
    assert "did not accept a connection within 1 s" in result.stderr
    assert time.monotonic() - started < 15


def test_vllm_stub_rank_fails_when_its_head_dies(processes):
    master_port, dummy = start_joined_pair(processes)
    processes.signal("head", signal.SIGKILL)
    assert processes.processes["rank1"][0].wait(10) == 1
    assert "head %s:%d closed the connection" % (ADDRESS, master_port) in processes.log("rank1")


def metric(port, name, labels=""):
    """The value of metric NAME (with LABELS among its labels) on /metrics."""
    for line in http_request(ADDRESS, port, "GET", "/metrics")[2].decode().splitlines():
        if line.startswith(name + "{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no %s{%s} on /metrics" % (name, labels))


def test_vllm_stub_aborts_a_non_streamed_request_whose_client_left(processes):
    """As vLLM does: the client's close stops the generation, counted as an
    abort and logged, while a request whose client waits is answered."""
    port = start_stub(processes, ["m"])
    body = json.dumps({"model": "m", "max_tokens": 50, "stub_token_delay": 0.2}).encode()
    with socket.create_connection((ADDRESS, port), timeout=5) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_until(lambda: metric(port, "vllm:num_requests_running") == 1, 10, what="the request in flight")
    wait_until(lambda: metric(port, "vllm:num_requests_running") == 0, 3, what="the abort")
    assert metric(port, "vllm:request_success_total", 'finished_reason="abort"') == 1
    assert metric(port, "vllm:request_success_total", 'finished_reason="length"') == 0
    log = processes.log("stub")
    assert log.count("Received request cmpl-") == 1 and log.count("Aborted request cmpl-") == 1, log
    status, dummy, answer = http_request(ADDRESS, port, "POST", "/v1/completions",
                                         {"model": "m", "max_tokens": 3, "stub_token_delay": 0.05})
    assert (status, json.loads(answer)["choices"][0]["text"]) == (200, "stub0 stub1 stub2")
    assert metric(port, "vllm:request_success_total", 'finished_reason="length"') == 1
