# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/variables.py: the role's variables, checked; every probe
names the variable and the rule.
"""

import re

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import INSTANCE, PLANS, VARIABLES


def test_strict_hardening_adds_to_the_syscall_filter():
    instance = PLANS[0][2]["instances"][0]
    hardening = {"SystemCallFilter": "@system-service", "UMask": "0027", "NoNewPrivileges": True}
    unit = host_state.host_units([instance], dict(VARIABLES, vllm_hardening=hardening,
                                                  vllm_hardening_strict=True))["units"][0]
    filters = [v for k, v in unit["hardening"] if k == "SystemCallFilter"]
    assert filters[0] == "@system-service" and filters[1] == "~@privileged"
    assert ["UMask", "0077"] in unit["hardening"] and ["UMask", "0027"] not in unit["hardening"]
    assert ["NoNewPrivileges", "yes"] in unit["hardening"]
    denied = " ".join(f for f in filters if f.startswith("~"))
    for call in ("set_mempolicy", "mbind", "sched_setaffinity", "get_mempolicy", "migrate_pages"):
        assert call not in denied


BAD_VARIABLES = [
    ({"vllm_model": "--trust-remote-code"}, "vllm_model: must not start with '-'"),
    ({"vllm_model": "evil\nExecStartPre=/bin/sh"}, "vllm_model: must not contain control characters"),
    ({"vllm_model": ""}, "vllm_model: must not be empty"),
    ({"vllm_served_model_name": "-x"}, "vllm_served_model_name: must not start with '-'"),
    ({"vllm_extra_args": {"api-key\n": "x"}}, "vllm_extra_args key: must not contain control characters"),
    ({"vllm_extra_args": {"api_key": "x"}}, "vllm_extra_args key: must not set options the unit sets itself"),
    ({"vllm_extra_args": {"--port": 1}}, "vllm_extra_args key: must be a long option name"),
    ({"vllm_extra_args": {"chat-template": "a\nb"}}, "vllm_extra_args.chat-template: must not contain control"),
    ({"vllm_extra_args": ["port"]}, "vllm_extra_args: must be a mapping"),
    ({"vllm_environment": {"VLLM_PORT": "1"}}, "vllm_environment key: must not set what the role sets"),
    ({"vllm_environment": {"A B": "1"}}, "vllm_environment key: must be a variable name"),
    ({"vllm_environment": {"NCCL_DEBUG": "INFO\n"}}, "vllm_environment.NCCL_DEBUG: must not contain control"),
    ({"vllm_environment": {"FLAG": True}}, "vllm_environment.FLAG: must be a string or a number"),
    ({"vllm_user": "root\n"}, "vllm_user: must not contain control characters"),
    ({"vllm_user": "-o"}, "vllm_user: must be a user or group name"),
    ({"vllm_group": "vllm group"}, "vllm_group: must be a user or group name"),
    ({"vllm_unit_prefix": "../x"}, "vllm_unit_prefix: must start with 'gpufleet-'"),
    ({"vllm_unit_prefix": "gpufleet-\n"}, "vllm_unit_prefix: must not contain control characters"),
    # Round 3: only gpufleet-* units are ever the role's (an empty prefix made every unit its own).
    ({"vllm_unit_prefix": ""}, "vllm_unit_prefix: must not be empty"),
    ({"vllm_unit_prefix": "ssh"}, "vllm_unit_prefix: must start with 'gpufleet-'"),
    ({"vllm_listen_host": "127.0.0.1 --trust-remote-code"}, "vllm_listen_host: must be an IPv4 or IPv6 address"),
    ({"vllm_binding": "cgroup"}, "vllm_binding: must be one of numactl, systemd"),
    ({"vllm_state_dir": "/var/lib/vllm\n"}, "vllm_state_dir: must not contain control characters"),
    ({"vllm_state_dir": "relative"}, "vllm_state_dir: must be an absolute path"),
    ({"vllm_numactl": "/usr/bin/../bin/numactl"}, "vllm_numactl: must not contain '..'"),
    ({"vllm_executable": "/opt/my vllm"}, "vllm_executable: must be an absolute path"),
    ({"vllm_version": "1.0 --index-url=http://x"}, "vllm_version: must be a version"),
    ({"vllm_version": "0.4.0"}, "vllm_version: must be 0.18 or newer (the units pass --shutdown-timeout, which older "
     "vLLM refuses at start) (got '0.4.0')"),
    ({"vllm_version": "0.17.1", "vllm_executable": "/opt/v/bin/vllm"}, "vllm_version: must be 0.18 or newer"),
    ({"vllm_python": "-c"}, "vllm_python: must be a program name or path"),
    ({"vllm_packages": ["numactl", "-y"]}, "vllm_packages[1]: must be a package name"),
    ({"vllm_api_key": "sk-secret\nX=1"},
     "vllm_api_key: must be 16-512 printable ASCII characters, not starting or ending with a space, with no two "
     "spaces in a row (value hidden)"),
    ({"vllm_api_key": "sk-short"}, "vllm_api_key: must be 16-512 printable ASCII characters"),
    ({"vllm_hardening": {"ExecStartPre": "/bin/sh"}}, "vllm_hardening key: must be a sandboxing directive"),
    ({"vllm_hardening": {"User": "root"}}, "vllm_hardening key: must be a sandboxing directive"),
    ({"vllm_hardening": {"PrivateTmp": "yes\nUser=root"}}, "vllm_hardening.PrivateTmp: must not contain control"),
    ({"vllm_timeout_start_sec": 600}, "vllm_timeout_start_sec: must be above vllm_engine_ready_timeout (600)"),
    ({"vllm_shutdown_timeout": 100, "vllm_timeout_stop_sec": 90},
     "vllm_timeout_stop_sec: must be above vllm_shutdown_timeout (100)"),
    ({"vllm_health_delay": 0}, "vllm_health_delay: must be at least 1"),
    ({"vllm_manage_service": "sometimes"}, "vllm_manage_service: must be auto, true or false"),
    ({"vllm_limit_nofile": True}, "vllm_limit_nofile: must be an integer, not a boolean"),
    ({"vllm_nvidia_modprobe": "nvidia-modprobe"}, "vllm_nvidia_modprobe: must be an absolute path"),
    ({"vllm_drain_timeout": -1}, "vllm_drain_timeout: must be at least 0"),
    ({"vllm_gateways": ["gw-1"]}, "vllm_gateways: must be a mapping"),
    ({"vllm_gateways": {"gw 1": "/run/a.sock"}}, "vllm_gateways key: must be an inventory host name"),
    ({"vllm_gateways": {"gw-1": "run/a.sock"}}, "vllm_gateways.gw-1: must be an absolute path"),
    ({"vllm_gateway_backends": [{"host": "a"}]}, "vllm_gateway_backends[0]: lacks name"),
    ({"vllm_gateway_backends": [{"name": "a b"}]}, "vllm_gateway_backends[0].name: must be 1-64 letters"),
    ({"vllm_gateway_backends": [{"name": "a", "backend": "x\ny"}]},
     "vllm_gateway_backends[0].backend: must not contain control"),
    # Beyond loopback, a key or an explicit opt-out.
    ({"vllm_listen_host": "10.0.0.5"}, "vllm_api_key: is required when vllm_listen_host is not a loopback address"),
    ({"vllm_listen_host": "0.0.0.0", "vllm_api_key": ""}, "vllm_api_key: is required when vllm_listen_host"),
    ({"vllm_listen_host": "gpu-a.internal"}, "vllm_api_key: is required when vllm_listen_host"),
    ({"vllm_listen_host": "10.0.0.5", "vllm_allow_unauthenticated": "maybe"},
     "vllm_allow_unauthenticated: must be a boolean"),
]


BAD_VARIABLE_IDS = [m.split(":")[0] + "-%d" % i for i, (c, m) in enumerate(BAD_VARIABLES)]


@pytest.mark.parametrize("changes,message", BAD_VARIABLES, ids=BAD_VARIABLE_IDS)
def test_bad_variable_is_refused_naming_it_and_the_rule(changes, message):
    with pytest.raises(ValueError) as info:
        host_state.host_units([INSTANCE], dict(VARIABLES, **changes))
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
    assert "sk-secret" not in str(info.value)


@pytest.mark.parametrize("changes", [
    {"vllm_listen_host": "127.0.0.1"}, {"vllm_listen_host": "127.0.0.2"}, {"vllm_listen_host": "::1"},
    {"vllm_listen_host": "localhost"},
    {"vllm_listen_host": "10.0.0.5", "vllm_api_key": "sk-secret-0123456789"},
    {"vllm_listen_host": "0.0.0.0", "vllm_allow_unauthenticated": True},
])
def test_loopback_key_or_opt_out_lets_an_instance_listen(changes):
    units = host_state.host_units([INSTANCE], dict(VARIABLES, **changes))
    argv = units["units"][0]["argv"]
    assert argv[argv.index("--host") + 1] == changes["vllm_listen_host"]
    # The key reaches secrets.env only, never the command line.
    assert "sk-secret" not in repr(units["units"])


@pytest.mark.parametrize("name, value, message", [
    ("vllm_download_weights", "maybe", "vllm_download_weights: must be"),
    ("vllm_download_python", "python3", "vllm_download_python: must be an absolute path"),
    ("vllm_download_timeout", 0, "vllm_download_timeout: must be"),
    ("vllm_download_poll", 0, "vllm_download_poll: must be"),
    ("vllm_download_ignore_patterns", "original/*", "vllm_download_ignore_patterns: must be a list"),
    ("vllm_download_ignore_patterns", ["a\nb"], "vllm_download_ignore_patterns[0]: must not contain control"),
])
def test_download_variables_are_checked(name, value, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        host_state.host_units([INSTANCE], dict(VARIABLES, **{name: value}))


@pytest.mark.parametrize("name", sorted(set(VARIABLES) - {"vllm_model"}))
def test_a_missing_role_variable_is_an_error_naming_it(name):
    """No default is made up in Python: roles/vllm/defaults/main.yml is the one source."""
    variables = dict(VARIABLES)
    del variables[name]
    with pytest.raises(ValueError, match="^%s: is required, and roles/vllm/defaults/main.yml sets it" % name):
        host_state.host_units([INSTANCE], variables)
