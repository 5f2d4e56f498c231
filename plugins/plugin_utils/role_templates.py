# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Role vllm's templates as the vllm_files action renders them on the
controller: each template compiled once per process, where Ansible's
template lookup compiled it again for every file of every host (in a
no-change rerun, most of that task's CPU). The preload callback compiles
them in the controller's main process, so each worker Ansible forks
inherits them compiled.

The templates place what module_utils worked out and decide nothing: they
need Jinja's own filters and tests and two of Ansible's (to_nice_yaml,
match), rendered as the template lookup renders (blocks trimmed, as many
newlines at the end as the template has, None as nothing, an undefined
name an error, in Jinja's sandbox). tests/unit/plugins/plugin_utils/test_role_templates.py
renders every template both ways and compares."""

from __future__ import annotations

import functools
import glob
import os

from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from ansible.plugins.filter.core import to_nice_yaml
from ansible.plugins.test.core import match

from ansible_collections.gpufleet.numa.plugins.plugin_utils.role_files import ROLES_DIR

# The only role whose templates this renders (role gateway's render once
# per gateway, through the template action).
TEMPLATES_DIR = os.path.join(ROLES_DIR, "vllm", "templates")


def _finalize(value):
    # As Ansible's templating: None renders as nothing, not "None".
    return "" if value is None else value


@functools.lru_cache(maxsize=1)
def _environment():
    environment = SandboxedEnvironment(trim_blocks=True, autoescape=False,
                                       undefined=StrictUndefined, finalize=_finalize)
    environment.filters["to_nice_yaml"] = to_nice_yaml
    environment.tests["match"] = match
    return environment


@functools.lru_cache(maxsize=None)
def compiled(source):
    """SOURCE, a template's text, compiled (once per process and text)."""
    return _environment().from_string(source)


def _newlines_at_end(text):
    return len(text) - len(text.rstrip("\n"))


def render(path, variables):
    """The template at PATH rendered with VARIABLES (plain values)."""
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    text = compiled(source).render(variables)
    # Jinja drops the template's last newline; Ansible then adds back as
    # many as the result lacks against the template (a result that ends in
    # its own newline, as to_nice_yaml's does, gets none).
    return text + "\n" * max(0, _newlines_at_end(source) - _newlines_at_end(text))


def preload():
    """Compile every template of role vllm (the preload callback calls this
    in the controller's main process)."""
    for path in sorted(glob.glob(os.path.join(TEMPLATES_DIR, "*.j2"))):
        with open(path, encoding="utf-8") as handle:
            compiled(handle.read())
