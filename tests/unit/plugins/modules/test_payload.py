# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What each module ships to a host, computed the way AnsiballZ does.

ansible.executor.module_common.recursive_finder puts into the payload zip
every module_utils file a module imports, transitively. A module runs on
the target with the standard library alone and reads the machine; the
controller-only packages (placement, plan, deploy, plugin_utils, and the
audit findings) must not reach it. The finder runs in a child process:
it installs Ansible's collection loader, which must not leak into the
other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

COLLECTION = "ansible_collections/gpufleet/numa/"
MODULE_UTILS = COLLECTION + "plugins/module_utils/"
# Packages of the collection that run on the controller only.
CONTROLLER_ONLY = ("placement/", "plan/", "deploy/", "audit/")
TARGET_AUDIT = ("audit/__init__.py", "audit/processes.py", "audit/gather.py", "audit/units.py")

_FINDER = r'''
import datetime, inspect, io, json, sys, zipfile
from ansible.executor import module_common
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
root, name, path = sys.argv[1:4]
_AnsibleCollectionFinder(paths=[root])._install()
kwargs = {}
params = inspect.signature(module_common.recursive_finder).parameters
if "date_time" in params:
    kwargs["date_time"] = datetime.datetime(2020, 1, 1)
if "extension_manager" in params:  # ansible-core 2.19
    from ansible._internal._ansiballz._builder import ExtensionManager
    kwargs["extension_manager"] = ExtensionManager()
with open(path, "rb") as handle:
    data = handle.read()
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as zf:
    module_common.recursive_finder(name, "ansible_collections.gpufleet.numa.plugins.modules." + name, data, zf, **kwargs)
    print(json.dumps(sorted(zf.namelist())))
'''


def payload(module):
    """The names in the module's AnsiballZ zip that belong to this collection."""
    repo = fixture_paths.REPO
    out = subprocess.run(
        [sys.executable, "-c", _FINDER, os.path.join(repo, ".collections"), module,
         os.path.join(repo, "plugins", "modules", module + ".py")],
        capture_output=True, text=True, check=False, timeout=120, cwd=repo,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [n for n in json.loads(out.stdout) if n.startswith(COLLECTION)]


def controller_only(names):
    leaked = []
    for name in names:
        if name.startswith(COLLECTION + "plugins/plugin_utils/"):
            leaked.append(name)
            continue
        inner = name[len(MODULE_UTILS):] if name.startswith(MODULE_UTILS) else ""
        if inner.startswith(CONTROLLER_ONLY) and inner not in TARGET_AUDIT:
            leaked.append(name)
    return leaked


def figures(names):
    """(files, lines) of the module_utils in a payload."""
    files = [n for n in names if n.startswith(MODULE_UTILS) and n.endswith(".py")]
    lines = 0
    for name in files:
        path = os.path.join(fixture_paths.REPO, name[len(COLLECTION):])
        if os.path.exists(path):  # package inits missing on disk are written by the finder, empty
            with open(path, encoding="utf-8") as handle:
                lines += sum(1 for dummy in handle)
    return len(files), lines


@pytest.mark.parametrize("module", [
    "numa_facts",
    "numa_audit",
])
def test_payload_holds_no_controller_only_code(module):
    names = payload(module)
    assert MODULE_UTILS + "topology/reader.py" in names  # the finder did look
    assert controller_only(names) == [], "%s ships controller-only code (%d files, %d lines of module_utils)" % (
        (module,) + figures(names))


def test_numa_facts_ships_common_and_topology_only():
    names = payload("numa_facts")
    packages = sorted(set(n[len(MODULE_UTILS):].split("/")[0] for n in names if n.startswith(MODULE_UTILS)
                          and "/" in n[len(MODULE_UTILS):]))
    assert packages == ["common", "topology"]
    # Loading a recorded capture is the action plugin's job, on the controller.
    assert MODULE_UTILS + "topology/capture.py" not in names


def test_the_check_sees_a_leak():
    """The rule itself: a placement file or a controller helper is a leak, the target audit readers are not."""
    assert controller_only([MODULE_UTILS + "placement/api.py", COLLECTION + "plugins/plugin_utils/host_results.py",
                            MODULE_UTILS + "audit/processes.py", MODULE_UTILS + "audit/locality.py",
                            MODULE_UTILS + "topology/reader.py"]) == [
        MODULE_UTILS + "placement/api.py", COLLECTION + "plugins/plugin_utils/host_results.py",
        MODULE_UTILS + "audit/locality.py"]


def test_numa_audit_ships_the_readers_only():
    """What numa_audit adds to numa_facts: the process readers, the live gather, the unit state reader and secret
    masking; no capture loading."""
    audit = set(payload("numa_audit"))
    facts = set(payload("numa_facts"))
    extra = sorted(n[len(MODULE_UTILS):] for n in audit - facts)
    assert extra == ["audit/__init__.py", "audit/gather.py", "audit/processes.py", "audit/units.py", "common/secret_mask.py"]
    assert MODULE_UTILS + "topology/capture.py" not in audit
