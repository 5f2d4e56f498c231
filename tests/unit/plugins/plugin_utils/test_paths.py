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


def test_default_artifacts_live_beside_the_inventory_directory(tmp_path):
    inventory = tmp_path / "inventories" / "hetzner"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all: {}\n")
    for sources in ([str(inventory)], [str(inventory / "hosts.yml")]):
        assert controller_paths.default_artifact(sources, "gpufleet-plan.json", "gpufleet_plan_file") == \
            str(tmp_path / "inventories" / "hetzner.gpufleet" / "gpufleet-plan.json")
        assert controller_paths.default_artifact(sources, "captures", "record_dir") == \
            str(tmp_path / "inventories" / "hetzner.gpufleet" / "captures")
        # The default itself is never refused.
        controller_paths.outside_inventories("gpufleet_plan_file", controller_paths.default_artifact(
            sources, "gpufleet-plan.json", "gpufleet_plan_file"), sources)


def test_a_path_inside_any_inventory_directory_is_refused_naming_the_variable(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (second / "hosts.ini").write_text("x\n")
    (tmp_path / "link").symlink_to(second)
    sources = [str(first), str(second / "hosts.ini"), "gpu-a,gpu-b,"]
    for path in (first / "gpufleet-plan.json", first, second / "group_vars" / "captures",
                 tmp_path / "link" / "host_vars" / "r.html", first / ".." / "b" / "group_vars" / "x.json"):
        with pytest.raises(ValueError, match=r"^record_dir: must not be inside the inventory directory .*\(got '"):
            controller_paths.outside_inventories("record_dir", str(path), sources)
    # Beside an inventory file, Ansible reads only its group_vars and host_vars.
    for path in (second / "captures", second / "reports" / "r.html", tmp_path / "link" / "x.json"):
        assert controller_paths.outside_inventories("record_dir", str(path), sources) == str(path)
    assert controller_paths.outside_inventories("record_dir", str(tmp_path / "a.gpufleet"), sources) == \
        str(tmp_path / "a.gpufleet")


def test_a_plan_at_the_old_default_place_is_never_silently_left_behind(tmp_path):
    inventory = tmp_path / "prod"
    inventory.mkdir()
    (inventory / "gpufleet-plan.json").write_text("{}")
    with pytest.raises(ValueError, match=r"^gpufleet_plan_file: is unset, and a file is kept at the old default place.*"
                                         r"mv .*/prod/gpufleet-plan.json .*/prod\.gpufleet/gpufleet-plan.json"):
        controller_paths.default_artifact([str(inventory)], "gpufleet-plan.json", "gpufleet_plan_file", guard_old=True)
    # Once moved (a plan at the new place), the new one is used.
    (tmp_path / "prod.gpufleet").mkdir()
    (tmp_path / "prod.gpufleet" / "gpufleet-plan.json").write_text("{}")
    assert controller_paths.default_artifact([str(inventory)], "gpufleet-plan.json", "gpufleet_plan_file",
                                             guard_old=True) == str(tmp_path / "prod.gpufleet" / "gpufleet-plan.json")


def test_the_filesystem_root_as_inventory_has_no_place_beside_it():
    with pytest.raises(ValueError, match=r"^ansible_inventory_sources: has no directory beside it"):
        controller_paths.artifact_directory(["/"])


def test_a_directory_the_controller_cannot_write_is_named(tmp_path):
    # Round 3: a read-only gpufleet_metrics_dir failed only after the gateway was rebuilt.
    missing = tmp_path / "state" / "prometheus"
    assert controller_paths.writable_directory("gpufleet_metrics_dir", str(missing)) == str(missing)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"^gpufleet_metrics_dir: cannot be created on the controller: %s is not a "
                                         r"directory" % (tmp_path / "file")):
        controller_paths.writable_directory("gpufleet_metrics_dir", str(tmp_path / "file" / "prometheus"))


def _check_as_nobody(directory, answer):
    """The check in a forked child that dropped root for nobody."""
    os.setgid(65534)
    os.setuid(65534)
    try:
        controller_paths.writable_directory("gpufleet_metrics_dir", directory)
        answer.put("ok")
    except ValueError as exc:
        answer.put(str(exc))


def test_a_read_only_directory_is_refused_for_the_user_who_cannot_write_it(tmp_path):
    import multiprocessing
    if os.geteuid() != 0:
        pytest.skip("needs root to run the check as another user")
    os.chmod(str(tmp_path), 0o755)
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_check_as_nobody, args=(str(tmp_path / "prometheus"), answer))
    child.start()
    child.join(30)
    message = answer.get(timeout=5)
    # (nobody may not see as far down as tmp_path: the nearest directory it sees is named)
    assert message.startswith("gpufleet_metrics_dir: cannot be written on the controller: /tmp"), message
    assert "is read-only for this user (or its file system is) (got " in message, message
