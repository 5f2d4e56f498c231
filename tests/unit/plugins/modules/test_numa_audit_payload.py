# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What numa_audit ships to a host, computed the way AnsiballZ does
(ansible.executor.module_common.recursive_finder: every module_utils file
the module imports, transitively). The module only reads: topology, the
GPU processes and the capture; the findings, drift, result shape and
report code run on the controller and must not be in the zip. The finder
runs in a child process: it installs Ansible's collection loader, which
must not leak into the other tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

COLLECTION = "ansible_collections/gpufleet/numa/"
MODULE_UTILS = COLLECTION + "plugins/module_utils/"
CONTROLLER_ONLY = ("placement/", "plan/", "deploy/", "audit/locality.py", "audit/drift.py", "audit/result.py",
                   "audit/findings.py", "audit/report_text.py", "audit/report_html.py", "audit/report_svg.py")

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
        capture_output=True, text=True, check=False, timeout=120, cwd=repo)
    assert out.returncode == 0, out.stderr[-2000:]
    return [n for n in json.loads(out.stdout) if n.startswith(COLLECTION)]


def test_numa_audit_payload_holds_the_readers_only():
    names = payload("numa_audit")
    inner = [n[len(MODULE_UTILS):] for n in names if n.startswith(MODULE_UTILS)]
    assert "topology/reader.py" in inner  # the finder did look
    assert sorted(n for n in inner if n.startswith("audit/")) == ["audit/__init__.py", "audit/gather.py", "audit/processes.py"]
    assert [n for n in inner if n.startswith(CONTROLLER_ONLY)] == []
    assert not [n for n in names if n.startswith(COLLECTION + "plugins/plugin_utils/")]
    assert sorted(set(n.split("/")[0] for n in inner if "/" in n)) == ["audit", "common", "topology"]


def test_numa_audit_ships_no_more_than_numa_facts_and_the_process_readers():
    audit = set(payload("numa_audit"))
    facts = set(payload("numa_facts"))
    extra = sorted(n[len(MODULE_UTILS):] for n in audit - facts)
    assert extra == ["audit/__init__.py", "audit/gather.py", "audit/processes.py", "common/secret_mask.py"]
