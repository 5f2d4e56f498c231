# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""How long a fleet roll takes: N hosts x 2 instances, each T s to get healthy.

    .venv/bin/python benchmarks/bench_parallel_rollout.py [--hosts 1 2 4 8] [--startup 4]

Each host is an inventory host on the local connection with its own
loopback address (127.0.80.x), directories and unit prefix; its units are
started by a stand-in service manager (benchmarks/systemctl_standin.py, put
first on PATH as `systemctl`) that runs each unit's ExecStart= (the
stand-in vLLM, tests/stub/vllm-stub, which opens its port only after
--stub-startup-delay T) and, like systemd's start job, returns when the
unit's ExecStartPost= (gpufleet-wait-ready) has seen /health. No gateway.

For each N: the role deploys the fleet (every unit started), then a changed
variable (vllm_environment) rewrites every unit and the role rolls them;
that run's wall time is the roll. A third run changes nothing: its wall time
is the playbook's own cost (tasks, module calls) without restarts. Columns:
roll, no-op, their difference (which also holds rendering and verifying
the changed units), steps (from the first per-instance step, the drain, to
the end of the run: the restarts themselves), next to what the restarts
would take one instance at a time across the fleet (serial, N x 2 x T) and
with every host rolling at once and no overhead (ideal, 2 x T); ratio =
steps / ideal. Forks are set to N. Prints figures, asserts nothing.

