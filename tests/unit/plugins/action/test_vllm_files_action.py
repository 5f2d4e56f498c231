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

from ansible_collections.gpufleet.numa.plugins.action.vllm_files import TEMPLATE_VARIABLES

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
