# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""CPU per GPU host of playbooks/deploy_inference.yml as the fleet grows.

    .venv/bin/python benchmarks/bench_fleet_scale.py [--hosts 10,30,100] [--quick] [--forks 5]
        [--strategy NAME] [--env KEY=VALUE ...] [--serial N] [--tasks N]

For each N, builds an inventory of N recorded GPU hosts and one gateway in
the demo's style (inventories/demo: its group_vars and placement variables,
local connection, each host its own name and loopback address, the demo's
recorded captures from tests/fixtures/machines in turn, everything rendered
under a temporary staging tree) and runs, each in a fresh ansible-playbook:

- the first deploy of deploy_inference.yml (an empty staging tree and record);
- a no-change rerun, which must change nothing;
- the floor: one `stat` task on the same GPU hosts (what any play costs).

The CPU of a run is the user+system time of the ansible-playbook process
and everything it waited for (its forks and their modules), and of the
processes it left behind (this script is their subreaper and reaps them):
the growth of this process's RUSAGE_CHILDREN over the run, divided by N. Prints for each N that CPU
per GPU host, the ratio to the floor, the task results per GPU host (the
recap's ok + skipped + failed + unreachable + rescued, the most over the
GPU hosts; ok includes changed), and over the N: the marginal CPU per
extra host and the growth of the per-host cost, the c of a least-squares
fit total(N) = a + b*N + c*N^2 (a the run's fixed cost, b the constant
per-host part; c in ms per host per extra host, needs three N or more),
against the goals below. Asserts nothing but that the rerun changed nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
DEMO = os.path.join(REPO, "inventories", "demo")
DEPLOY = os.path.join(REPO, "playbooks", "deploy_inference.yml")

# Goals (issue 33, item 4).
GOAL_GROWTH_MS = 1.0          # per-host CPU grows < 1 ms per extra host
GOAL_RERUN_OVER_FLOOR = 3.0   # a no-change rerun within 3x the floor, in CPU
GOAL_RESULTS = 10             # task results per GPU host
EXTRAPOLATE = 1000            # the fleet size the figures are for
PR_SET_CHILD_SUBREAPER = 36   # prctl(2)

# Counts what each host ran, by role (a loop is one result, an include one),
# keeps the recap per host and each task's wall time.
CALLBACK = '''
import json, os, resource, time
from ansible.plugins.callback import CallbackBase


def cpu_now():
    """CPU so far of this process and of the workers it reaped."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_counts"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.roles = {}
        self.tasks = []

    def _mark(self, name):
        # Wall and CPU from this task's start to the next one's (a worker's
        # CPU counts once it is reaped, so some of it falls to the next task).
        now, cpu = time.monotonic(), cpu_now()
        if self.tasks:
            self.tasks[-1][1] = now - self.tasks[-1][1]
            self.tasks[-1][2] = cpu - self.tasks[-1][2]
        self.tasks.append([name, now, cpu])

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._mark(task.get_name())

    def v2_playbook_on_handler_task_start(self, task):
        self._mark(task.get_name())

    def _count(self, result, status):
        role = result._task._role.get_name() if result._task._role else ""
        entry = self.roles.setdefault(result._host.get_name(), {})
        key = "%s/%s" % (role.split(".")[-1], status)
        entry[key] = entry.get(key, 0) + 1

    def v2_runner_on_ok(self, result):
        self._count(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._count(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._count(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        self._mark("end")
        recap = {host: stats.summarize(host) for host in sorted(stats.processed)}
        with open(os.environ["BENCH_COUNTS"], "w") as out:
            json.dump({"recap": recap, "roles": self.roles, "tasks": self.tasks[:-1]}, out)
'''

FLOOR = """\
- name: Floor, one module call per GPU host
  hosts: gpu_servers
  gather_facts: false
  tasks:
    - name: Look up the repository
      ansible.builtin.stat:
        path: "{{ gpufleet_repo }}"
"""


