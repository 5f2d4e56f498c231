# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""CPU of role vllm's rollout step (what each host of a batch rolls) as the batch grows.

    .venv/bin/python benchmarks/bench_batch_rollout.py [--hosts 10,30,100]

For each N, one ansible-playbook run on N inventory hosts (local
connection, 5 forks) whose variables hold what role vllm registers on a
GPU host before it rolls (__vllm, the vllm_units result for two instances,
and __vllm_written, its write task's results), then, each timed on its
own (the CPU of the playbook and its workers from the task's start to
the next one's, by bench_fleet_scale.py's callback):

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
import sys
import tempfile

import bench_fleet_scale as fleet_scale

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
        dest: "@OUT@/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
"""


def registered():
    """What role vllm registered on a host with two instances, one unit changed."""
    units = host_state.host_units([INSTANCE, dict(INSTANCE, name="vllm-1", port=8001, dist_port=29100)],
                                  dict(VARIABLES, host="gpu", service_mgr="systemd"))
    unit = next(f for f in units["files"] if f["path"].endswith("/gpufleet-vllm-0.service"))
    return {"__vllm": units, "__vllm_written": {"results": [{"__vllm_file": unit, "changed": True}]}}


def run(hosts, work):
    """(CPU of the batch task, CPU of the per-host task), each over all hosts."""
    host = dict(registered(), ansible_connection="local", ansible_python_interpreter=sys.executable)
    with open(os.path.join(work, "hosts.yml"), "w") as out:
        json.dump({"all": {"hosts": dict(("gpu-%04d" % i, host) for i in range(hosts))}}, out)
    # bench_fleet_scale's counting callback: each task's CPU, from its start to the next one's.
    os.makedirs(os.path.join(work, "callbacks"))
    with open(os.path.join(work, "callbacks", "bench_counts.py"), "w") as out:
        out.write(fleet_scale.CALLBACK)
    with open(os.path.join(work, "play.yml"), "w") as out:
        out.write(PLAYBOOK.replace("@OUT@", os.path.join(work, "out")))
    os.makedirs(os.path.join(work, "out"))
    args = argparse.Namespace(strategy=None, env={}, forks=5, serial=None)
    dummy, dummy, data, dummy = fleet_scale.run(work, os.path.join(work, "play.yml"), args, "rollout")
    results = os.path.join(work, "out")
    same = [json.load(open(os.path.join(results, name)))["same"] for name in os.listdir(results)]
    assert len(same) == hosts and all(same), "the two tasks gave different rollouts"
    cpu = dict((name, task_cpu) for name, dummy, task_cpu in data["tasks"])
    return cpu["batch"], cpu["per host"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--hosts", default="10,30,100")
    args = parser.parse_args()
    fleet_scale.become_subreaper()
    print("role vllm's rollout step, CPU per host (ansible-playbook and its workers, 5 forks); %d CPUs here"
          % os.cpu_count())
    print("%6s %14s %14s %7s" % ("hosts", "batch (now)", "per host", "ratio"))
    for hosts in [int(n) for n in args.hosts.split(",")]:
        with tempfile.TemporaryDirectory() as work:
            batch, per_host = run(hosts, work)
        print("%6d %12.4f s %12.4f s %6.1fx" % (hosts, batch / hosts, per_host / hosts, per_host / batch))


if __name__ == "__main__":
    main()
