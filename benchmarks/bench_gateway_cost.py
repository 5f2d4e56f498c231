# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The gateway's own cost: the Lua reader of the body against none.

    .venv/bin/python benchmarks/bench_gateway_cost.py [--seconds 5] [--connections 16]
        [--sizes 200,8192,65536] [--rounds 2]

Renders the gateway with the role's template and settings check
(tests/fixtures/gateway_render) for one model on loopback, in front of an
instance that costs next to nothing: a second HAProxy that answers every
request 200 with a small JSON body itself (so what is measured is the
gateway, not a Python stand-in). Runs, with the real HAProxy and wrk
(Debian's wrk, installed by scripts/setup), each request kind through:

- reader:    the rendered configuration;
- no reader: the same configuration without the Lua reader (its
             lua-load, its action and the answers that read its
             variables); the model comes from the header or, the model
             being the only one, the default backend;
- affinity:  the rendered configuration with gateway_affinity on for the
             model (the reader also takes the prompt's prefix).

Request kinds: chat completions of SIZES bytes in all (a system prompt
and a user turn of plain text), the model in the body, or in the X-Model
header (the body names none); and of the largest size, a chat history of
many turns (paragraphs and quotes: a few escapes a turn) and a body heavy
with escapes (a code listing: quotes, backslashes, newlines, \\u
escapes). Each gateway runs alone on one CPU (one HAProxy thread), wrk
(one thread, CONNECTIONS keep-alive connections) and the instance on the
other, so that the gateway's CPU is what limits it. WRK runs SECONDS
seconds, ROUNDS times in turn (reader, no reader, affinity, ...), and the
best round of each is kept. Prints requests/s, p50 and p99 latency, and
the gateway's own CPU per request (its process's user + system time over
the run), the ratio of the reader's throughput to the reader-less one,
and the goals of issue 34 item 5 at the largest size: within 1.5x of the
reader-less throughput (a ratio of 0.67 or more) for each kind, the
X-Model one included (a request with X-Model is not parsed beyond what
routing needs). Asserts only that every request was answered (2xx) without error.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "system"), str(REPO / ".collections")]

from fleet_processes import ProcessGroup, free_port, http_request, wait_until  # noqa: E402
from ansible_collections.gpufleet.numa.tests.fixtures import gateway_render  # noqa: E402

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
WRK = shutil.which("wrk")
ADDRESS = "127.0.0.1"
MODEL = "bench-model"
KEY = "bench-key-0123456789abcdef"
GOAL_RATIO = 1 / 1.5  # "within 1.5x the reader-less config's throughput"
GATEWAY_CPU, CLIENT_CPU = 1, 0  # the gateway alone on one CPU; wrk and the instance on the other

INSTANCE = """global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend instance
    bind {address}:{port}
    http-request return status 200 content-type application/json string '{{"id":"x","object":"chat.completion","choices":[]}}'
"""

WRK_SCRIPT = """wrk.method = "POST"
wrk.path = "/v1/chat/completions"
local file = io.open("{body}", "rb")
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
{extra}
function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format("ERRORS %d %d %d %d %d\\n", errors.connect, errors.read, errors.write, errors.status,
                         errors.timeout))
  io.write(string.format("FIGURES %d %.1f %.1f %d\\n", summary.requests, latency:percentile(50),
                         latency:percentile(99), summary.duration))
end
"""

# One line of a code listing: JSON writes its quotes, backslashes, tab-like
# escapes, newline and non-ASCII letter each as an escape.
CODE_LINE = 'if (x["key"] == "\\n") { printf("%s\\t%d\\n", name, \u00e9t\u00e9); } // "quoted" \\ path\n'


TURN = ("The report's second section says \"throughput rose\", but the table shows otherwise.\n\n"
        "Could you check the figures in rows 3 to 7 and say which one is wrong?\n")


