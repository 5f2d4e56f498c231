# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What a no-change rerun of playbooks/deploy_inference.yml costs per host.

    .venv/bin/python benchmarks/bench_rerun.py [--hosts 3 6] [--tp 2] [--forks 5] [--tasks N]

For each N, builds an inventory in the demo's style (inventories/demo's
group_vars, local connection, one loopback address per host, everything
rendered under a temporary staging directory) with N GPU servers whose
topologies are recorded captures (tests/fixtures/machines/*, in turn),
converges it once, then times:

- the rerun: the same playbook again, which must change nothing;
- the floor: the same hosts running one `stat` task (what any play costs).

Prints the wall time of each, per host, and the task results per GPU host
(ok, changed, skipped, failed: every task a host ran, loops counted once,
includes counted), in all and for the vllm role alone, and both figures
against their targets (TARGET_ROLE_RESULTS vllm role results per GPU host,
a rerun within TARGET_RERUN_OVER_FLOOR times the floor). Asserts nothing but
that the rerun changed nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
FIXTURES = os.path.join(REPO, "tests", "fixtures", "machines")
# Recorded machines that fit tensor parallel 2 on one socket.
MACHINES = [
    "h100_sxm_8gpu_nvswitch", "rtx4090_8gpu_pcie_switch_quads", "rtxa6000_8gpu_nvlink_pairs",
    "azure_ndv4_like", "mi300x_8gpu_xgmi", "mi250_8gcd", "dgx2_v100_16gpu_nvswitch",
    "mi50_8gpu_nps4", "power8_minsky_p100",
]

# Targets of a no-change rerun: vllm role task results per GPU host, and
# the rerun's wall time over the floor's.
TARGET_ROLE_RESULTS = 10
TARGET_RERUN_OVER_FLOOR = 3.0

# Counts what each host ran: one result per task and host (a loop is one
# result, an include is one), by the role the task belongs to.
CALLBACK = '''
import json, os, time
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "count_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.counts = {}
        self.tasks = []

    def _mark(self, name):
        now = time.monotonic()
        if self.tasks:
            self.tasks[-1][1] = now - self.tasks[-1][1]
        self.tasks.append([name, now])

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._mark(task.get_name())

    def v2_playbook_on_handler_task_start(self, task):
        self._mark(task.get_name())

    def _count(self, result, status):
        host = result._host.get_name()
        role = result._task._role.get_name() if result._task._role else ""
        entry = self.counts.setdefault(host, {})
        key = "%s/%s" % (role, status)
        entry[key] = entry.get(key, 0) + 1

    def v2_runner_on_ok(self, result):
        self._count(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._count(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._count(result, "unreachable")

    def v2_playbook_on_include(self, included_file):
        for host in included_file._hosts:
            role = included_file._task._role.get_name() if included_file._task._role else ""
            entry = self.counts.setdefault(host.get_name(), {})
            key = "%s/included" % role
            entry[key] = entry.get(key, 0) + 1

    def v2_playbook_on_stats(self, stats):
        self._mark("end")
        with open(os.environ["BENCH_COUNTS"], "w") as out:
            json.dump({"hosts": self.counts, "tasks": self.tasks[:-1]}, out)
'''

FLOOR = """\
- name: Floor, one module call per host
  hosts: gpu_servers
  gather_facts: false
  tasks:
    - name: Look up the repository
      ansible.builtin.stat:
        path: "{{ gpufleet_repo }}"
"""


def inventory(work, count, tp_size):
    os.symlink(os.path.join(REPO, "inventories", "demo", "group_vars"), os.path.join(work, "group_vars"))
    hosts = {}
    for index in range(count):
        machine = MACHINES[index % len(MACHINES)]
        hosts["bench-%02d" % index] = {
            "ansible_host": "127.0.1.%d" % (index + 1),
            "numa_capture": os.path.join(FIXTURES, machine, "capture.yml"),
        }
    text = {"all": {"vars": {"gpufleet_tp_size": tp_size, "gpufleet_base_port": 8000},
                    "children": {"gpu_servers": {"hosts": hosts}, "gateways": {"hosts": {}}}}}
    with open(os.path.join(work, "hosts.yml"), "w") as out:
        json.dump(text, out)
    return sorted(hosts)


def run(work, playbook, forks, counts_name):
    counts = os.path.join(work, counts_name)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               GPUFLEET_REPO=REPO, GPUFLEET_STAGING=os.path.join(work, "staging"),
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(work, "callbacks"), ANSIBLE_CALLBACKS_ENABLED="count_results",
               ANSIBLE_LOCAL_TEMP=os.path.join(work, "tmp"), BENCH_COUNTS=counts)
    start = time.monotonic()
    result = subprocess.run([PLAYBOOK, "-i", os.path.join(work, "hosts.yml"), "-f", str(forks), playbook],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            check=False)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.exit("%s failed:\n%s" % (playbook, result.stdout[-6000:]))
    with open(counts) as source:
        data = json.load(source)
    return elapsed, data["hosts"], result.stdout, data["tasks"]


def per_host(counts, hosts, role=None):
    """Task results per host (the largest over the hosts), in all or of one role."""
    totals = []
    for host in hosts:
        entry = counts.get(host, {})
        totals.append(sum(n for key, n in entry.items()
                          if role is None or key.split("/")[0].split(".")[-1] == role))
    return max(totals), min(totals)


def changed(counts, hosts):
    return sum(n for host in hosts for key, n in counts.get(host, {}).items() if key.endswith("/changed"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[3, 6])
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--forks", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=0, metavar="N",
                        help="also print the N slowest tasks of the rerun (wall time over all hosts)")
    args = parser.parse_args()
    print("no-change rerun of playbooks/deploy_inference.yml (tp %d, %d forks, %d CPUs here)"
          % (args.tp, args.forks, os.cpu_count()))
    print("%5s  %10s %10s  %10s %10s  %18s  %18s" % (
        "hosts", "rerun s", "per host", "floor s", "per host", "results/host all", "results/host vllm"))
    for count in args.hosts:
        with tempfile.TemporaryDirectory(prefix="bench-rerun-") as work:
            os.mkdir(os.path.join(work, "callbacks"))
            with open(os.path.join(work, "callbacks", "count_results.py"), "w") as out:
                out.write(textwrap.dedent(CALLBACK))
            with open(os.path.join(work, "floor.yml"), "w") as out:
                out.write(FLOOR)
            hosts = inventory(work, count, args.tp)
            deploy = os.path.join(REPO, "playbooks", "deploy_inference.yml")
            run(work, deploy, args.forks, "converge.json")
            rerun, counts, output, tasks = run(work, deploy, args.forks, "rerun.json")
            if changed(counts, hosts):
                sys.exit("the rerun changed something:\n%s" % output[-6000:])
            floor, dummy, dummy, dummy = run(work, os.path.join(work, "floor.yml"), args.forks, "floor.json")
            most, least = per_host(counts, hosts)
            role_most, role_least = per_host(counts, hosts, "vllm")
            print("%5d  %10.1f %10.2f  %10.1f %10.2f  %18s  %18s" % (
                count, rerun, rerun / count, floor, floor / count,
                "%d-%d" % (least, most) if least != most else str(most),
                "%d-%d" % (role_least, role_most) if role_least != role_most else str(role_most)))
            print("       vllm results/host %d (target at most %d: %s), rerun %.1fx the floor (target at most %.0fx: %s)"
                  % (role_most, TARGET_ROLE_RESULTS, "met" if role_most <= TARGET_ROLE_RESULTS else "NOT met",
                     rerun / floor, TARGET_RERUN_OVER_FLOOR,
                     "met" if rerun <= TARGET_RERUN_OVER_FLOOR * floor else "NOT met"))
            if args.tasks:
                for name, seconds in sorted(tasks, key=lambda t: -t[1])[:args.tasks]:
                    print("       %6.1f s  %s" % (seconds, name))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
