# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The vllm_files action renders role vllm's templates with only the
variables they read (TEMPLATE_VARIABLES and the entry, __vllm_file): every
name a template reads without defining it is one of those (the roles'
playbook runs render every template for real; this says which names)."""

from __future__ import annotations

import pathlib

from jinja2 import Environment, meta, nodes

from ansible_collections.gpufleet.numa.plugins.action.vllm_files import TEMPLATE_UNITS_KEYS, TEMPLATE_VARIABLES

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
