# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""bandwidth/settings.py: the module's arguments from a host's variables,
each variable checked with an error naming it, and the engine's own Python
chosen when gpufleet_bandwidth_python is not set."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import settings


def test_from_variables_defaults_and_the_engine_venv_python():
    assert settings.from_variables({"vllm_venv": "/opt/vllm", "vllm_executable": ""}) == {
        "python": ["/opt/vllm/bin/python"], "kernel": "auto", "size_mib": 256, "seconds": 0.5, "timeout": 120,
        "gpus": True}


def test_from_variables_the_python_beside_vllm_executable_comes_first():
    found = settings.from_variables({"vllm_venv": "/opt/vllm", "vllm_executable": "/srv/rocm-vllm/bin/vllm"})
    assert found["python"] == ["/srv/rocm-vllm/bin/python", "/opt/vllm/bin/python"]


def test_from_variables_takes_command_line_strings():
    found = settings.from_variables({
        "vllm_venv": "/opt/vllm", "gpufleet_bandwidth_size_mib": "64", "gpufleet_bandwidth_seconds": "0.2",
        "gpufleet_bandwidth_timeout": "30", "gpufleet_bandwidth_gpus": "no", "gpufleet_bandwidth_kernel": "stdlib",
        "gpufleet_bandwidth_python": "/usr/bin/python3"})
    assert found == {"python": ["/usr/bin/python3"], "kernel": "stdlib", "size_mib": 64, "seconds": 0.2,
                     "timeout": 30, "gpus": False}
    assert settings.from_variables({"gpufleet_bandwidth_python": ["/a/python", "/b/python"]})["python"] == [
        "/a/python", "/b/python"]


@pytest.mark.parametrize("variable, value, message", [
    ("gpufleet_bandwidth_size_mib", 100000, "gpufleet_bandwidth_size_mib: must be an integer 1-16384 (MiB per buffer) "
                                            "(got 100000)"),
    ("gpufleet_bandwidth_size_mib", "lots", "gpufleet_bandwidth_size_mib: must be an integer (got 'lots')"),
    ("gpufleet_bandwidth_seconds", "1s", "gpufleet_bandwidth_seconds: must be a number of seconds (got '1s')"),
    ("gpufleet_bandwidth_seconds", 0, "gpufleet_bandwidth_seconds: must be a number 0.01-60.0 (seconds per "
                                      "measurement) (got 0.0)"),
    ("gpufleet_bandwidth_timeout", 0, "gpufleet_bandwidth_timeout: must be an integer 1-3600 (seconds per child) "
                                      "(got 0)"),
    ("gpufleet_bandwidth_gpus", "maybe", "gpufleet_bandwidth_gpus: must be a boolean (true or false) (got 'maybe')"),
    ("gpufleet_bandwidth_kernel", "numpy", "gpufleet_bandwidth_kernel: must be one of auto, torch, stdlib "
                                           "(got 'numpy')"),
    ("gpufleet_bandwidth_python", "python3", "gpufleet_bandwidth_python: must be an absolute path of "
                                             "[A-Za-z0-9_@+=:,./-] (got 'python3')"),
    ("gpufleet_bandwidth_python", ["/ok/python", "../x"], "gpufleet_bandwidth_python[1]: must be an absolute path"),
    ("vllm_venv", "/opt/v llm", "vllm_venv: must be an absolute path of [A-Za-z0-9_@+=:,./-] (got '/opt/v llm')"),
])
def test_from_variables_names_the_variable_and_the_rule(variable, value, message):
    with pytest.raises(ValueError) as caught:
        settings.from_variables({"vllm_venv": "/opt/vllm", variable: value})
    assert str(caught.value).startswith(message)
