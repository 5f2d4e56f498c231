# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plugin_utils/role_files.py: the roles' option names and defaults, read from the files themselves."""

from __future__ import annotations

import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
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


class HostVariables(dict):
    """A host's variables as hostvars gives them: each read templates the
    value, and one whose template fails raises."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = []

    def __getitem__(self, name):
        self.read.append(name)
        value = super().__getitem__(name)
        if isinstance(value, Exception):
            raise value
        return value


def test_a_per_host_filter_reads_only_the_variables_of_its_prefixes():
    host = HostVariables(vllm_listen_host="0.0.0.0", vllm_unit_dir="/etc/systemd/system",
                         gpufleet_metrics_dir=ValueError("lookup('env', 'X') failed"), audit_report="/tmp/r.html",
                         gateway_listen_port=8080, numa_capture="/c.yml", ansible_host="10.0.0.1")
    errors = []
    listen, reach = role_files.listen_and_reach({"a": host}, ["a"])
    assert (listen, reach) == ({"a": "0.0.0.0"}, {"a": "10.0.0.1"})
    # Only vllm_listen_host: its default derives from no other variable.
    assert sorted(set(host.read)) == ["vllm_listen_host"]
    assert "{{" not in str(role_files.defaults("vllm")["vllm_listen_host"])
    host.read.clear()
    merged = role_files.host_role_variables({"a": host}, "a", "gateway", errors, prefixes=("gateway_",))
    assert merged["gateway_listen_port"] == 8080 and errors == [] and set(host.read) == {"gateway_listen_port"}
    # Without prefixes, every variable of the collection's prefixes is read:
    # one that cannot be evaluated is an error naming it.
    assert sorted(role_files.inventory_variables({"a": host}, "a", errors)) == [
        "audit_report", "gateway_listen_port", "numa_capture", "vllm_listen_host", "vllm_unit_dir"]
    assert errors == ["a: gpufleet_metrics_dir: cannot be evaluated (%s)" % checks.show("lookup('env', 'X') failed", 200)]
