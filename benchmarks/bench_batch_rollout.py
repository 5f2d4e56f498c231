# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""CPU of role vllm's rollout step (what each host of a batch rolls) as the batch grows.

    .venv/bin/python benchmarks/bench_batch_rollout.py [--hosts 10,30,100,300]

For each N, one ansible-playbook run on N inventory hosts (local
connection, 5 forks) whose variables hold what role vllm registers on a
GPU host before it rolls (__vllm, the vllm_units result for two instances,
and __vllm_written, its write task's results), then, each timed on its
own (the CPU of the playbook and its workers between the two tasks'
starts, by a callback):

- batch: the role's task, one run_once task for the batch whose loop sets
  each host's share on it (delegate_facts), the vllm_rollout filter called
  once;
- per host: the task the role had before, a set_fact on every host that
  read every host of the batch (here the same filter, each host keeping
  its own share: the same reads the per-host filter made).

Prints CPU per host of each and their ratio. Asserts that both give each
host the same rollout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state  # noqa: E402
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import INSTANCE, VARIABLES  # noqa: E402

PLAYBOOK = """
- name: Rollout of a batch
  hosts: all
  gather_facts: false
  tasks:
    - name: batch
      ansible.builtin.set_fact:
        batch_rollout: "{{ share.rollout }}"
      delegate_to: "{{ share.host }}"
      delegate_facts: true
      run_once: true
      loop: "{{ hostvars | gpufleet.numa.vllm_rollout(ansible_play_batch, false) }}"
      loop_control:
        loop_var: share
        label: "{{ share.host }}"

    - name: per host
      ansible.builtin.set_fact:
        host_rollout: >-
          {{ (hostvars | gpufleet.numa.vllm_rollout(ansible_play_batch, false)
              | selectattr('host', 'equalto', inventory_hostname) | first).rollout }}

    - name: end
      ansible.builtin.copy:
        content: "{{ {'same': batch_rollout == host_rollout} | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
"""

CALLBACK = '''
import json, os, resource
from ansible.plugins.callback import CallbackBase


def cpu_now():
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "rollout_cpu"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.marks = []

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.marks.append((task.get_name(), cpu_now()))

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["ROLLOUT_CPU_OUT"], "w") as out:
            json.dump(self.marks, out)
'''


def registered():
    """What role vllm registered on a host with two instances, one unit changed."""
    units = host_state.host_units([INSTANCE, dict(INSTANCE, name="vllm-1", port=8001, dist_port=29100)],
                                  dict(VARIABLES, host="gpu", service_mgr="systemd"))
    unit = next(f for f in units["files"] if f["path"].endswith("/gpufleet-vllm-0.service"))
    return {"__vllm": units, "__vllm_written": {"results": [{"__vllm_file": unit, "changed": True}]}}


def run(hosts, work):
    state = registered()
    host = dict(state, ansible_connection="local", ansible_python_interpreter=sys.executable)
    inventory = {"all": {"hosts": dict(("gpu-%04d" % i, host) for i in range(hosts))}}
    with open(os.path.join(work, "hosts.json"), "w") as out:
        json.dump(inventory, out)
    os.makedirs(os.path.join(work, "callbacks"), exist_ok=True)
    with open(os.path.join(work, "callbacks", "rollout_cpu.py"), "w") as out:
        out.write(CALLBACK)
    with open(os.path.join(work, "play.yml"), "w") as out:
        out.write(PLAYBOOK)
    results = os.path.join(work, "out")
    os.makedirs(results, exist_ok=True)
    marks = os.path.join(work, "marks.json")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(work, "callbacks"),
               ANSIBLE_CALLBACKS_ENABLED="gpufleet.numa.preload,rollout_cpu", ROLLOUT_CPU_OUT=marks,
               ANSIBLE_NOCOLOR="1")
    subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-f", "5", "-i",
                    os.path.join(work, "hosts.json"), os.path.join(work, "play.yml"), "-e", "out_dir=" + results],
                   cwd=REPO, env=env, check=True, stdout=None if os.environ.get("BENCH_STDOUT") else subprocess.DEVNULL)
    same = [json.load(open(os.path.join(results, name)))["same"] for name in os.listdir(results)]
    assert len(same) == hosts and all(same), "the two tasks gave different rollouts"
    with open(marks) as source:
        cpu = dict(json.load(source))
    return cpu["per host"] - cpu["batch"], cpu["end"] - cpu["per host"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--hosts", default="10,30,100,300")
    args = parser.parse_args()
    print("role vllm's rollout step, CPU per host (ansible-playbook and its workers, 5 forks); %d CPUs here"
          % os.cpu_count())
    print("%6s %14s %14s %7s" % ("hosts", "batch (now)", "per host", "ratio"))
    for hosts in [int(n) for n in args.hosts.split(",")]:
        with tempfile.TemporaryDirectory() as work:
            batch, per_host = run(hosts, work)
        print("%6d %12.4f s %12.4f s %6.1fx" % (hosts, batch / hosts, per_host / hosts, per_host / batch))


if __name__ == "__main__":
    main()
