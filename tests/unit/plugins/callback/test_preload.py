# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The preload callback in real ansible-playbook runs: a task's worker
process finds every filter file and action plugin of the collection
already loaded and role vllm's templates compiled (inherited from the
main process), and none of them without the callback. A probe action beside the playbook reports what its worker
holds before anything in the task is templated."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)

PROBE = '''
import sys

from ansible.plugins.action import ActionBase
from ansible.plugins.loader import filter_loader


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        prefix = "ansible_collections.gpufleet.numa.plugins."
        result["filter_files"] = sorted(path for path in filter_loader._module_cache if "/gpufleet/numa/plugins/filter/" in path)
        result["actions"] = sorted(name for name in sys.modules if name.startswith(prefix + "action."))
        templates = sys.modules.get(prefix + "plugin_utils.role_templates")
        result["templates"] = templates.compiled.cache_info().currsize if templates else 0
        return result
'''

PLAY = '''
- hosts: localhost
  gather_facts: false
  tasks:
    - name: What this worker holds
      probe:
      register: held
    - name: Keep it
      ansible.builtin.copy:
        content: "{{ held | to_json }}"
        dest: "{{ playbook_dir }}/held.json"
        mode: "0644"
    - name: A filter of the collection still answers
      ansible.builtin.assert:
        that: "'/tmp' | gpufleet.numa.controller_path('a directory') == '/tmp'"
'''


def held(tmp_path, callbacks):
    (tmp_path / "action_plugins").mkdir()
    (tmp_path / "action_plugins" / "probe.py").write_text(PROBE)
    (tmp_path / "play.yml").write_text(PLAY)
    # The project's ansible.cfg, its relative paths made absolute, with the
    # callbacks given (none: the line left out).
    with open(os.path.join(REPO, "ansible.cfg")) as handle:
        config = handle.read().replace(" = ./", " = %s/" % REPO)
    assert "callbacks_enabled = gpufleet.numa.preload\n" in config
    config = config.replace("callbacks_enabled = gpufleet.numa.preload\n",
                            "callbacks_enabled = %s\n" % callbacks if callbacks else "")
    (tmp_path / "ansible.cfg").write_text(config)
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
        timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout
    assert "WARNING" not in proc.stdout, proc.stdout
    return json.loads((tmp_path / "held.json").read_text())


def test_each_worker_inherits_every_filter_file_and_action(tmp_path):
    found = held(tmp_path, "gpufleet.numa.preload")
    filters = sorted(name for name in os.listdir(os.path.join(REPO, "plugins", "filter")) if name.endswith(".py"))
    assert sorted(os.path.basename(path) for path in found["filter_files"]) == filters
    actions = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "plugins", "action")) if name.endswith(".py"))
    assert [name.rsplit(".", 1)[1] for name in found["actions"]] == actions
    templates = [name for name in os.listdir(os.path.join(REPO, "roles", "vllm", "templates")) if name.endswith(".j2")]
    assert found["templates"] == len(templates) > 0


def test_without_it_a_worker_starts_with_none(tmp_path):
    # What the test above sees comes from the callback, not from the probe.
    found = held(tmp_path, "")
    assert found["filter_files"] == [] and found["actions"] == [] and found["templates"] == 0
