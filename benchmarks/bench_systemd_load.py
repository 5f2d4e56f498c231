# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Requests through the gateway while the fleet changes under them.

Runs against the Molecule scenario systemd_fleet (real systemd in two boxes,
the gateway on gpu-a); converge it first and leave it up:

    molecule converge -s systemd_fleet
    .venv/bin/python benchmarks/bench_systemd_load.py [--threads 4] [--pause 0.05]
    molecule destroy -s systemd_fleet

A bounded client (THREADS threads, loopback only, each sending one small
completion at a time with PAUSE seconds between them and at most
--max-requests in all per phase) runs through each phase:

1. steady: nothing happens (a baseline);
2. roll: `molecule converge` with a changed role variable (vllm_environment
   gets GPUFLEET_BENCH_ROLL=<time>), which rewrites every unit: each box
   restarts its instances one at a time, both boxes at once; each instance
   is drained on the gateway first (HAProxy runtime API) and put back once
   HAProxy has it UP again;
3. kill: `kill -9` of one instance's main process (gpu-b, first unit);
   systemd restarts it after RestartSec, the gateway's checks take it out
   and put it back; the requests it was serving are replayed on another
   instance (the gateway's L7 retries).

For each phase it prints the requests sent, failed (by kind), the longest
stall (the longest time in which no request completed successfully) and
the slowest request. Prints figures, asserts nothing. The last roll leaves
GPUFLEET_BENCH_ROLL in the units; `molecule converge` restores them.

Figures (this 2-core machine, shared, default options; 4 instances):

    before drain and L7 retries: roll  ~7,000 sent, 3-4 failed (HTTP 502, SH--)
                                 kill  0 failed (connection retries, redispatch)
    with them:  steady  5.0 s  sent  368  failed 0  longest stall 0.06 s
                roll   34.8 s  sent 2437  failed 0  longest stall 0.06 s  (converge 32.8 s; 4 of 4 restarted)
                kill   26.3 s  sent 1948  failed 0  longest stall 0.06 s  (NRestarts=1, active)

The Molecule scenario asserts the same (verify.yml: 0 failed requests
during a roll and a kill -9).
"""

from __future__ import annotations

import argparse
import collections
import ipaddress
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SCENARIO = "systemd_fleet"


class Client:
    """THREADS loops that POST completions until stopped or the request
    budget is spent. Records (start, end, error or None) per request."""

    def __init__(self, url, model, threads, pause, max_requests, timeout):
        self.url = url + "/v1/completions"
        self.body = json.dumps({"model": model, "prompt": "bench", "max_tokens": 8}).encode()
        self.threads = threads
        self.pause = pause
        self.max_requests = max_requests
        self.timeout = timeout
        self.records = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.workers = []
        self.started = self.ended = None

    def _one(self):
        request = urllib.request.Request(self.url, data=self.body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                json.load(answer)
            return None
        except urllib.error.HTTPError as error:
            return "HTTP %d" % error.code
        except (OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            return type(reason).__name__ if not isinstance(reason, str) else reason

    def _loop(self):
        while not self.stop.is_set():
            with self.lock:
                if len(self.records) >= self.max_requests:
                    return
            start = time.monotonic()
            error = self._one()
            end = time.monotonic()
            with self.lock:
                self.records.append((start, end, error))
            if error:
                time.sleep(self.pause)
            self.stop.wait(self.pause)

    def __enter__(self):
        self.started = time.monotonic()
        for dummy in range(self.threads):
            worker = threading.Thread(target=self._loop, daemon=True)
            worker.start()
            self.workers.append(worker)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for worker in self.workers:
            worker.join(self.timeout + 5)
        self.ended = time.monotonic()
        return False

    def figures(self):
        records = sorted(self.records)
        failed = collections.Counter(error for dummy, dummy2, error in records if error)
        good_ends = sorted(end for dummy, end, error in records if not error)
        # The longest time in which no request completed successfully,
        # counted from the start of the phase to its end.
        marks = [self.started] + good_ends + [self.ended]
        stall = max(b - a for a, b in zip(marks, marks[1:]))
        latencies = sorted(end - start for start, end, error in records)
        return {
            "seconds": self.ended - self.started,
            "sent": len(records),
            "failed": sum(failed.values()),
            "failures": dict(failed),
            "longest_stall_s": stall,
            "slowest_request_s": latencies[-1] if latencies else 0.0,
            "median_request_s": latencies[len(latencies) // 2] if latencies else 0.0,
        }


def run(argv, **kwargs):
    return subprocess.run(argv, cwd=REPO, check=True, **kwargs)


def converge(extra_vars):
    env = dict(os.environ)
    env["PATH"] = os.path.join(REPO, ".venv", "bin") + os.pathsep + env.get("PATH", "")
    env.setdefault("ANSIBLE_CONFIG", os.path.join(REPO, "ansible.cfg"))
    started = time.monotonic()
    run(["molecule", "converge", "-s", SCENARIO, "--", "-e", json.dumps(extra_vars)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return time.monotonic() - started


def box(*args, capture=False):
    result = run([os.path.join(REPO, "scripts", "box")] + list(args), capture_output=capture, text=True)
    return result.stdout if capture else None


def main_pids(boxes):
    """{(box, unit): MainPID} of every gpufleet unit in the boxes."""
    pids = {}
    for name in boxes:
        out = box("shell", name, "systemctl", "show", "--property=Id,MainPID", "gpufleet-*.service", capture=True)
        for block in out.strip().split("\n\n"):
            fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            if fields.get("Id"):
                pids[(name, fields["Id"])] = fields.get("MainPID")
    return pids


def report(name, figures, note):
    failures = ", ".join("%s %d" % item for item in sorted(figures["failures"].items())) or "-"
    print("%-6s %6.1f s  sent %5d  failed %4d  longest stall %5.2f s  slowest %5.2f s  median %6.4f s  (%s)  %s" % (
        name, figures["seconds"], figures["sent"], figures["failed"], figures["longest_stall_s"],
        figures["slowest_request_s"], figures["median_request_s"], failures, note))
    sys.stdout.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--gateway", default="http://127.0.77.11:8080", help="the gateway (loopback only)")
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.05, help="seconds each thread waits between requests")
    parser.add_argument("--max-requests", type=int, default=20000, help="per phase")
    parser.add_argument("--timeout", type=float, default=10.0, help="per request")
    parser.add_argument("--steady", type=float, default=5.0, help="seconds of the baseline phase")
    parser.add_argument("--after-kill", type=float, default=25.0, help="seconds the kill phase runs")
    parser.add_argument("--boxes", default="gpu-a,gpu-b", help="the boxes whose instances roll")
    parser.add_argument("--kill-box", default="gpu-b")
    parser.add_argument("--kill-unit", default="gpufleet-vllm-0.service")
    parser.add_argument("--phases", default="steady,roll,kill")
    options = parser.parse_args(argv)

    host = urllib.parse.urlsplit(options.gateway).hostname or ""
    if not ipaddress.ip_address(host).is_loopback:
        parser.error("--gateway must be a loopback address, got %s" % host)
    if not 1 <= options.threads <= 16:
        parser.error("--threads must lie in 1-16")

    def client():
        return Client(options.gateway, options.model, options.threads, options.pause,
                      options.max_requests, options.timeout)

    print("client: %d threads, pause %.3f s, timeout %.0f s, at most %d requests per phase, gateway %s" % (
        options.threads, options.pause, options.timeout, options.max_requests, options.gateway))
    phases = options.phases.split(",")
    if "steady" in phases:
        with client() as load:
            time.sleep(options.steady)
        report("steady", load.figures(), "no change")
    if "roll" in phases:
        before = main_pids(options.boxes.split(","))
        with client() as load:
            took = converge({"vllm_environment": {"GPUFLEET_BENCH_ROLL": str(int(time.time()))}})
            time.sleep(2)
        after = main_pids(options.boxes.split(","))
        rolled = sum(1 for key, pid in before.items() if after.get(key) not in (None, "0", pid))
        report("roll", load.figures(), "converge with a changed vllm_environment took %.1f s; %d of %d instances restarted" % (
            took, rolled, len(before)))
    if "kill" in phases:
        with client() as load:
            time.sleep(1)
            pid = box("shell", options.kill_box, "systemctl", "show", "--property=MainPID", "--value",
                      options.kill_unit, capture=True).strip()
            box("shell", options.kill_box, "kill", "-9", pid)
            killed = time.monotonic()
            time.sleep(options.after_kill)
        back = box("shell", options.kill_box, "systemctl", "show", "--property=MainPID,NRestarts,ActiveState",
                   options.kill_unit, capture=True).split()
        report("kill", load.figures(), "kill -9 %s %s (pid %s) %.1f s into the phase; now %s" % (
            options.kill_box, options.kill_unit, pid, killed - load.started, " ".join(back)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
