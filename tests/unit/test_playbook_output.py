# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The system tests' failure message of a playbook run
(tests/fixtures/playbook_output.py): a real run where one host fails its
first task and the other goes on for long after, so that the run's tail
alone does not hold the failure."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from ansible_collections.gpufleet.numa.tests.fixtures import playbook_output

REPO = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = pathlib.Path(sys.executable).parent / "ansible-playbook"

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
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.ini").write_text("first ansible_connection=local\nsecond ansible_connection=local\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "hosts.ini"), str(tmp_path / "play.yml"),
                           "-e", "ansible_python_interpreter=%s" % sys.executable],
                          env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "the first host's own error" not in proc.stdout[-3000:]
    message = playbook_output.failures(proc.stdout)
    assert "--- failed tasks (1) ---\nTASK [Fail on the first host]" in message
    assert "fatal: [first]: FAILED!" in message and "the first host's own error" in message
    assert message.endswith(proc.stdout[-3000:])  # and the run's end, recap included
    assert "PLAY RECAP" in message
