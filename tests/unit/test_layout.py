# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The shape of the tree (DESIGN.md "Layout"), checked over the whole
repository: scripts/size_check.py passes silently, every package init under
plugins/ is empty, every module of plugins/module_utils/ and
plugins/plugin_utils/ has a test file under the mirrored
tests/unit/plugins/... folder whose name holds the module's name, and no two
test files under tests/ share a basename (pytest imports them by it).

Each check is a function of a tree's root; each is also run on a temporary
tree with the defect it looks for, and must report it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

LIMITED = (os.path.join("plugins", "module_utils"), os.path.join("plugins", "plugin_utils"))


def _python_files(root, top):
    for folder, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(folder, name), root)


def size_check(root):
    """(exit status, output) of `python scripts/size_check.py` in root."""
    done = subprocess.run([sys.executable, os.path.join(root, "scripts", "size_check.py")], cwd=root, check=False,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def nonempty_inits(root):
    return [path for path in _python_files(root, "plugins")
            if os.path.basename(path) == "__init__.py" and os.path.getsize(os.path.join(root, path)) != 0]


def untested_modules(root):
    """Modules of module_utils/ and plugin_utils/ with no test_*.py holding
    their name in tests/unit/<the module's folder>/."""
    missing = []
    for top in LIMITED:
        for path in _python_files(root, top):
            folder, name = os.path.split(path)
            module = name[:-3]
            if module == "__init__":
                continue
            tests = os.path.join(root, "tests", "unit", folder)
            names = os.listdir(tests) if os.path.isdir(tests) else []
            if not any(n.startswith("test_") and n.endswith(".py") and module in n[:-3] for n in names):
                missing.append(path)
    return missing


def shared_test_basenames(root):
    """basename -> paths, for test files under tests/ that share one."""
    seen = {}
    for path in _python_files(root, "tests"):
        name = os.path.basename(path)
        if name.startswith("test_"):
            seen.setdefault(name, []).append(path)
    return dict((name, paths) for name, paths in sorted(seen.items()) if len(paths) > 1)


# ---------------------------------------------------------------- the repository


def test_size_check_passes_silently():
    assert size_check(fixture_paths.REPO) == (0, "")


def test_every_package_init_under_plugins_is_empty():
    assert nonempty_inits(fixture_paths.REPO) == []


def test_every_module_has_a_test_file_named_after_it():
    assert untested_modules(fixture_paths.REPO) == []


def test_no_two_test_files_share_a_basename():
    assert shared_test_basenames(fixture_paths.REPO) == {}


def test_the_checks_see_the_whole_tree():
    """Guards against a check passing because it looked at nothing."""
    modules = [p for top in LIMITED for p in _python_files(fixture_paths.REPO, top)]
    assert len(modules) > 60
    assert len([p for p in _python_files(fixture_paths.REPO, "tests") if os.path.basename(p).startswith("test_")]) > 80


# ---------------------------------------------------------------- each check can fail


def _write(root, path, text=""):
    where = os.path.join(str(root), path)
    os.makedirs(os.path.dirname(where), exist_ok=True)
    with open(where, "w") as handle:
        handle.write(text)


@pytest.fixture
def copy_of_plugins(tmp_path):
    """A copy of plugins/ and scripts/size_check.py, which checks the tree it lies in."""
    root = tmp_path / "repo"
    shutil.copytree(os.path.join(fixture_paths.REPO, "plugins"), str(root / "plugins"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    _write(root, "scripts/size_check.py", open(os.path.join(fixture_paths.REPO, "scripts", "size_check.py")).read())
    return str(root)


def test_size_check_fails_on_a_long_file_and_a_long_function(copy_of_plugins):
    assert size_check(copy_of_plugins) == (0, "")
    path = os.path.join(copy_of_plugins, "plugins", "module_utils", "plan", "table.py")
    with open(path, "a") as handle:
        handle.write("\n\ndef too_long():\n" + "    x = 1\n" * 400)
    status, output = size_check(copy_of_plugins)
    assert status == 1
    assert "plugins/module_utils/plan/table.py" in output and "too_long" in output


def test_a_non_empty_init_is_reported(copy_of_plugins):
    assert nonempty_inits(copy_of_plugins) == []
    _write(copy_of_plugins, "plugins/module_utils/deploy/gateway/__init__.py", "# not empty\n")
    assert nonempty_inits(copy_of_plugins) == [os.path.join("plugins", "module_utils", "deploy", "gateway", "__init__.py")]


def test_an_untested_module_is_reported(tmp_path):
    root = str(tmp_path)
    _write(root, "plugins/module_utils/plan/__init__.py")
    _write(root, "plugins/module_utils/plan/table.py")
    _write(root, "plugins/module_utils/plan/check.py")
    _write(root, "plugins/plugin_utils/plain_values.py")
    _write(root, "tests/unit/plugins/module_utils/plan/test_plan_table.py")
    _write(root, "tests/unit/plugins/module_utils/test_check.py")  # not the mirrored folder
    _write(root, "tests/unit/plugins/plugin_utils/plain_values_test.py")  # not a test_ file
    assert untested_modules(root) == [os.path.join("plugins", "module_utils", "plan", "check.py"),
                                      os.path.join("plugins", "plugin_utils", "plain_values.py")]
    _write(root, "tests/unit/plugins/module_utils/plan/test_check_hostile.py")
    _write(root, "tests/unit/plugins/plugin_utils/test_plain_values.py")
    assert untested_modules(root) == []


def test_a_shared_test_basename_is_reported(tmp_path):
    root = str(tmp_path)
    _write(root, "tests/unit/plugins/module_utils/audit/test_gather.py")
    _write(root, "tests/unit/plugins/module_utils/topology/test_topology_gather.py")
    _write(root, "tests/fixtures/gather.py")
    assert shared_test_basenames(root) == {}
    _write(root, "tests/system/test_gather.py")
    assert shared_test_basenames(root) == {"test_gather.py": [
        os.path.join("tests", "system", "test_gather.py"),
        os.path.join("tests", "unit", "plugins", "module_utils", "audit", "test_gather.py")]}
