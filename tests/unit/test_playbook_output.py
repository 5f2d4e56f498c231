# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The system tests' failure message of a playbook run
(tests/fixtures/playbook_output.py): a real run where one host fails its
first task and the other goes on for long after, so that the run's tail
alone does not hold the failure."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.tests.fixtures import local_playbook, playbook_output

PLAYBOOK = """
- name: One host fails early, the other goes on
  hosts: all
  gather_facts: false
  tasks:
    - name: Fail on the first host
      ansible.builtin.fail:
        msg: the first host's own error
      when: inventory_hostname == 'first'
    - name: Say a long line
      ansible.builtin.debug:
        msg: "{{ 'x' * 200 }}"
      loop: "{{ range(20) | list }}"
"""


def test_a_failed_run_says_its_failed_task_however_early(tmp_path):
    proc = local_playbook.run(tmp_path, PLAYBOOK, hosts=("first", "second"))
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "the first host's own error" not in proc.stdout[-3000:]
    message = playbook_output.failures(proc.stdout)
    assert "--- failed tasks (1) ---\nTASK [Fail on the first host]" in message
    assert "fatal: [first]: FAILED!" in message and "the first host's own error" in message
    assert message.endswith(proc.stdout[-3000:])  # and the run's end, recap included
    assert "PLAY RECAP" in message
