# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/host_state.py: what the host already has (find's results)
against what the role writes: missing programs, what already matches.
"""

import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import COMMIT, INSTANCE, SNAPSHOTS, VARIABLES


def test_missing_programs_are_named_unless_the_role_installs_them():
    # What find (file_type any) reports: numactl is there but not executable.
    found = [{"path": "/opt/vllm/bin/vllm", "isreg": True, "xusr": True},
             {"path": "/usr/bin/numactl", "isreg": True, "xusr": False, "xgrp": False, "xoth": False}]
    variables = dict(VARIABLES, vllm_install=False, vllm_download_weights=False, existing=found, host="gpu-a")
    with pytest.raises(ValueError, match=r"^vllm_numactl: /usr/bin/numactl does not exist or is not executable "
                                         r"on gpu-a: install numactl"):
        host_state.host_units([INSTANCE], variables)
    host_state.host_units([INSTANCE], dict(variables, vllm_binding="systemd"))
    host_state.host_units([INSTANCE], dict(variables, vllm_install=True))


def test_what_already_matches_is_marked_so_the_role_skips_it():
    found = [
        {"path": "/etc/vllm", "isdir": True, "mode": "0755"},
        {"path": "/etc/systemd/system", "isdir": True, "mode": "0700"},
        {"path": "/var/lib/vllm", "isdir": True, "mode": "0750", "pw_name": "vllm", "gr_name": "vllm"},
        {"path": "/var/lib/vllm/hf", "isdir": True, "mode": "0750", "pw_name": "root", "gr_name": "vllm"},
        {"path": "/etc/vllm/secrets.env", "isreg": True, "mode": "0600", "pw_name": "vllm", "gr_name": "vllm",
         "checksum": "abc"},
        {"path": "/etc/systemd/system/gpufleet-vllm-0.service", "isreg": True, "mode": "0640", "checksum": "def"},
        {"path": "/usr/local/libexec/gpufleet/gpufleet-verify-unit", "isreg": True, "mode": "0755",
         "checksum": "123"},
    ]
    result = host_state.host_units([INSTANCE], dict(VARIABLES, existing=found, vllm_install=True))
    directories = {d["path"]: d["as_planned"] for d in result["directories"]}
    assert directories == {"/etc/vllm": True, "/etc/systemd/system": False, "/usr/local/libexec/gpufleet": False,
                           "/var/lib": False, "/var/lib/vllm": True, "/var/lib/vllm/hf": False,
                           "/var/lib/vllm/cache": False}
    files = {f["label"]: (f["as_planned"], f["checksum"]) for f in result["files"]}
    assert files == {"secrets.env": (True, "abc"), "gpufleet-vllm-0.service": (False, "def"),
                     "gpufleet-agent.socket": (False, ""), "gpufleet-agent@.service": (False, ""),
                     "gpufleet-agent-weights.service": (False, "")}
    assert result["checker"] == {"path": "/usr/local/libexec/gpufleet/gpufleet-verify-unit", "as_planned": True,
                                 "checksum": "123"}


def test_no_python_for_the_download_is_named_with_the_host():
    programs = [{"path": "/srv/vllm", "isreg": True, "xusr": True},
                {"path": "/usr/bin/numactl", "isreg": True, "xusr": True}]
    variables = dict(VARIABLES, vllm_executable="/srv/vllm", existing=programs, host="gpu-a")
    with pytest.raises(ValueError, match=r"^vllm_download_python: /opt/vllm/bin/python does not exist or is not "
                                         r"executable on gpu-a, and meta-llama/Llama-3.1-70B-Instruct is not in "):
        host_state.host_units([INSTANCE], variables)
    python = {"path": "/usr/bin/python3", "isreg": True, "xusr": True}
    result = host_state.host_units([INSTANCE], dict(variables, existing=programs + [python],
                                                    vllm_download_python="/usr/bin/python3"))
    assert result["download"]["needed"] is True
    assert result["after_write"] == {"steps": ["download"], "include": True}
    # Cached: no Python needed.
    cached = {"path": SNAPSHOTS + "/" + COMMIT, "isdir": True}
    result = host_state.host_units([INSTANCE], dict(variables, existing=programs + [cached]))
    assert result["download"]["needed"] is False
    assert result["after_write"] == {"steps": [], "include": result["manage_service"]}


def test_the_result_holds_what_the_filter_documents_and_nothing_more():
    """Every key of host_units' result is read by the role and documented in
    plugins/filter/vllm_units.yml (the names nobody read are gone)."""
    with open(os.path.join(fixture_paths.REPO, "plugins", "filter", "vllm_units.yml")) as source:
        documented = yaml.safe_load(source)["RETURN"]["_value"]["contains"]
    result = host_state.host_units([INSTANCE], VARIABLES)
    assert sorted(result) == sorted(documented)
    for dead in ("unit_names", "config_names", "state_dirs", "executables"):
        assert dead not in result


def test_why_units_are_not_started_only_where_the_role_does_not_start_them():
    """The deploy report says it of a host from not_started: the service
    manager, vllm_manage_service and where the units are; nothing where the
    role manages the service."""
    staging = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_manage_service="auto", service_mgr="none"))
    assert staging["manage_service"] is False
    assert staging["not_started"] == ("service manager here is none and vllm_manage_service is auto: units rendered "
                                      "and validated in %s, not started" % VARIABLES["vllm_unit_dir"])
    systemd = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_manage_service="auto", service_mgr="systemd"))
    assert systemd["manage_service"] is True and systemd["not_started"] is None
    unknown = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_manage_service=False, service_mgr=""))
    assert unknown["not_started"].startswith("service manager here is unknown and vllm_manage_service is False:")