Figures (this machine: 2 cores shared with other work, load average 7-11;
all N hosts, their stand-ins and Ansible's forks run on those 2 cores):

    T = 4 s   hosts  steps s  serial s  ideal s  ratio
                  1     11.8       8.0      8.0  1.48x
                  2     11.2      16.0      8.0  1.40x
                  4     13.1      32.0      8.0  1.64x
                  8     22.6      64.0      8.0  2.82x
    T = 10 s      8     29.4     160.0     20.0  1.47x

The per-instance overhead (a module call to restart, one to check /health,
the include) is a few seconds per step here and grows with N only because
every "host" shares the controller's 2 cores; on a fleet it runs on each
host. Before the change the same roll took about N x one host's time.
"""

from __future__ import annotations

import argparse
import getpass
import grp
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PLAYBOOK = os.path.join(REPO, ".venv", "bin", "ansible-playbook")
STUB = os.path.join(REPO, "tests", "stub", "vllm-stub")
STANDIN = os.path.join(REPO, "benchmarks", "systemctl_standin.py")

# Records when each task starts and when the run ends (BENCH_TIMES).
CALLBACK = '''
import json, os, time
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.tasks = []

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.tasks.append([task.get_name(), time.monotonic()])

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["BENCH_TIMES"], "w") as out:
            json.dump({"tasks": self.tasks, "end": time.monotonic()}, out)
'''
# The first task of the per-instance steps (roles/vllm/tasks/instance.yml).
FIRST_STEP = "Drain the instance on the gateways before it restarts"

ROLL = """\
- name: Roll the fleet
  hosts: gpu_servers
  gather_facts: false
  serial: "{{ gpufleet_rollout_hosts_at_once | default('100%') }}"
  roles:
    - role: gpufleet.numa.vllm
      vars:
        vllm_environment:
          BENCH_ROLL: "{{ bench_roll }}"
"""


def instances(per_host):
    return [{"name": "vllm-%d" % i, "tp_size": 1, "pp_size": 1, "gpu_indices": [i], "port": 8000 + i,
             "dist_port": 29000 + 100 * i, "reason": "bench",
             "binding": {"cpus": "0", "mems": [0], "policy": "bind", "by_node": False}}
            for i in range(per_host)]


def setup(work, hosts, per_host, startup):
    units = os.path.join(work, "units")
    state = os.path.join(work, "standin")
    bin_dir = os.path.join(work, "bin")
    for path in (units, state, bin_dir):
        os.makedirs(path)
    with open(os.path.join(bin_dir, "systemctl"), "w") as out:
        out.write("#!/bin/sh\nexec %s %s %s %s \"$@\"\n" % (sys.executable, STANDIN, units, state))
    os.chmod(os.path.join(bin_dir, "systemctl"), 0o755)
    inventory = {}
    for index in range(hosts):
        name = "h%02d" % index
        root = os.path.join(work, name)
        inventory[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "vllm_instances": instances(per_host),
            "vllm_model": "bench/model",
            "vllm_listen_host": "127.0.80.%d" % (index + 1),
            "vllm_install": False,
            "vllm_manage_user": False,
            "vllm_manage_service": True,
            "vllm_user": getpass.getuser(),
            "vllm_group": grp.getgrgid(os.getgid()).gr_name,
            "vllm_executable": STUB,
            # The stand-in, not vLLM: its own options (--stub-startup-delay)
            # are not vllm serve 0.33.0's, which vllm_extra_args is checked against.
            "vllm_version": "0.33.0+stand-in",
            "vllm_binding": "systemd",
            "vllm_nvidia_modprobe": "",
            "vllm_download_weights": False,
            "vllm_extra_args": {"stub-startup-delay": startup},
            "vllm_health_delay": 1,
            "vllm_unit_dir": units,
            "vllm_unit_prefix": "gpufleet-" + name + "-",
            "vllm_state_dir": os.path.join(root, "var/lib/vllm"),
            "vllm_config_dir": os.path.join(root, "etc/vllm"),
            "vllm_libexec_dir": os.path.join(root, "libexec"),
        }
    with open(os.path.join(work, "hosts.yml"), "w") as out:
        json.dump({"all": {"children": {"gpu_servers": {"hosts": inventory}}}}, out)
    with open(os.path.join(work, "roll.yml"), "w") as out:
        out.write(ROLL)
    os.makedirs(os.path.join(work, "callbacks"))
    with open(os.path.join(work, "callbacks", "task_times.py"), "w") as out:
        out.write(CALLBACK)
    return bin_dir, state


def run(work, bin_dir, forks, roll):
    """(wall time of the run, seconds from the first per-instance step to the end)."""
    times = os.path.join(work, "times.json")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=os.path.join(work, "tmp"), PATH=bin_dir + os.pathsep + os.environ["PATH"],
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(work, "callbacks"), ANSIBLE_CALLBACKS_ENABLED="task_times",
               BENCH_TIMES=times)
    start = time.monotonic()
    result = subprocess.run([PLAYBOOK, "-i", os.path.join(work, "hosts.yml"), "-f", str(forks),
                             "-e", "bench_roll=%s" % roll, os.path.join(work, "roll.yml")],
                            env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-2000:])
        raise SystemExit("ansible-playbook failed (%d)" % result.returncode)
    with open(times) as handle:
        recorded = json.load(handle)
    starts = [start for name, start in recorded["tasks"] if name.endswith(FIRST_STEP)]
    return seconds, (recorded["end"] - starts[0]) if starts else 0.0


def stop_all(state):
    for name in os.listdir(state):
        if name.endswith(".json"):
            with open(os.path.join(state, name)) as handle:
                pid = json.load(handle).get("pid", 0)
            if pid:
                try:
                    os.killpg(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--instances", type=int, default=2, help="instances per host")
    parser.add_argument("--startup", type=float, default=4.0, help="seconds each instance takes to get healthy")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    options = parser.parse_args(argv)
    t = options.startup
    titles = ("hosts", "roll s", "no-op s", "roll-noop", "steps s", "serial s", "ideal s", "ratio")
    print("%5s %8s %8s %10s %10s %9s %8s %7s" % titles)
    for hosts in options.hosts:
        work = tempfile.mkdtemp(prefix="bench-rollout-")
        bin_dir, state = setup(work, hosts, options.instances, t)
        try:
            run(work, bin_dir, hosts, "deploy")
            roll, steps = run(work, bin_dir, hosts, "roll")
            noop, dummy = run(work, bin_dir, hosts, "roll")
        finally:
            stop_all(state)
            if not options.keep:
                shutil.rmtree(work, ignore_errors=True)
        restart = roll - noop
        serial = hosts * options.instances * t
        ideal = options.instances * t
        row = (hosts, roll, noop, restart, steps, serial, ideal, steps / ideal)
        print("%5d %8.1f %8.1f %10.1f %10.1f %9.1f %8.1f %6.2fx" % row)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
