# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Where role vllm's files are (deploy/vllm/layout.py): what its one look at
the host covers, and the marker its take-down and cleanup trust."""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import command
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import layout
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import role_defaults

ROLE = {"vllm_config_dir": "/etc/vllm", "vllm_unit_dir": "/etc/systemd/system", "vllm_libexec_dir": "/usr/local/libexec/gpufleet",
        "vllm_state_dir": "/var/lib/vllm", "vllm_hf_home": "/var/lib/vllm/hf", "vllm_cache_dir": "/var/cache/vllm",
        "vllm_venv": "/opt/vllm", "vllm_unit_prefix": "gpufleet-", "vllm_executable": "", "vllm_numactl": "/usr/bin/numactl",
        "vllm_model": "meta-llama/Llama-3.1-8B-Instruct", "vllm_download_weights": False,
        "vllm_download_python": "/opt/vllm/bin/python"}


def test_the_look_covers_every_directory_program_and_file_the_role_writes():
    assert layout.look_paths(ROLE) == [
        "/etc/vllm", "/etc/systemd/system", "/usr/local/libexec/gpufleet", "/var/lib/vllm", "/var/lib/vllm/hf",
        "/var/cache/vllm", "/var/lib", "/var/lib/vllm", "/var/cache",
        "/opt/vllm/bin/vllm", "/opt/vllm/bin/python", "/usr/bin/numactl", "/etc/vllm/secrets.env",
        "/usr/local/libexec/gpufleet/gpufleet-verify-unit", "/usr/local/libexec/gpufleet/gpufleet-wait-ready",
        "/usr/local/libexec/gpufleet/gpufleet-agent", "/usr/local/libexec/gpufleet/gpufleet-agent-state",
        "/usr/local/libexec/gpufleet/gpufleet-agent-weights", "/usr/local/libexec/gpufleet/gpufleet_agent.py",
        "/etc/systemd/system/gpufleet-agent.socket", "/etc/vllm/gpufleet-*.yaml", "/etc/systemd/system/gpufleet-*.service"]
    # every helper the role installs is looked at
    assert set("/usr/local/libexec/gpufleet/" + h for h in layout.HELPERS) <= set(layout.look_paths(ROLE))


def test_the_look_takes_the_downloader_and_snapshots_only_for_a_hub_model_it_downloads():
    for wanted in (True, "yes", "on", "true", 1):
        paths = layout.look_paths(dict(ROLE, vllm_download_weights=wanted))
        assert paths[:2] == ["/opt/vllm/bin/python", "/var/lib/vllm/hf/hub/models--meta-llama--Llama-3.1-8B-Instruct/"
                             "snapshots/" + "[0-9a-f]" * 40], wanted
    for wanted in (False, "no", "", None):
        assert layout.look_paths(dict(ROLE, vllm_download_weights=wanted))[0] == "/etc/vllm", wanted
    # a model on the host's disk is not downloaded
    assert layout.look_paths(dict(ROLE, vllm_download_weights=True, vllm_model="/srv/models/m"))[0] == "/etc/vllm"


def test_the_look_reads_unchecked_variables_without_failing():
    """The look comes before the variable check: what is missing or of the
    wrong type is left out (vllm_units then names it)."""
    paths = layout.look_paths(dict(ROLE, vllm_executable="/usr/local/bin/vllm", vllm_numactl=None,
                                   vllm_config_dir=["not", "a", "path"]))
    assert "/usr/local/bin/vllm" in paths and "/usr/bin/numactl" not in paths
    assert not any(p.startswith("['not'") for p in paths) and "/secrets.env" in paths
    assert all(isinstance(p, str) and p for p in paths)
    # the role's own defaults
    assert "/etc/systemd/system/gpufleet-*.service" in layout.look_paths(role_defaults())


def test_the_look_leaves_out_what_stat_paths_cannot_look_at():
    """A relative directory or a glob in a folder is a malformed variable:
    left out of the look (stat_paths would refuse the whole look), so that
    vllm_units names the variable."""
    paths = layout.look_paths(dict(ROLE, vllm_state_dir="var/lib/vllm", vllm_config_dir="/etc/v*llm"))
    assert paths and all(p.startswith("/") for p in paths)
    assert not any("var/lib/vllm" in p and not p.startswith("/var/lib/vllm") for p in paths)
    assert "/etc/v*llm" in paths  # the folder itself, looked at in /etc
    assert not any(p.startswith("/etc/v*llm/") for p in paths)


def test_the_marker_is_found_only_on_the_first_line():
    found = re.compile(layout.managed_first_line())
    assert found.search(command.MANAGED_MARKER + "; instance vllm-0: ...\n[Unit]\n")
    assert not found.search("[Unit]\n" + command.MANAGED_MARKER + "\n")
    assert not found.search("# Managed by gpufleet.numa (role gateway)\n")
    assert not found.search("# Managed by gpufleetXnuma (role vllm)\n")