def loopback(index):
    """The address of GPU host INDEX (0-based): 127.1.x.y, never the gateway's 127.0.0.1."""
    return "127.1.%d.%d" % (index // 250, index % 250 + 1)


def inventory(count):
    """The demo's inventory with COUNT GPU hosts (its recorded captures in turn) and one gateway."""
    with open(os.path.join(DEMO, "hosts.yml")) as source:
        demo = yaml.safe_load(source)
    captures = [host["numa_capture"] for host in demo["all"]["children"]["gpu_servers"]["hosts"].values()]
    hosts = {}
    for index in range(count):
        hosts["gpu-%04d" % (index + 1)] = {"ansible_host": loopback(index),
                                           "numa_capture": captures[index % len(captures)]}
    return {"all": {"vars": demo["all"]["vars"],
                    "children": {"gpu_servers": {"hosts": hosts},
                                 "gateways": {"hosts": {"bench-gateway": {"ansible_host": "127.0.0.1"}}}}}}


def results_per_host(recap, hosts):
    """Task results of each of HOSTS in the recap (ok includes changed)."""
    return {host: sum(recap.get(host, {}).get(key, 0)
                      for key in ("ok", "skipped", "failures", "unreachable", "rescued"))
            for host in hosts}


def role_results(roles, hosts, role):
    return {host: sum(n for key, n in roles.get(host, {}).items() if key.split("/")[0] == role) for host in hosts}


def typical(values):
    """The most common of VALUES (the smallest of those tied): a GPU host's, without the run_once results."""
    return max(set(values), key=lambda value: (values.count(value), -value))


def results_cell(values):
    """'15' or '15+26': the usual count per host, and what the host with the most has beyond it."""
    usual = typical(values)
    extra = max(values) - usual
    return "%g" % usual + ("+%g" % extra if extra else "")


def fit(points):
    """Least-squares total(N) = a + b*N + c*N^2 over POINTS [(N, total)]: (a, b, c); c None under 3 N."""
    if len({n for n, dummy in points}) < 3:
        return None
    # Normal equations of the three unknowns, solved by Gaussian elimination.
    rows = [[sum(n ** (i + j) for n, dummy in points) for j in range(3)] + [sum(n ** i * t for n, t in points)]
            for i in range(3)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for row in range(3):
            if row != col:
                factor = rows[row][col] / rows[col][col]
                rows[row] = [x - factor * y for x, y in zip(rows[row], rows[col])]
    return tuple(rows[i][3] / rows[i][i] for i in range(3))


def marginals(points):
    """CPU per extra host between consecutive N: [(N1, N2, seconds per host)]."""
    points = sorted(points)
    return [(n1, n2, (t2 - t1) / (n2 - n1)) for (n1, t1), (n2, t2) in zip(points, points[1:])]


def become_subreaper():
    """Processes that ansible-playbook's children leave behind (a connection
    multiplexer) become this process's children, so their CPU is counted."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(grace=10.0):
    """Wait for the orphans reparented here (GRACE seconds at most): how many are still running."""
    deadline = time.monotonic() + grace
    while True:
        try:
            pid, dummy = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 0
        if pid == 0:
            if time.monotonic() > deadline:
                return sum(1 for entry in os.listdir("/proc") if entry.isdigit() and parent_of(entry) == os.getpid())
            time.sleep(0.1)


def parent_of(pid):
    try:
        with open("/proc/%s/stat" % pid) as source:
            return int(source.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def run(work, playbook, args, name):
    """One ansible-playbook: (CPU seconds of it and its children, wall seconds, counts, output)."""
    counts = os.path.join(work, name + ".json")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               GPUFLEET_REPO=REPO, GPUFLEET_STAGING=os.path.join(work, "staging"),
               # The variable replaces ansible.cfg's list: the preload it names, and the counter.
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(work, "callbacks"),
               ANSIBLE_CALLBACKS_ENABLED="gpufleet.numa.preload,bench_counts",
               ANSIBLE_LOCAL_TEMP=os.path.join(work, "tmp"), BENCH_COUNTS=counts)
    if args.strategy:
        env["ANSIBLE_STRATEGY"] = args.strategy
    env.update(args.env)
    command = [PLAYBOOK, "-i", os.path.join(work, "hosts.yml"), "-f", str(args.forks), playbook]
    if args.serial:
        command += ["-e", "gpufleet_rollout_hosts_at_once=%s" % args.serial]
    log = os.path.join(work, name + ".log")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        # The CPU of this child and of every process it waited for, then of
        # those it left behind (reparented here: reap_orphans).
        dummy, status, dummy = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    left = reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if left:
        print("note: %s left %d processes running; their CPU is not counted" % (name, left), file=sys.stderr)
    with open(log) as source:
        output = source.read()
    if proc.returncode != 0:
        sys.exit("%s (%s) failed, rc %d:\n%s" % (playbook, name, proc.returncode, output[-6000:]))
    with open(counts) as source:
        data = json.load(source)
    return cpu, wall, data, output


def measure(count, args):
    """The three runs on COUNT GPU hosts: a row of figures."""
    with tempfile.TemporaryDirectory(prefix="bench-fleet-scale-") as work:
        os.mkdir(os.path.join(work, "callbacks"))
        with open(os.path.join(work, "callbacks", "bench_counts.py"), "w") as out:
            out.write(CALLBACK)
        with open(os.path.join(work, "floor.yml"), "w") as out:
            out.write(FLOOR)
        os.symlink(os.path.join(DEMO, "group_vars"), os.path.join(work, "group_vars"))
        text = inventory(count)
        with open(os.path.join(work, "hosts.yml"), "w") as out:
            yaml.safe_dump(text, out)
        hosts = sorted(text["all"]["children"]["gpu_servers"]["hosts"])
        row = {"hosts": count}
        for name, playbook in (("first", DEPLOY), ("rerun", DEPLOY), ("floor", os.path.join(work, "floor.yml"))):
            cpu, wall, data, output = run(work, playbook, args, name)
            changed = sum(data["recap"].get(host, {}).get("changed", 0) for host in hosts)
            if name == "first" and not changed:
                sys.exit("the first deploy changed nothing:\n%s" % output[-6000:])
            if name == "rerun" and changed:
                sys.exit("the rerun changed %d results:\n%s" % (changed, output[-6000:]))
            row[name] = {"cpu": cpu, "wall": wall,
                         "results": list(results_per_host(data["recap"], hosts).values()),
                         "vllm": list(role_results(data["roles"], hosts, "vllm").values()),
                         "tasks": data["tasks"]}
        return row


def report_row(row):
    n = row["hosts"]
    floor = row["floor"]["cpu"] / n
    cells = ["%5d" % n]
    for name in ("first", "rerun"):
        per = row[name]["cpu"] / n
        cells.append("%7.2f %5.1fx %9s %4s" % (per, per / floor, results_cell(row[name]["results"]),
                                               results_cell(row[name]["vllm"])))
    cells.append("%7.3f" % floor)
    cells.append("%6.0f %6.0f %5.0f" % (row["first"]["wall"], row["rerun"]["wall"], row["floor"]["wall"]))
    return "  ".join(cells)


def report_growth(rows):
    """Lines on the growth over the N measured."""
    lines = []
    for name in ("first", "rerun", "floor"):
        points = [(row["hosts"], row[name]["cpu"]) for row in rows]
        steps = ", ".join("%d->%d %.3f s" % step for step in marginals(points))
        model = fit(points)
        if model is None:
            growth = "growth n/a (needs 3 N or more)"
        else:
            a, b, c = model
            growth = "fit a %.1f s + b %.3f s/host, growth c %+.2f ms per host per extra host" % (a, b, c * 1000)
        lines.append("%-6s CPU per extra host: %s; %s" % (name, steps or "n/a", growth))
    return lines


def report_goals(rows):
    lines = []
    worst_ratio = max(row["rerun"]["cpu"] / row["floor"]["cpu"] for row in rows)
    lines.append("rerun over floor: at most %.1fx (goal at most %.0fx: %s)" % (
        worst_ratio, GOAL_RERUN_OVER_FLOOR, "met" if worst_ratio <= GOAL_RERUN_OVER_FLOOR else "NOT met"))
    for name in ("first", "rerun"):
        most = max(typical(row[name]["results"]) for row in rows)
        lines.append("%s: task results per GPU host (usual) %g (goal at most %d: %s)" % (
            name, most, GOAL_RESULTS, "met" if most <= GOAL_RESULTS else "NOT met"))
    models = {name: fit([(row["hosts"], row[name]["cpu"]) for row in rows]) for name in ("first", "rerun", "floor")}
    if None not in models.values():
        lines.append("rerun over floor per extra host (fit's b): %.1fx; fit extrapolated to %d hosts, CPU per host: "
                     "first %.2f s, rerun %.2f s, floor %.3f s" % (
                         models["rerun"][1] / models["floor"][1], EXTRAPOLATE,
                         *(sum(k * EXTRAPOLATE ** (i - 1) for i, k in enumerate(models[name]))
                           for name in ("first", "rerun", "floor"))))
    for name in ("first", "rerun"):
        model = fit([(row["hosts"], row[name]["cpu"]) for row in rows])
        if model is None:
            lines.append("%s: growth per extra host not measured (needs 3 N or more)" % name)
        else:
            c_ms = model[2] * 1000
            lines.append("%s: growth %+.2f ms per host per extra host (goal under %.0f ms: %s)" % (
                name, c_ms, GOAL_GROWTH_MS, "met" if c_ms < GOAL_GROWTH_MS else "NOT met"))
    return lines


def parse_hosts(text):
    values = sorted({int(part) for part in text.split(",") if part.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of host counts, each at least 1")
    return values


def parse_env(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("KEY=VALUE")
    return key, value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--hosts", type=parse_hosts, default=[10, 30, 100], help="host counts (default 10,30,100)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: --hosts 2,4")
    parser.add_argument("--forks", type=int, default=5)
    parser.add_argument("--strategy", help="ANSIBLE_STRATEGY for every play (default: the playbook's, linear)")
    parser.add_argument("--env", type=parse_env, action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for ansible-playbook (e.g. ANSIBLE_DISPLAY_OK_HOSTS=false)")
    parser.add_argument("--serial", help="gpufleet_rollout_hosts_at_once (default 100%%)")
    parser.add_argument("--tasks", type=int, default=0, metavar="N",
                        help="also print the N costliest tasks of each rerun (CPU and wall time over all hosts)")
    args = parser.parse_args(argv)
    subreaper = become_subreaper()
    counts = [2, 4] if args.quick else args.hosts
    print("deploy_inference.yml on N recorded GPU hosts + 1 gateway: CPU (user+sys of ansible-playbook and "
          "its children) per GPU host")
    print("%d forks, strategy %s, serial %s, %s; %d CPUs here%s" % (
        args.forks, args.strategy or "as played", args.serial or "100%",
        " ".join("%s=%s" % pair for pair in args.env) or "no extra environment", os.cpu_count(),
        "" if subreaper else " (not a subreaper: the CPU of processes a run leaves behind is not counted)"))
    print("%5s  %-32s  %-32s  %7s  %-19s" % ("", "first deploy", "no-change rerun", "floor", "wall s"))
    print("%5s  %7s %6s %9s %4s  %7s %6s %9s %4s  %7s  %6s %6s %5s" % (
        "N", "cpu s/h", "xfloor", "results/h", "vllm", "cpu s/h", "xfloor", "results/h", "vllm", "cpu s/h",
        "first", "rerun", "floor"))
    print("       (results/h, vllm: task results of most GPU hosts, + what the first GPU host has more: run_once)")
    rows = []
    for count in counts:
        row = measure(count, args)
        rows.append(row)
        print(report_row(row))
        if args.tasks:
            print("       the rerun's slowest tasks: wall s, CPU s (all hosts)")
            for name, seconds, cpu in sorted(row["rerun"]["tasks"], key=lambda t: -t[2])[:args.tasks]:
                print("       %6.1f s %6.1f s  %s" % (seconds, cpu, name))
        sys.stdout.flush()
    for line in report_growth(rows) + report_goals(rows):
        print(line)


if __name__ == "__main__":
    main()
