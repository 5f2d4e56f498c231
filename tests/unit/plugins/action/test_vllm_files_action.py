# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The vllm_files action renders role vllm's templates with only the
variables they read (TEMPLATE_VARIABLES and the entry, __vllm_file): every
name a template reads without defining it is one of those (the roles'
playbook runs render every template for real; this says which names).
And a write the host refuses fails with its path and reason."""

from __future__ import annotations

import pathlib

from jinja2 import Environment, meta, nodes

from ansible_collections.gpufleet.numa.plugins.action.vllm_files import TEMPLATE_UNITS_KEYS, TEMPLATE_VARIABLES
from ansible_collections.gpufleet.numa.tests.fixtures import local_playbook

TEMPLATES = pathlib.Path(__file__).resolve().parents[4] / "roles" / "vllm" / "templates"
# What Jinja itself gives every template.
JINJA_GLOBALS = {"range", "dict", "lipsum", "cycler", "joiner", "namespace", "loop"}


def test_the_roles_templates_read_only_what_the_action_gives_them():
    environment = Environment()
    read = {}
    for path in sorted(TEMPLATES.glob("*.j2")):
        tree = environment.parse(path.read_text())
        # Ansible's filters (to_nice_yaml ...) are not Jinja's: any will do to find the names read.
        for used in tree.find_all(nodes.Filter):
            environment.filters.setdefault(used.name, lambda value, *args, **kwargs: value)
        names = meta.find_undeclared_variables(tree)
        read[path.name] = sorted(names - JINJA_GLOBALS)
        assert set(read[path.name]) <= set(TEMPLATE_VARIABLES) | {"__vllm_file"}, (path.name, read[path.name])
    # Each name given is read by some template (none given in vain).
    assert set(TEMPLATE_VARIABLES) | {"__vllm_file"} == set().union(*map(set, read.values())), read
    assert read["secrets.env.j2"] == ["__vllm", "vllm_api_key", "vllm_hf_token"]


def test_the_roles_templates_read_only_the_keys_of_vllm_the_action_gives_them():
    """Of __vllm, the action gives the templates TEMPLATE_UNITS_KEYS only:
    each template reads __vllm only by one of those keys (never whole), and
    each key is read by some template."""
    environment = Environment()
    keys = set()
    for path in sorted(TEMPLATES.glob("*.j2")):
        tree = environment.parse(path.read_text())
        lookups = [node for node in tree.find_all((nodes.Getattr, nodes.Getitem))
                   if isinstance(node.node, nodes.Name) and node.node.name == "__vllm"]
        for node in lookups:
            key = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
            assert key in TEMPLATE_UNITS_KEYS, (path.name, key)
            keys.add(key)
        whole = [node for node in tree.find_all(nodes.Name) if node.name == "__vllm"]
        assert len(whole) == len(lookups), (path.name, "reads __vllm whole")
    assert keys == set(TEMPLATE_UNITS_KEYS)


def test_a_write_the_host_cannot_make_says_where_and_why(tmp_path):
    """A path the host refuses (here with a NUL byte: os.mkdir raises a
    ValueError, not an OSError) fails the task with the path and the
    reason, not a traceback, nor a bare "failed" (ansible-core 2.19 reports
    an uncaught exception with no msg; plugin_utils/module_failure.py reads it)."""
    proc = local_playbook.run(tmp_path, """
- hosts: all
  gather_facts: false
  tasks:
    - name: Write one directory the host cannot make
      gpufleet.numa.vllm_files:
        entries:
          - {kind: directory, path: "%s/a\\0b", label: a, secret: false, as_planned: false, mode: "0755"}
        secrets: {vllm_api_key: "", vllm_hf_token: ""}
""" % tmp_path)
    assert proc.returncode == 2 and "fatal: [host]: FAILED!" in proc.stdout, proc.stdout[-3000:]
    # The YAML callback writes the NUL as \0 and folds the line after the path.
    assert 'msg: "gpufleet.numa.vllm_files: writing %s/a\\0b' % tmp_path in proc.stdout, proc.stdout[-3000:]
    assert "failed: embedded null byte" in proc.stdout, proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout
