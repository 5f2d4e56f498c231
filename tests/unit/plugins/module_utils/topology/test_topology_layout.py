# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The shape of topology/: each module within the size limits
(scripts/size_check.py), its package init empty, and a test file named
after it (test_<module>.py, or test_topology_<module>.py where the plain
name is taken elsewhere in tests/)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

TOPOLOGY = os.path.join("plugins", "module_utils", "topology")
TESTS = os.path.dirname(os.path.abspath(__file__))


def _size_check():
    spec = importlib.util.spec_from_file_location("size_check", os.path.join(fixture_paths.REPO, "scripts", "size_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _modules():
    return sorted(name[:-3] for name in os.listdir(os.path.join(fixture_paths.REPO, TOPOLOGY))
                  if name.endswith(".py") and name != "__init__.py")


@pytest.mark.parametrize("module", _modules())
def test_topology_module_within_size_limits(module):
    check = _size_check()
    path = os.path.join(TOPOLOGY, module + ".py")
    with open(os.path.join(fixture_paths.REPO, path), encoding="utf-8") as handle:
        lines = sum(1 for dummy in handle)
    assert lines <= check.FILE_LIMIT, "%s: %d lines" % (path, lines)
    long = [(name, length) for name, dummy, length in check.functions(path) if length > check.FUNCTION_LIMIT]
    assert long == []


def test_topology_package_init_is_empty():
    assert os.path.getsize(os.path.join(fixture_paths.REPO, TOPOLOGY, "__init__.py")) == 0


@pytest.mark.parametrize("module", _modules())
def test_topology_module_has_a_test_file_named_after_it(module):
    names = ("test_%s.py" % module, "test_topology_%s.py" % module)
    assert any(os.path.exists(os.path.join(TESTS, name)) for name in names), names
