# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Hostile values at the gateway's settings check, each from its probe.

Keys HAProxy would interpret, the output of a failed `haproxy -c` (run for
real), the statistics page beyond loopback, backend addresses in legacy
forms, and one rule for every API key of both roles.
"""

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.tests.fixtures.gateway_inputs import variables
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import backends as gateway_view
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as value_checks

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
PROBE_KEY = "Xk9%Qw7LmN2pR5tZ"


def fragments(secret, size=4):
    return {secret[i:i + size] for i in range(len(secret) - size + 1)}


# --- (1) keys HAProxy would read as log-format ---------------------------------

@pytest.mark.parametrize("key", [PROBE_KEY, "sk-%[env(HOME)]-0123456789", "sk-%%-%H-%{+Q}o-0123"])
def test_backend_key_percent_is_doubled_for_log_format(key):
    models = gateway_settings.check_settings(variables(gateway_backend_api_keys={"m": key}))["models"]
    assert models[0]["api_key_header"] == '"Bearer %s"' % key.replace("%", "%%")


@pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed")
def test_haproxy_check_output_is_redacted_of_every_key_fragment(tmp_path):
    """The probe: the key placed as the role placed it before (no '%%'),
    which `haproxy -c` refuses quoting most of the key, three times."""
    config = tmp_path / "haproxy.cfg"
    config.write_text("defaults\n    mode http\nbackend b\n    http-request set-header Authorization \"Bearer %s\"\n"
                      % PROBE_KEY)
    check = subprocess.run([HAPROXY, "-c", "-f", str(config)], check=False, capture_output=True, text=True, timeout=60)
    assert check.returncode != 0
    lines = (check.stdout + check.stderr).splitlines()
    assert any(fragment in line for line in lines for fragment in fragments(PROBE_KEY))  # what leaked
    redacted = gateway_settings.redact_lines(lines, [PROBE_KEY])
    assert not any(fragment in line for line in redacted for fragment in fragments(PROBE_KEY)), redacted
    assert "(a line that mentions an API key, withheld)" in redacted
    # Lines without a key stay as HAProxy wrote them.
    assert [line for line in redacted if "withheld" not in line] == \
        [line for line in lines if not any(f in line for f in fragments(PROBE_KEY))]


def test_redaction_covers_the_forms_a_key_takes_in_the_configuration():
    key = 'a"b"c"d"e%f%g%h$i'
    placed = gateway_settings.header_value("Bearer " + key)
    redacted = gateway_settings.redact_lines(["line: " + placed[8:20], "as log-format: e%%f%%g", "safe line"], [key])
    assert redacted == ["(a line that mentions an API key, withheld)"] * 2 + ["safe line"]


# --- (4) the statistics page ------------------------------------------------------

@pytest.mark.parametrize("address", ["0.0.0.0", "10.0.0.5", "::", "::ffff:10.0.0.5"])
def test_stats_beyond_loopback_is_refused_naming_the_variable(address):
    with pytest.raises(ValueError, match=r"^gateway_stats_address: must be a loopback address .*"
                                         r"no login") as info:
        gateway_settings.check_settings(variables(gateway_stats_port=8404, gateway_stats_address=address,
                                                  gateway_api_key="gw-0123456789abcdef"))
    assert "gw-0123" not in str(info.value)


def test_stats_on_loopback_or_off_or_gateway_open_is_accepted():
    for address in ("127.0.0.1", "::1", "127.0.0.9"):
        assert gateway_settings.check_settings(variables(gateway_stats_port=8404, gateway_stats_address=address))
    assert gateway_settings.check_settings(variables(gateway_stats_port=0, gateway_stats_address="0.0.0.0"))
    assert gateway_settings.check_settings(variables(gateway_stats_port=8404, gateway_stats_address="0.0.0.0",
                                                     gateway_listen_address="0.0.0.0",
                                                     gateway_allow_unauthenticated=True))


# --- (5) backend addresses --------------------------------------------------------

@pytest.mark.parametrize("address, rule", [
    ("0", "legacy form"), ("127.1", "legacy form"), ("0x7f.1", "legacy form"), ("017.0.0.1", "legacy form"),
    ("10.0.0.300", "legacy form"), ("host.123", "legacy form"),
    ("::ffff:0.0.0.0", "not the wildcard"), ("0.0.0.0", "not the wildcard"), ("::", "not the wildcard"),
    ("0.1.2.3", "not the wildcard"),
])
def test_backend_address_shorthand_and_unspecified_are_refused(address, rule):
    backends = [{"name": "a-0", "host": "a", "address": address, "port": 8000, "model": "m"}]
    with pytest.raises(ValueError, match=r"^gateway_backends\[0\]\.address: .*%s" % rule):
        gateway_settings.check_settings(variables(gateway_backends=backends))


@pytest.mark.parametrize("address, scope", [
    ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("::ffff:0.0.0.0", "unspecified"), ("0.9.9.9", "unspecified"),
    ("127.0.0.1", "loopback"), ("127.8.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"),
    ("localhost", "loopback"), ("10.0.0.1", "other"), ("fd00::1", "other"), ("gpu-a.internal", "other"),
])
def test_address_scope(address, scope):
    assert value_checks.address_scope(value_checks.address("x", address)) == scope


def test_dns_names_that_only_look_numeric_are_kept():
    for name in ("1e100.net", "gpu-0", "a1.b2.example", "localhost"):
        assert value_checks.address("x", name) == name


# --- (7) one rule for every API key ---------------------------------------------

def gateway_accepts(key):
    try:
        gateway_settings.check_settings(variables(gateway_api_key=key, gateway_backend_api_keys={"m": key}))
        return True
    except ValueError as error:
        assert key not in str(error)
        return False


def vllm_accepts(key):
    """The vllm role's check (vllm_unit.check_variables calls this rule;
    test_vllm_unit covers it there) and the deploy playbook's mapping of
    host keys to the gateway."""
    try:
        value_checks.api_key("vllm_api_key", key)
        plan = {"instances": [{"host": "a", "name": "vllm-0", "served_model_name": "m"}]}
        gateway_view.gateway_api_keys(plan, {"a": key})
        return True
    except ValueError as error:
        assert key not in str(error)
        return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.one_of(st.text(min_size=10, max_size=40), st.text("ab %$\"\\#'", min_size=14, max_size=20)))
def test_both_roles_take_the_same_keys(key):
    assert gateway_accepts(key) == vllm_accepts(key), repr(key)


@pytest.mark.parametrize("key", ["sk-short", "a" * 15, "a" * 8 + "  " + "a" * 8, " " + "a" * 16, "a" * 513,
                                 "a" * 16 + "\u00e9", "a" * 16 + "\n"])
def test_keys_both_roles_refuse(key):
    assert not gateway_accepts(key) and not vllm_accepts(key)
