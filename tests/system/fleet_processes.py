# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Start rendered vLLM units as real processes on this machine, and talk to
them over loopback.

A unit planned for another machine names NUMA nodes and CPUs that may not
exist here. `rebind_to_local_node` rewrites only numactl's node and CPU
arguments to this machine's node and records what the unit asked for; the
rest of the command line and the environment are used as rendered.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import time

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist

# What systemd gives every service before Environment= (systemd.exec(5)).
SYSTEMD_BASE_ENVIRONMENT = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
    "LANG": "C.UTF-8",
}

# numactl options that take a node list, and the policy each leaves behind
# as /proc/<pid>/numa_maps prints it.
_NODE_OPTIONS = {
    "cpunodebind": None,
    "membind": "bind",
    "interleave": "interleave",
    "preferred": "prefer",
}
_SHORT_OPTIONS = {"-N": "cpunodebind", "-m": "membind", "-i": "interleave", "-C": "physcpubind", "-p": "preferred"}


def node_cpus(node, sysfs="/sys/devices/system/node"):
    """CPU ids of a NUMA node of this machine."""
    with open(os.path.join(sysfs, "node%d" % node, "cpulist")) as cpulist:
        return parse_cpulist(cpulist.read())


def is_numactl(path):
    return os.path.basename(path) == "numactl"


def split_numactl(argv):
    """Split [numactl, options..., program, args...] into
    (numactl path, [(option, value)], program argv)."""
    if not argv or not is_numactl(argv[0]):
        raise ValueError("not a numactl command line: %r" % (argv[:1],))
    options = []
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if word.startswith("--"):
            name, sep, value = word[2:].partition("=")
            if name == "localalloc":
                options.append((name, None))
                i += 1
                continue
            if name not in _NODE_OPTIONS and name != "physcpubind":
                raise ValueError("numactl option %s is not understood here" % word)
            if not sep:
                value = argv[i + 1]
                i += 1
            options.append((name, value))
            i += 1
        elif word in _SHORT_OPTIONS:
            options.append((_SHORT_OPTIONS[word], argv[i + 1]))
            i += 2
        elif word.startswith("-"):
            raise ValueError("numactl option %s is not understood here" % word)
        else:
            break
    if i >= len(argv):
        raise ValueError("numactl command line without a program: %r" % (argv,))
    return argv[0], options, argv[i:]


def rebind_to_local_node(argv, local_node, slot=0):
    """Rewrite a numactl command line for this machine's LOCAL_NODE.

    Node lists become LOCAL_NODE; a --physcpubind list becomes one CPU of
    that node (the SLOT-th, wrapping), so instances that share a node keep
    disjoint CPUs as far as this machine allows. Returns (new argv, record)
    where record holds the original options and the binding the process
    must report once started: {"requested": {...}, "cpus": cpulist,
    "memory_policy": "bind:0" | "interleave:0" | "prefer:0" | "default"}.
    """
    numactl, options, program = split_numactl(argv)
    local_cpus = node_cpus(local_node)
    requested = {}
    rewritten = []
    cpus = sorted(os.sched_getaffinity(0))
    memory_policy = "default"
    for name, value in options:
        requested[name] = value
        if name == "localalloc":
            rewritten.append("--localalloc")
            memory_policy = "local"
        elif name == "physcpubind":
            cpu = local_cpus[slot % len(local_cpus)]
            rewritten.append("--physcpubind=%d" % cpu)
            cpus = [cpu]
        else:
            rewritten.append("--%s=%d" % (name, local_node))
            if name == "cpunodebind":
                cpus = local_cpus
            else:
                memory_policy = "%s:%d" % (_NODE_OPTIONS[name], local_node)
    record = {"requested": requested, "cpus": format_cpulist(cpus), "memory_policy": memory_policy}
    return [numactl] + rewritten + program, record


