# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""meta/execution-environment.yml, the collection's execution environment
(docs/deploy.md, "Under ansible-runner, AWX and AAP"): the real
`ansible-builder create` (no container engine needed) makes its build
context from the file as committed, and that context carries the
collection's Python requirements and bindep.txt as files, with the pins of
requirements.txt and requirements-test.txt; the same file read as the
collection's own metadata, as ansible-builder reads it from a collection
installed into an image (paths from the collection's root), resolves too;
bindep.txt installs an SSH client and nothing of the hosts' tools by default.
A definition ansible-builder refuses fails `create`, and the tests with it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from bindep.depends import Depends
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

REPO = fixture_paths.REPO
META = os.path.join(REPO, "meta")
DEFINITION = os.path.join(META, "execution-environment.yml")


def _read(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as handle:
        return handle.read()


def _create(definition, context):
    """`ansible-builder create` of definition into context: the finished process."""
    return subprocess.run([sys.executable, "-m", "ansible_builder", "create", "-f", definition, "--context", context,
                           "--output-filename", "Containerfile"], capture_output=True, text=True, check=False,
                          timeout=300)


def _pin(requirements, name):
    """The version `name==X` pins in a requirements text."""
    found = re.findall(r"^%s==(\S+)" % re.escape(name), requirements, re.M | re.I)
    assert len(found) == 1, "%s is not pinned once: %s" % (name, requirements)
    return found[0]


@pytest.fixture(scope="module")
def definition():
    with open(DEFINITION, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """The build context `ansible-builder create` makes of the committed file."""
    path = str(tmp_path_factory.mktemp("ee") / "context")
    done = _create(DEFINITION, path)
    assert done.returncode == 0, done.stdout + done.stderr
    return path


def test_ansible_builder_create_carries_the_collections_requirements_and_bindep(context):
    build = os.path.join(context, "_build")
    for name in ("requirements.txt", "bindep.txt"):
        # Files, not links: a link copied into the context points nowhere in the build.
        assert os.path.isfile(os.path.join(build, name)) and not os.path.islink(os.path.join(build, name)), name
        assert _read(build, name) == _read(REPO, name), name
    containerfile = _read(context, "Containerfile")
    assert "COPY _build/requirements.txt requirements.txt" in containerfile
    assert "COPY _build/bindep.txt bindep.txt" in containerfile
    introspect = [line for line in containerfile.splitlines() if "introspect.py introspect" in line]
    assert len(introspect) == 1 and "--user-pip=requirements.txt" in introspect[0] \
        and "--user-bindep=bindep.txt" in introspect[0], introspect
    assert "RUN /output/scripts/install-from-bindep" in containerfile


def test_the_image_pins_ansible_core_and_runner_as_the_collection_is_tested(definition, context):
    containerfile = _read(context, "Containerfile")
    core = _pin(_read(REPO, "requirements.txt"), "ansible-core")
    runner = _pin(_read(REPO, "requirements-test.txt"), "ansible-runner")
    assert definition["version"] == 3
    assert definition["dependencies"]["ansible_core"]["package_pip"] == "ansible-core==%s" % core
    assert definition["dependencies"]["ansible_runner"]["package_pip"] == "ansible-runner==%s" % runner
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==%s ansible-runner==%s"' % (core, runner) in containerfile
    with open(os.path.join(META, "runtime.yml"), encoding="utf-8") as handle:
        supported = SpecifierSet(yaml.safe_load(handle)["requires_ansible"])
    assert Version(core) in supported, (core, str(supported))
    base = definition["images"]["base_image"]["name"]
    assert re.match(r"^[a-z0-9.-]+\.[a-z]+/[\w./-]+:[\w.-]+$", base), base  # registry/name:tag, public
    assert 'ARG EE_BASE_IMAGE="%s"' % base in containerfile
    python = definition["dependencies"]["python_interpreter"]["python_path"]
    assert python == "/usr/bin/python3.11" and 'ARG PYCMD="%s"' % python in containerfile


def test_the_copies_beside_the_definition_are_the_roots_files():
    # ansible-builder create reads them beside the file; an image that
    # installs the collection reads the root's (the next test).
    for name in ("requirements.txt", "bindep.txt"):
        assert not os.path.islink(os.path.join(META, name)), name
        assert _read(META, name) == _read(REPO, name), "meta/%s differs from %s: cp %s meta/" % (name, name, name)


def test_the_collection_installed_in_an_image_declares_the_same_requirements(context, definition, tmp_path):
    # As ansible-builder's introspection reads a collection installed into an
    # image: meta/execution-environment.yml, its files from the collection's root.
    installed = tmp_path / "collections" / "ansible_collections" / "gpufleet" / "numa"
    shutil.copytree(META, installed / "meta")
    for name in ("requirements.txt", "bindep.txt", "galaxy.yml"):
        shutil.copy(os.path.join(REPO, name), installed / name)
    done = subprocess.run([sys.executable, os.path.join(context, "_build", "scripts", "introspect.py"), "introspect",
                           str(tmp_path / "collections")], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    found = yaml.safe_load(done.stdout)
    bindep = [line for line in _read(REPO, "bindep.txt").splitlines() if line.strip() and not line.startswith("#")]
    assert found["system"] == ["%s  # from collection gpufleet.numa" % line for line in bindep], found
    # ansible-core and PyYAML: already in every image (ansible-builder leaves them out).
    assert not found.get("python"), found


@pytest.mark.parametrize("platform, ssh", [("platform:dpkg", "openssh-client"), ("platform:rpm", "openssh-clients")])
def test_bindep_installs_an_ssh_client_and_the_hosts_tools_only_for_the_demo(platform, ssh):
    rules = Depends(_read(REPO, "bindep.txt"))
    # ansible-builder runs bindep with its default profile.
    assert [rule[0] for rule in rules.active_rules(["default", platform])] == [ssh]
    assert [rule[0] for rule in rules.active_rules(["demo", platform])] == [ssh, "numactl", "systemd", "haproxy"]


def test_a_definition_ansible_builder_refuses_fails_create(tmp_path):
    # What the tests above stand on: create checks the schema and the files.
    shutil.copytree(META, tmp_path / "meta")
    broken = tmp_path / "meta" / "execution-environment.yml"
    broken.write_text(broken.read_text().replace("images:", "image:", 1))
    done = _create(str(broken), str(tmp_path / "context"))
    assert done.returncode != 0 and "'image' was unexpected" in done.stdout + done.stderr
    (tmp_path / "meta" / "bindep.txt").unlink()
    broken.write_text(_read(DEFINITION))
    done = _create(str(broken), str(tmp_path / "context"))
    assert done.returncode != 0 and "bindep.txt does not exist" in done.stdout + done.stderr
