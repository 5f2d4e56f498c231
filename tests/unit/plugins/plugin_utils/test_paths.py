# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Paths the controller writes: host names that become file names are
plain file names, files stay inside their directory, controller-side
paths are absolute."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.plugins.plugin_utils import paths as controller_paths


@pytest.mark.parametrize("name", ["gpu-a", "gpu-a.example.com", "10.0.0.7", "fe80::1", "[::1]", "GPU_7", "a"])
def test_plain_file_name_accepts_host_names(name):
    assert controller_paths.plain_file_name("inventory_hostname", name) == name


@pytest.mark.parametrize("name", ["../group_vars/all", "..", ".", ".hidden", "-rf", "a/b", "/etc/passwd", "",
                                  "gpu\nall", "a\\b", "x" * 201, "a b"])
def test_plain_file_name_refuses_paths_and_odd_names(name):
    with pytest.raises(ValueError, match=r"^inventory_hostname: must "):
        controller_paths.plain_file_name("inventory_hostname", name)


def test_file_in_directory_refuses_a_host_named_after_group_vars(tmp_path):
    with pytest.raises(ValueError) as error:
        controller_paths.file_in_directory(str(tmp_path / "captures"), "../group_vars/all", suffix=".yml",
                                           directory_variable="record_dir", file_variable="inventory_hostname")
    assert str(error.value).startswith("inventory_hostname: must be a plain file name")
    assert "(got '../group_vars/all')" in str(error.value)


def test_file_in_directory_joins_a_plain_name(tmp_path):
    path = controller_paths.file_in_directory(str(tmp_path), "gpu-a", suffix=".yml")
    assert path == str(tmp_path / "gpu-a.yml")


def test_path_under_refuses_an_escape_through_a_symlinked_parent(tmp_path):
    (tmp_path / "records").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "records" / "link"))
    with pytest.raises(ValueError, match="must stay inside"):
        controller_paths.path_under("record", str(tmp_path / "records" / "link" / "x.yml"), str(tmp_path / "records"))
    with pytest.raises(ValueError, match="must stay inside"):
        controller_paths.path_under("record", str(tmp_path / "records" / ".." / "x.yml"), str(tmp_path / "records"))
    with pytest.raises(ValueError, match="must stay inside"):
        controller_paths.path_under("record", str(tmp_path / "records-2" / "x.yml"), str(tmp_path / "records"))


@pytest.mark.parametrize("value", ["plan.json", "state/plan.json", "./plan.json", "~/plan.json"])
def test_controller_path_refuses_a_relative_path_naming_the_variable(value):
    with pytest.raises(ValueError, match=r"^gpufleet_plan_file: must be an absolute path on the controller"):
        controller_paths.controller_path("gpufleet_plan_file", value)


@pytest.mark.parametrize("value, message", [("/srv/plans/", "must name a file"), ("/srv/\nplan", "control"),
                                            (7, "must be a string"), ("", "must not be empty"),
                                            ("/srv/{{ inventory_dir }}/plan.json", "unrendered template")])
def test_controller_path_refuses_odd_values(value, message):
    with pytest.raises(ValueError, match=message):
        controller_paths.controller_path("gpufleet_plan_file", value)


def test_controller_path_normalises():
    assert controller_paths.controller_path("gpufleet_plan_file", "/srv//a/../plan.json") == "/srv/plan.json"


def test_inventory_directory_from_a_directory_or_a_file_source(tmp_path):
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    assert controller_paths.inventory_directory([str(tmp_path)]) == str(tmp_path)
    assert controller_paths.inventory_directory([str(tmp_path / "hosts.yml"), "/other"]) == str(tmp_path)
    with pytest.raises(ValueError, match="ansible_inventory_sources"):
        controller_paths.inventory_directory([])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_file_in_directory_never_leaves_the_directory(name):
    directory = "/srv/captures"
    try:
        path = controller_paths.file_in_directory(directory, name, suffix=".yml")
    except ValueError as exc:
        assert str(exc).startswith("file name: must")
    else:
        assert os.path.dirname(path) == directory and os.path.basename(path) == name + ".yml"
