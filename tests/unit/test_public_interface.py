# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Which plugins are for users and which are the playbooks' own steps, as
`ansible-doc -l` shows them (ansible-core has no way to leave a plugin out of
the listing): every internal filter, module and lookup says "Internal to
...; not a stable interface" at the start of its short description and its
description; the public ones do not, say they are for users, and are the
ones the README's "Filters for users" table lists."""

from __future__ import annotations

import ast
import glob
import os
import re

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

REPO = fixture_paths.REPO
PUBLIC_FILTERS = {"socket_local_groups", "fleet_plan", "fleet_plan_by_host", "plan_table", "plan_warning_lines",
                  "slurm_gres_conf", "nccl_topology_xml"}
PUBLIC_MODULES = {"numa_facts", "numa_audit", "numa_preflight", "numa_bandwidth"}
INTERNAL = re.compile(r"^Internal to [^;]+; not a stable interface: \S")


def _python_doc(path):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["DOCUMENTATION"]:
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % path)


def _docs():
    """{(kind, name): documentation} of every filter, module and lookup of the collection."""
    docs = {}
    for path in glob.glob(os.path.join(REPO, "plugins", "filter", "*.yml")):
        with open(path, encoding="utf-8") as handle:
            docs[("filter", os.path.basename(path)[:-4])] = yaml.safe_load(handle)["DOCUMENTATION"]
    for kind, folder in (("module", "modules"), ("lookup", "lookup")):
        for path in glob.glob(os.path.join(REPO, "plugins", folder, "*.py")):
            if not os.path.basename(path).startswith("_"):
                docs[(kind, os.path.basename(path)[:-3])] = _python_doc(path)
    return docs


DOCS = _docs()


def _public(kind, name):
    return (kind == "filter" and name in PUBLIC_FILTERS) or (kind == "module" and name in PUBLIC_MODULES)


def test_every_public_plugin_exists():
    assert {name for kind, name in DOCS if kind == "filter"} >= PUBLIC_FILTERS
    assert {name for kind, name in DOCS if kind == "module"} >= PUBLIC_MODULES
    assert len(DOCS) > 60, sorted(DOCS)


@pytest.mark.parametrize("kind, name", sorted(DOCS))
def test_short_description_says_internal_or_not(kind, name):
    doc = DOCS[(kind, name)]
    short = doc["short_description"]
    description = doc["description"] if isinstance(doc["description"], list) else [doc["description"]]
    if _public(kind, name):
        assert not short.lower().startswith("internal"), short
        assert not any("not a stable interface" in line for line in description), description
        if kind == "filter":
            assert description[0].startswith("A filter for users (README, Filters for users)"), description[0]
    else:
        assert INTERNAL.match(short), "%s %s: %r should start 'Internal to ...; not a stable interface: '" % (
            kind, name, short)
        assert INTERNAL.match(description[0]), description[0]


def _readme_section(title):
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    start = text.index("\n## %s\n" % title)
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_readme_lists_exactly_the_public_filters():
    section = _readme_section("Filters for users")
    listed = set(re.findall(r"^\| `gpufleet\.numa\.(\w+)` \|", section, re.M))
    assert listed == PUBLIC_FILTERS
    for module in PUBLIC_MODULES:
        assert "`%s`" % module in section, module


def test_internal_filters_list_the_public_ones():
    """An internal filter's description names every filter for users, so `ansible-doc` of one leads to them."""
    for (kind, name), doc in DOCS.items():
        if kind == "filter" and name not in PUBLIC_FILTERS:
            text = " ".join(doc["description"])
            missing = [public for public in PUBLIC_FILTERS if "P(gpufleet.numa.%s#filter)" % public not in text]
            assert not missing, (name, missing)
