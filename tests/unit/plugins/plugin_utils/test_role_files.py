# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plugin_utils/role_files.py: the roles' option names and defaults, read from the files themselves."""

from __future__ import annotations

import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files


def test_spec_names_are_every_entry_points_options():
    names = role_files.spec_names()
    for role in role_files.ROLES:
        with open("%s/roles/%s/meta/argument_specs.yml" % (fixture_paths.REPO, role)) as handle:
            for entry in yaml.safe_load(handle)["argument_specs"].values():
                assert set(entry["options"]) <= names
    # the take-down entry point's own option, and both roles' main options
    assert {"vllm_remove_files", "vllm_model", "gateway_listen_port"} <= names


def test_defaults_are_the_files_as_written():
    with open("%s/roles/vllm/defaults/main.yml" % fixture_paths.REPO) as handle:
        assert role_files.defaults("vllm") == yaml.safe_load(handle)


def test_extra_var_names_without_a_command_line_are_none():
    assert role_files.extra_var_names() == set()


def test_listen_and_reach_take_the_roles_default_and_the_hosts_own_address():
    hostvars = {"a": {"ansible_host": "10.0.0.1"}, "b": {"vllm_listen_host": "0.0.0.0"}}
    assert role_files.listen_and_reach(hostvars, ["a", "b", "gone"]) == (
        {"a": "127.0.0.1", "b": "0.0.0.0"}, {"a": "10.0.0.1", "b": "b"})