def body(size, kind, with_model):
    """A chat completion's JSON of about SIZE bytes, as bytes: KIND text (a
    system prompt of plain words, a short user turn), chat (a history of
    turns of a few hundred bytes, with paragraphs and quotes: a few escapes
    each) or escapes (a code listing in the system prompt: quotes,
    backslashes, newlines and a non-ASCII letter, each an escape)."""
    message = {"model": MODEL} if with_model else {}
    message["max_tokens"] = 4
    system, user = "You are a helpful assistant. ", "Summarise the text above."
    message["messages"] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if kind == "chat":
        while len(json.dumps(message)) < size:
            message["messages"][-1:-1] = [{"role": "user", "content": TURN},
                                          {"role": "assistant", "content": TURN.upper()}]
        return json.dumps(message).encode()
    room = max(0, size - len(json.dumps(message)))
    if kind == "text":
        words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
        message["messages"][0]["content"] = system + (words * (room // len(words) + 1))[:room]
        return json.dumps(message).encode()
    listing = ""
    while len(json.dumps(system + listing)) < room:
        listing += CODE_LINE
    message["messages"][0]["content"] = system + listing
    return json.dumps(message).encode()


def reader_less(text):
    """The rendered configuration without the Lua reader: no lua-load, no
    lua action, no answer that reads its variables."""
    kept = [line for line in text.splitlines()
            if "lua" not in line and "txn.body_" not in line]
    return "\n".join(kept) + "\n"


def start_haproxy(processes, name, config, cpu):
    """HAProxy on CONFIG, bound to CPU (HAProxy starts one thread per CPU
    it may run on)."""
    check = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    return processes.start(name, ["taskset", "-c", str(cpu), HAPROXY, "-db", "-f", str(config)], dict(os.environ))


def cpu_seconds(pid):
    """User + system CPU seconds of process PID so far."""
    fields = pathlib.Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(port, gateway_pid, body_path, header, seconds, connections, tmp):
    script = tmp / ("wrk-%d.lua" % time.monotonic_ns())
    extra = 'wrk.headers["X-Model"] = "%s"' % MODEL if header else ""
    script.write_text(WRK_SCRIPT.format(body=body_path, key=KEY, extra=extra))
    cpu_before = cpu_seconds(gateway_pid)
    out = subprocess.run(["taskset", "-c", str(CLIENT_CPU), WRK, "-t1", "-c%d" % connections, "-d%ds" % seconds,
                          "-s", str(script), "http://%s:%d/v1/chat/completions" % (ADDRESS, port)],
                         capture_output=True, text=True, check=False, timeout=seconds + 60)
    cpu = cpu_seconds(gateway_pid) - cpu_before
    assert out.returncode == 0, out.stdout + out.stderr
    errors = re.search(r"^ERRORS (.*)$", out.stdout, re.M).group(1)
    requests, p50, p99, duration = re.search(r"^FIGURES (\d+) ([\d.]+) ([\d.]+) (\d+)$", out.stdout, re.M).groups()
    # connect, read, write, answers other than 2xx/3xx, timeouts: none of them
    assert errors == "0 0 0 0 0", "wrk counted errors (connect read write status timeout): %s\n%s" % (
        errors, out.stdout)
    return {"rate": int(requests) / (int(duration) / 1e6), "p50": float(p50) / 1000, "p99": float(p99) / 1000,
            "cpu_us": cpu * 1e6 / int(requests)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--sizes", default="200,8192,65536")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if WRK is None:
        sys.exit("wrk is not installed: run scripts/setup (or apt-get install wrk)")
    sizes = [int(size) for size in args.sizes.split(",")]
    cases = [(size, "text", where) for size in sizes for where in ("body", "header")]
    cases += [(max(sizes), "chat", "body"), (max(sizes), "escapes", "body")]
    with tempfile.TemporaryDirectory(prefix="bench-gateway-cost-") as name:
        tmp = pathlib.Path(name)
        processes = ProcessGroup(str(tmp))
        try:
            instance_port = free_port(ADDRESS)
            (tmp / "instance.cfg").write_text(INSTANCE.format(address=ADDRESS, port=instance_port))
            start_haproxy(processes, "instance", tmp / "instance.cfg", CLIENT_CPU)
            backends = [{"name": "i-0", "host": "h", "address": ADDRESS, "port": instance_port, "model": MODEL}]
            common = {"gateway_api_key": KEY, "gateway_check_interval": "1s"}
            ports, pids = {}, {}
            for variant, extra in (("reader", {}), ("affinity", {"gateway_affinity": {MODEL: {}}})):
                directory = tmp / variant
                directory.mkdir()
                settings = gateway_render.render(directory, ADDRESS, backends, **common, **extra)
                ports[variant] = settings["listen_port"]
                pids[variant] = start_haproxy(processes, variant, settings["config_path"], GATEWAY_CPU).pid
                if variant == "reader":
                    ports["no reader"] = free_port(ADDRESS)
                    text = pathlib.Path(settings["config_path"]).read_text()
                    assert "lua" in text
                    plain = reader_less(text).replace(":%d" % ports["reader"], ":%d" % ports["no reader"])
                    (directory / "no-reader.cfg").write_text(plain)
                    pids["no reader"] = start_haproxy(processes, "no reader", directory / "no-reader.cfg",
                                                      GATEWAY_CPU).pid

            def all_answer():
                try:
                    return all(http_request(ADDRESS, port, "POST", "/v1/chat/completions", timeout=5,
                                            body={"model": MODEL, "messages": []},
                                            headers={"Authorization": "Bearer " + KEY})[0] == 200
                               for port in ports.values())
                except OSError:
                    return False
            wait_until(all_answer, 30, what="every gateway answers")
            print("gateway cost: HAProxy %s on CPU %d (one thread), wrk -t1 -c%d and the instance on CPU %d, "
                  "%d s x %d rounds (best kept); load average %.2f"
                  % (subprocess.run([HAPROXY, "-v"], capture_output=True, text=True, check=True).stdout.split()[2],
                     GATEWAY_CPU, args.connections, CLIENT_CPU, args.seconds, args.rounds, os.getloadavg()[0]))
            results = {}
            for size, kind, where in cases:
                path = tmp / ("body-%d-%s-%s.json" % (size, kind, where))
                path.write_bytes(body(size, kind, where == "body"))
                for dummy in range(args.rounds):
                    for variant, port in ports.items():
                        figures = run_wrk(port, pids[variant], path, where == "header", args.seconds,
                                          args.connections, tmp)
                        key = (size, kind, where, variant)
                        if key not in results or figures["rate"] > results[key]["rate"]:
                            results[key] = figures
        finally:
            processes.stop_all()
    report(cases, results)


def report(cases, results):
    variants = ("no reader", "reader", "affinity")
    print("\n%8s %-7s %-6s | %-29s | %-29s | %-29s | %s" % (
        "bytes", "body", "model", *("%s: req/s p50 p99 ms, CPU" % variant for variant in variants),
        "req/s of reader, affinity / no reader"))
    for size, kind, where in cases:
        row = [results[(size, kind, where, variant)] for variant in variants]
        print("%8d %-7s %-6s | %s | %.2f, %.2f" % (
            size, kind, where, " | ".join("%6.0f %5.2f %6.2f %5.0f us" % (r["rate"], r["p50"], r["p99"], r["cpu_us"])
                                          for r in row),
            row[1]["rate"] / row[0]["rate"], row[2]["rate"] / row[0]["rate"]))
    largest = max(size for size, dummy, dummy in cases)
    for size, kind, where in cases:
        if size != largest:
            continue
        plain = results[(size, kind, where, "no reader")]["rate"]
        ratio = results[(size, kind, where, "reader")]["rate"] / plain
        print("goal, %d bytes of %s, model in the %s: within 1.5x of the reader-less throughput: %s (%.2f of it)"
              % (size, kind, where, "met" if ratio >= GOAL_RATIO else "NOT met", ratio))


if __name__ == "__main__":
    main()
