# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Role gpufleet.numa.vllm: its defaults live in one place.

roles/vllm/defaults/main.yml gives every optional variable its value; the
`default:` of meta/argument_specs.yml only documents it and must say the
same; the Python of deploy/vllm makes up none (a missing variable is an
error naming it: deploy/vllm/test_variables.py).
"""

import os

import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

ROLE = os.path.join(fixture_paths.REPO, "roles", "vllm")


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as source:
        return yaml.safe_load(source)


DEFAULTS = load("defaults", "main.yml")
OPTIONS = load("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]


def test_every_option_is_required_or_has_the_default_of_defaults_main():
    for name, option in OPTIONS.items():
        if option.get("required"):
            assert name not in DEFAULTS, name
            assert "default" not in option, name
        else:
            assert name in DEFAULTS, "%s: documented, not in defaults/main.yml" % name
            assert "default" in option, "%s: argument_specs gives no default (defaults/main.yml: %r)" % (
                name, DEFAULTS[name])
            assert option["default"] == DEFAULTS[name], (name, option["default"], DEFAULTS[name])


def test_every_default_is_documented():
    assert sorted(set(DEFAULTS) - set(OPTIONS)) == []
