# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The release notes: CHANGELOG.md is what antsibull-changelog makes of
changelogs/changelog.yaml (edited by hand, or left behind by a release, it
fails), the change metadata and the unreleased fragments lint, and galaxy.yml's
version is a release the metadata holds, with its date and summary (README)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

REPO = fixture_paths.REPO


def _changelog(*args, cwd=REPO):
    """`antsibull-changelog ARGS` (the pinned one, requirements-test.txt) in cwd: the finished process."""
    return subprocess.run([sys.executable, "-m", "antsibull_changelog", *args], cwd=cwd, capture_output=True,
                          text=True, check=False, timeout=120)


def _load(*parts):
    with open(os.path.join(REPO, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_fragments_lint():
    done = _changelog("lint")
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_changelog_yaml_lints():
    done = _changelog("lint-changelog-yaml", os.path.join("changelogs", "changelog.yaml"))
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """CHANGELOG.md as `antsibull-changelog generate` writes it from the committed metadata, in a copy."""
    work = tmp_path_factory.mktemp("changelog")
    shutil.copytree(os.path.join(REPO, "changelogs"), work / "changelogs")
    shutil.copy(os.path.join(REPO, "galaxy.yml"), work / "galaxy.yml")
    (work / "CHANGELOG.md").write_text("stale\n", encoding="utf-8")
    done = _changelog("generate", cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    return (work / "CHANGELOG.md").read_text(encoding="utf-8")


def test_changelog_md_is_generated(regenerated):
    with open(os.path.join(REPO, "CHANGELOG.md"), encoding="utf-8") as handle:
        committed = handle.read()
    assert committed == regenerated, "CHANGELOG.md differs from changelogs/changelog.yaml: run antsibull-changelog generate"


def test_galaxy_version_is_released():
    version = _load("galaxy.yml")["version"]
    releases = _load("changelogs", "changelog.yaml")["releases"]
    assert version in releases, "galaxy.yml version %s has no release in changelogs/changelog.yaml" % version
    assert releases[version].get("release_date")
    assert releases[version]["changes"].get("release_summary")


def test_version_added_is_released():
    """Every version_added of a plugin, role or option names a release: the changelog lists a plugin as new in
    the release its version_added names, so one ahead of the releases is listed in none."""
    releases = set(_load("changelogs", "changelog.yaml")["releases"])
    found = {}
    for folder in ("plugins", "roles"):
        for root, dummy, files in os.walk(os.path.join(REPO, folder)):
            for name in files:
                if name.endswith((".py", ".yml", ".yaml")):
                    with open(os.path.join(root, name), encoding="utf-8") as handle:
                        for value in re.findall(r"version_added:\s*[\"']?([0-9][0-9.]*)", handle.read()):
                            found.setdefault(value, []).append(os.path.relpath(os.path.join(root, name), REPO))
    assert found, "no version_added found"
    unreleased = {value: paths for value, paths in found.items() if value not in releases}
    assert not unreleased, unreleased