def free_port(address="127.0.0.1"):
    """A TCP port nothing listens on at ADDRESS right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def ports_free(address, ports):
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, port))
            except OSError:
                return False
    return True


def http_request(address, port, method, path, body=None, headers=None, timeout=5.0, raw=None, tls=None):
    """One HTTP request (HTTPS with an ssl context `tls`); body is JSON, or
    `raw` bytes as they are. Returns (status, headers with lower-case names,
    body bytes)."""
    if tls is not None:
        connection = http.client.HTTPSConnection(address, port, context=tls, timeout=timeout)
    else:
        connection = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        all_headers = {"Content-Type": "application/json"} if data is not None else {}
        all_headers.update(headers or {})
        connection.request(method, path, body=data, headers=all_headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


class ProcessGroup:
    """Processes started for a test, each leading its own process group so that
    stopping one stops its children; `stop_all` is safe to call twice."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.processes = {}

    def start(self, name, argv, environment, cwd=None):
        log_path = os.path.join(self.log_dir, "%s.log" % name)
        log = open(log_path, "wb")
        try:
            process = subprocess.Popen(
                argv, env=environment, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        self.processes[name] = (process, log_path)
        return process

    def log(self, name):
        with open(self.processes[name][1], errors="replace") as log:
            return log.read()

    def signal(self, name, signum):
        process = self.processes[name][0]
        if process.poll() is None:
            os.killpg(process.pid, signum)

    def stop(self, name, timeout=5.0):
        """SIGTERM, then SIGKILL after TIMEOUT; returns the exit status."""
        process = self.processes[name][0]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        return process.returncode

    def stop_all(self):
        for name in list(self.processes):
            try:
                self.stop(name)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


def wait_until(predicate, timeout, interval=0.1, what="condition"):
    """Poll PREDICATE until it returns a true value; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def wait_for_health(processes, name, address, port, timeout=15.0):
    """Wait for GET /health to answer 200; fail with the process log if it exits."""
    process = processes.processes[name][0]

    def healthy():
        if process.poll() is not None:
            raise AssertionError("%s exited with %s before answering /health:\n%s"
                                 % (name, process.returncode, processes.log(name)))
        try:
            return http_request(address, port, "GET", "/health", timeout=0.5)[0] == 200
        except OSError:
            return False

    wait_until(healthy, timeout, what="%s on %s:%d/health" % (name, address, port))


def haproxy_server_rows(address, port, uri="/stats", backend=None):
    """{server name: its row of HAProxy's statistics CSV} of every server of
    every model's backend (model-*), or of BACKEND only."""
    status, dummy, body = http_request(address, port, "GET", uri + ";csv", timeout=2.0)
    if status != 200:
        raise AssertionError("statistics page answered %d" % status)
    lines = body.decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    rows = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        if row.get("pxname") in ("stats", "vllm_api") or (backend is not None and row.get("pxname") != backend):
            continue
        if row.get("svname") not in ("FRONTEND", "BACKEND"):
            rows[row["svname"]] = row
    return rows


def haproxy_server_states(address, port, uri="/stats", backend=None):
    """{server name: status} of every server of every backend (one per
    served model), or of BACKEND only, from HAProxy's statistics page in
    CSV form."""
    return dict((name, row["status"]) for name, row in haproxy_server_rows(address, port, uri, backend).items())


def haproxy_fully_up(address, port):
    """Whether HAProxy holds every server of the models' backends at full
    health: "UP", where check_fall failed checks in a row mark it down. A
    server starts "UP 1/<fall>" until its first check, and one failed check
    (a check unanswered within its interval on a loaded machine) marks it
    down from there."""
    try:
        states = haproxy_server_states(address, port)
    except OSError:
        return False
    return bool(states) and set(states.values()) == {"UP"}


def systemd_binding_as_numactl(service, numactl, local_node, cpus):
    """The CPUAffinity=/NUMAPolicy=/NUMAMask= of a [Service] section as the
    numactl prefix that applies the same policy at exec time, with CPUs
    replaced by CPUS and nodes by LOCAL_NODE of this machine. Returns
    (prefix argv, record) like rebind_to_local_node."""
    requested = {key: service[key] for key in ("CPUAffinity", "NUMAPolicy", "NUMAMask") if key in service}
    prefix = [numactl]
    if "CPUAffinity" in service:
        parse_cpulist(service["CPUAffinity"])  # must be a cpulist systemd accepts
        prefix.append("--physcpubind=%s" % format_cpulist(cpus))
    else:
        cpus = sorted(os.sched_getaffinity(0))
    policy = service.get("NUMAPolicy", "default")
    if policy in ("bind", "interleave", "preferred") and "NUMAMask" not in service:
        raise ValueError("NUMAPolicy=%s without NUMAMask=" % policy)
    option, shown = {
        "bind": ("--membind=%d", "bind:%d"),
        "interleave": ("--interleave=%d", "interleave:%d"),
        "preferred": ("--preferred=%d", "prefer:%d"),
        "local": ("--localalloc", "local"),
        "default": (None, "default"),
    }[policy]
    if option:
        prefix.append(option % local_node if "%d" in option else option)
    memory_policy = shown % local_node if "%d" in shown else shown
    return prefix, {"requested": requested, "cpus": format_cpulist(cpus), "memory_policy": memory_policy}
