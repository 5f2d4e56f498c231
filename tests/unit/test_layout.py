# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The shape of the tree (DESIGN.md "Layout"), checked over the whole
repository: scripts/size_check.py passes silently, every package init under
plugins/ is empty, every module of plugins/module_utils/ and
plugins/plugin_utils/ has a test file under the mirrored
tests/unit/plugins/... folder named after it (test_<module>.py,
test_<module>_*.py, or test_<folder>_<module>*.py where two folders hold a
module of that name: the files scripts/mutation.py runs as the module's own
tests), no two test files under tests/ share a basename (pytest imports them
by it), and the floors of plugins/module_utils/ hold: a package imports only
the packages below it in FLOORS.

Each check is a function of a tree's root; each is also run on a temporary
tree with the defect it looks for, and must report it."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

LIMITED = (os.path.join("plugins", "module_utils"), os.path.join("plugins", "plugin_utils"))
# The floors of plugins/module_utils/, lowest first: a package imports only
# packages below it. common/ imports nothing of the others (it ships to every
# host); plan/ (the kept plan, pure) nothing of deploy/, state/ or fleet/;
# fleet/ (the fleet's variable check, the run) is the top floor; plugin_utils/
# (the plugins' controller helpers) sits above them all.
FLOORS = ("common", "topology", "placement", "bandwidth", "plan", "state", "deploy", "preflight", "audit",
          "metrics", "fleet", "plugin_utils")
_PLUGINS = "ansible_collections.gpufleet.numa.plugins."


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


def _mutation_script(root):
    spec = importlib.util.spec_from_file_location("gpufleet_mutation", os.path.join(root, "scripts", "mutation.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def untested_modules(root):
    """Modules of module_utils/ and plugin_utils/ without a test file named
    after them in tests/unit/<the module's folder>/: the globs scripts/mutation.py
    takes as a module's own tests (own_tests), here for plugin_utils/ too."""
    script = _mutation_script(root)
    missing = []
    for top in LIMITED:
        for path in _python_files(root, top):
            if os.path.basename(path) == "__init__.py":
                continue
            name = os.path.relpath(path[:-3], top)
            globs = [pattern.replace(script.UNIT, os.path.join("tests", "unit", top), 1)
                     for pattern in script.own_tests(name)]
            if not script.expand(root, globs):
                missing.append(path)
    return missing


def _imported_packages(source):
    """The top folders of plugins/ (module_utils/X, or plugin_utils) a module imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module + "." + alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(_PLUGINS + "module_utils."):
                found.add(name[len(_PLUGINS + "module_utils."):].split(".")[0])
            elif name.startswith(_PLUGINS + "plugin_utils"):
                found.add("plugin_utils")
    return found


def floor_breaches(root):
    """'path imports package' for every import of plugins/module_utils/ and
    plugins/plugin_utils/ that runs up (or sideways) out of the module's floor,
    and for every package not in FLOORS."""
    breaches = []
    for top in LIMITED:
        for path in _python_files(root, top):
            parts = os.path.relpath(path, "plugins").split(os.sep)
            package = parts[0] if parts[0] == "plugin_utils" else parts[1]
            if package.endswith(".py"):
                continue
            if package not in FLOORS:
                breaches.append("%s is in no floor (FLOORS)" % path)
                continue
            with open(os.path.join(root, path), encoding="utf-8") as handle:
                imported = _imported_packages(handle.read())
            for other in sorted(imported - {package}):
                if other not in FLOORS or FLOORS.index(other) > FLOORS.index(package):
                    breaches.append("%s imports %s" % (path, other))
    return breaches


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


def test_no_import_runs_up_a_floor():
    assert floor_breaches(fixture_paths.REPO) == []


def test_every_package_of_module_utils_has_a_floor():
    packages = sorted(name for name in os.listdir(os.path.join(fixture_paths.REPO, LIMITED[0]))
                      if os.path.isdir(os.path.join(fixture_paths.REPO, LIMITED[0], name)) and name != "__pycache__")
    assert set(packages) <= set(FLOORS) and len(packages) >= 10


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
    _write(root, "scripts/mutation.py", open(os.path.join(fixture_paths.REPO, "scripts", "mutation.py")).read())
    _write(root, "plugins/module_utils/plan/__init__.py")
    _write(root, "plugins/module_utils/plan/table.py")
    _write(root, "plugins/module_utils/plan/check.py")
    _write(root, "plugins/module_utils/plan/record.py")
    _write(root, "plugins/module_utils/deploy/vllm/command.py")
    _write(root, "plugins/plugin_utils/plain_values.py")
    _write(root, "tests/unit/plugins/module_utils/plan/test_plan_table.py")
    _write(root, "tests/unit/plugins/module_utils/plan/test_plan_record.py")
    _write(root, "tests/unit/plugins/module_utils/test_check.py")  # not the mirrored folder
    _write(root, "tests/unit/plugins/module_utils/plan/test_recheck.py")  # holds the name, not named after it
    _write(root, "tests/unit/plugins/module_utils/deploy/test_command.py")  # not the mirrored folder
    _write(root, "tests/unit/plugins/plugin_utils/plain_values_test.py")  # not a test_ file
    assert untested_modules(root) == [os.path.join("plugins", "module_utils", "deploy", "vllm", "command.py"),
                                      os.path.join("plugins", "module_utils", "plan", "check.py"),
                                      os.path.join("plugins", "plugin_utils", "plain_values.py")]
    _write(root, "tests/unit/plugins/module_utils/plan/test_check_hostile.py")
    _write(root, "tests/unit/plugins/module_utils/deploy/vllm/test_command.py")
    _write(root, "tests/unit/plugins/plugin_utils/test_plain_values.py")
    assert untested_modules(root) == []


def test_an_import_up_a_floor_is_reported(tmp_path):
    root = str(tmp_path)
    _write(root, "plugins/module_utils/common/names.py", "import re\n")
    _write(root, "plugins/module_utils/plan/record.py",
           "from ansible_collections.gpufleet.numa.plugins.module_utils.common import names\n")
    _write(root, "plugins/module_utils/deploy/vllm/retire.py",
           "from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record\n")
    assert floor_breaches(root) == []
    _write(root, "plugins/module_utils/common/checks.py",
           "def late():\n    from ansible_collections.gpufleet.numa.plugins.module_utils import plan\n")
    _write(root, "plugins/module_utils/plan/identity.py",
           "import ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.retire\n")
    _write(root, "plugins/module_utils/deploy/vllm/host.py",
           "from ansible_collections.gpufleet.numa.plugins.plugin_utils.paths import here\n")
    _write(root, "plugins/module_utils/attic/old.py")
    assert floor_breaches(root) == [
        os.path.join("plugins", "module_utils", "attic", "old.py") + " is in no floor (FLOORS)",
        os.path.join("plugins", "module_utils", "common", "checks.py") + " imports plan",
        os.path.join("plugins", "module_utils", "deploy", "vllm", "host.py") + " imports plugin_utils",
        os.path.join("plugins", "module_utils", "plan", "identity.py") + " imports deploy"]


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
