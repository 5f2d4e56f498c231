# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Network namespaces for the gateways' failover test (test_gateway_failover.py).

Lab: one namespace holds a Linux bridge (the switch); the two gateways, the
backend and the client each have a namespace joined to it by a veth pair,
with addresses in 10.213.N.0/24 (N from the test's pid). Namespace names
carry the pid. Lab.close() deletes every namespace it made (which removes
the bridge and the veth pairs); processes are stopped by the test's
ProcessGroup, by PID.

Run as a script inside the client's namespace it is the paced client:
    python3 netns_gateways.py client URL RATE SECONDS STOP_FILE OUT
one POST /v1/completions every 1/RATE s, each in its own thread (timeout
5 s), until STOP_FILE exists or SECONDS pass; OUT gets one JSON line per
request {sent, done, ok, status, error} (time.monotonic(), which every
process of the machine shares).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SWITCH_PORT = "p%d"       # the bridge's end of host i's veth pair
INTERFACE = "vrrp0"       # the host's end, in its namespace
# A slow answer (a loaded machine) is not a failed request.
REQUEST_TIMEOUT = 5.0


def ip(*args, check=True):
    return subprocess.run(("ip",) + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=check, timeout=20)


class Lab:
    """The switch and one namespace per host: hosts is {role: last octet}."""

    def __init__(self, hosts):
        pid = os.getpid()
        self.subnet = "10.213.%d" % (pid % 200 + 20)
        self.prefix = "gf%d" % pid
        self.switch = self.prefix + "-sw"
        self.namespaces = {}
        self.addresses = {}
        self.made = []
        try:
            self._build(hosts)
        except BaseException:
            self.close()
            raise

    def _build(self, hosts):
        ip("netns", "add", self.switch)
        self.made.append(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for index, (role, octet) in enumerate(sorted(hosts.items())):
            namespace = "%s-%s" % (self.prefix, role)
            ip("netns", "add", namespace)
            self.made.append(namespace)
            port = SWITCH_PORT % index
            ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", INTERFACE, "netns", namespace)
            ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            address = "%s.%d" % (self.subnet, octet)
            ip("-n", namespace, "addr", "add", address + "/24", "dev", INTERFACE)
            ip("-n", namespace, "link", "set", INTERFACE, "up")
            ip("-n", namespace, "link", "set", "lo", "up")
            self.namespaces[role] = namespace
            self.addresses[role] = address

    def exec_argv(self, role, argv):
        return ["ip", "netns", "exec", self.namespaces[role]] + list(argv)

    def holds(self, role, address):
        """Whether ROLE's namespace has ADDRESS on any interface."""
        out = ip("-n", self.namespaces[role], "-4", "-o", "addr", "show", check=False).stdout
        return (" %s/" % address) in out

    def link(self, role, state):
        ip("-n", self.namespaces[role], "link", "set", INTERFACE, state)

    def close(self):
        for namespace in reversed(self.made):
            ip("netns", "del", namespace, check=False)
        self.made = []


class Sampler(threading.Thread):
    """Every INTERVAL s, which of ROLES hold ADDRESS: samples [(t, {role: bool})]."""

    def __init__(self, lab, roles, address, interval=0.1):
        super().__init__(daemon=True)
        self.lab, self.roles, self.address, self.interval = lab, roles, address, interval
        self.samples = []
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set():
            started = time.monotonic()
            self.samples.append((started, dict((role, self.lab.holds(role, self.address)) for role in self.roles)))
            self.stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def stop(self):
        self.stopping.set()
        self.join(10)


def client(url, rate, seconds, stop_file, out):
    """The paced load (see the module's docstring)."""
    body = json.dumps({"model": "m", "prompt": "ping", "max_tokens": 1}).encode()
    results = []
    lock = threading.Lock()

    def one(sent):
        entry = {"sent": sent, "ok": False, "status": None, "error": None}
        try:
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as answer:
                answer.read()
                entry["status"] = answer.status
                entry["ok"] = answer.status == 200
        except urllib.error.HTTPError as exc:
            entry["status"], entry["error"] = exc.code, "HTTP %d" % exc.code
        except Exception as exc:  # any failure to get an answer counts
            entry["error"] = "%s: %s" % (type(exc).__name__, exc)
        entry["done"] = time.monotonic()
        with lock:
            results.append(entry)

    threads = []
    start = time.monotonic()
    tick = 0
    while time.monotonic() - start < seconds and not os.path.exists(stop_file):
        due = start + tick / rate
        time.sleep(max(0.0, due - time.monotonic()))
        thread = threading.Thread(target=one, args=(time.monotonic(),), daemon=True)
        thread.start()
        threads.append(thread)
        tick += 1
    for thread in threads:
        thread.join(REQUEST_TIMEOUT + 1)
    with open(out, "w") as handle:
        for entry in sorted(results, key=lambda e: e["sent"]):
            handle.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 7 or sys.argv[1] != "client":
        sys.exit("usage: netns_gateways.py client URL RATE SECONDS STOP_FILE OUT")
    client(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6])
