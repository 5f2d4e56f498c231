# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The gateway's settings at their edges: every named limit held where it
moves by one, derived strings exact (scripts/mutation.py deploy/gateway/settings
found these untested)."""

import hashlib

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures.gateway_inputs import variables
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gs

KEY = "k3y-0f-the-gateway"


def check(**changes):
    return gs.check_settings(variables(**changes))


def test_named_limits_are_pinned():
    assert (gs.BACKEND_NAME_LIMIT, gs.SECRET_FRAGMENT, gs.BACKEND_PREFIX) == (64, 4, "model-")


# (variable, lowest, highest): both taken, one beyond each refused
BOUNDS = [
    ("gateway_buffer_size", 16384, 16777216),
    ("gateway_check_fall", 1, 1000),
    ("gateway_check_rise", 1, 1000),
    ("gateway_retries", 0, 100),
    ("gateway_maxconn", 1, 10000000),
    ("gateway_server_maxconn", 0, 10000000),
    ("gateway_listen_port", 1, 65535),
]


@pytest.mark.parametrize("variable, lowest, highest", BOUNDS)
def test_integer_settings_take_their_bounds(variable, lowest, highest):
    key = variable[len("gateway_"):]
    assert check(**{variable: lowest})[key] == lowest
    assert check(**{variable: highest})[key] == highest


@pytest.mark.parametrize("variable, lowest, highest", BOUNDS)
def test_integer_settings_refuse_one_beyond(variable, lowest, highest):
    with pytest.raises(ValueError, match=r"^%s: must be at least %d \(got %d\)$" % (variable, lowest, lowest - 1)):
        check(**{variable: lowest - 1})
    with pytest.raises(ValueError, match=r"^%s: must be at most %d \(got %d\)$" % (variable, highest, highest + 1)):
        check(**{variable: highest + 1})


def test_stats_port_zero_is_off_and_65535_the_top():
    assert check(gateway_stats_port=0)["stats_port"] == 0
    assert check(gateway_stats_port=65535)["stats_socket"] == "127.0.0.1:65535"
    with pytest.raises(ValueError, match=r"^gateway_stats_port: must be at most 65535"):
        check(gateway_stats_port=65536)
    with pytest.raises(ValueError, match=r"^gateway_stats_port: must differ from gateway_listen_port"):
        check(gateway_stats_port=8404, gateway_listen_port=8404)


def test_backend_name_fits_exactly_at_the_limit():
    fits = "m" * (64 - len("model-"))
    assert gs.backend_name(fits) == "model-" + fits
    longer = fits + "x"
    digest = hashlib.sha256(longer.encode()).hexdigest()[:10]
    assert gs.backend_name(longer) == ("model-" + longer)[:53] + "-" + digest
    assert len(gs.backend_name(longer)) == 64
    assert gs.backend_name("a/b c") == "model-a_b_c"
    taken = gs.backend_name("a/b", taken={"model-a_b"})
    assert taken == "model-a_b-" + hashlib.sha256(b"a/b").hexdigest()[:10]


def test_socket_brackets_ipv6_only():
    assert gs.socket("10.0.0.1", 80) == "10.0.0.1:80"
    assert gs.socket("::1", 80) == "[::1]:80"


@pytest.mark.parametrize("value", ["0", "0s", "0ms", "00"])
def test_duration_zero_is_refused(value):
    with pytest.raises(ValueError, match=r"^gateway_check_interval: must be above 0"):
        check(gateway_check_interval=value)


def test_duration_one_is_taken():
    assert check(gateway_check_interval="1")["check_interval"] == "1"
    assert check(gateway_timeout_queue="1us")["timeout_queue"] == "1us"


@pytest.mark.parametrize("value, canonical", [
    ("", ""), ("/dev/log", "/dev/log"), ("10.0.0.1", "10.0.0.1"), ("10.0.0.1:514", "10.0.0.1:514"),
    ("logs.example:1", "logs.example:1"), ("[fd00:0::1]", "[fd00::1]"), ("[::1]:65535", "[::1]:65535")])
def test_log_target_forms(value, canonical):
    assert gs.log_target("t", value) == canonical


@pytest.mark.parametrize("value, message", [
    ("[::1", r"^t: must be an absolute socket path or ADDRESS\[:PORT\]"),
    ("[::1]514", r"^t: must be an absolute socket path"),
    ("[host]:514", r"^t: must be an absolute socket path"),
    ("10.0.0.1:0", r"^t: must be an absolute socket path or ADDRESS\[:PORT\] \(IPv4, DNS name or \[IPv6\]\) "
                   r"with a port 1-65535"),
    ("10.0.0.1:65536", r"with a port 1-65535"),
    ("[::1]:x", r"with a port 1-65535"),
    ("bad host", r"^t: must be an absolute socket path"),
    ("/a/../b", r"^t: must not contain"),
])
def test_log_target_refuses(value, message):
    with pytest.raises(ValueError, match=message):
        gs.log_target("t", value)


def test_backend_address_refuses_the_wildcard():
    assert gs.backend_address("b", "host.example") == "host.example"
    for value in ("0.0.0.0", "::", "::ffff:0.0.0.0"):
        with pytest.raises(ValueError, match=r"^b: must be an address the gateway can connect to, not the wildcard"):
            gs.backend_address("b", value)


def test_redact_lines_uses_fragments_of_four():
    key = "abcdefgh"
    lines = ["has abc only", "has bcde", "has efgh", "clean", 7]
    assert gs.redact_lines(lines, [key, None, ""]) == [
        "has abc only", "(a line that mentions an API key, withheld)",
        "(a line that mentions an API key, withheld)", "clean", "7"]
    # a key shorter than a fragment is withheld whole
    assert gs.redact_lines(["x abc y", "x ab y"], ["abc"]) == [
        "(a line that mentions an API key, withheld)", "x ab y"]
    assert gs.redact_lines(["the end: fgh"], ["abcdefgh"]) == ["the end: fgh"]
    assert gs.redact_lines(["abcd"], ["abcd"]) == ["(a line that mentions an API key, withheld)"]


def test_secret_forms_and_quoting():
    assert gs.secret_forms('a%"$\\') == sorted({'a%"$\\', 'a%%"$\\', 'a%%\\"\\$\\\\'})
    assert gs.quoted('x"y') == '"x\\"y"'
    assert gs.header_value("Bearer 5%") == '"Bearer 5%%"'


def test_backend_api_keys_forms():
    found = [{"model": "m", "api_key": ""}]
    # No invented default: roles/gateway/defaults/main.yml gives {}, so null or '' is refused.
    for missing in (None, ""):
        with pytest.raises(ValueError, match=r"^gateway_backend_api_keys: must be a mapping .*\(value hidden\)$"):
            gs.backend_api_keys(missing, found)
    gs.backend_api_keys({}, found)
    gs.backend_api_keys({"m": None}, found)
    assert found == [{"model": "m", "api_key": ""}]
    gs.backend_api_keys({"m": "k" * 16}, found)
    assert found[0]["api_key"] == "k" * 16 and found[0]["api_key_header"] == '"Bearer %s"' % ("k" * 16)
    with pytest.raises(ValueError, match=r"^gateway_backend_api_keys: must be a mapping .*\(value hidden\)$"):
        gs.backend_api_keys(["k"], found)
    with pytest.raises(ValueError, match=r"^gateway_backend_api_keys: names a model no backend serves \(models: m\)"):
        gs.backend_api_keys({"other": "k" * 16}, found)


def test_gateway_key_digest_and_loopback_without_key():
    assert check(gateway_api_key="")["api_key_digest"] == ""
    assert check(gateway_api_key=None, gateway_listen_address="::1")["api_key_digest"] == ""
    digest = hashlib.sha256(("Bearer " + KEY).encode()).hexdigest().upper()
    assert check(gateway_api_key=KEY, gateway_listen_address="10.0.0.9")["api_key_digest"] == digest
    assert check(gateway_api_key="", gateway_listen_address="10.0.0.9",
                 gateway_allow_unauthenticated=True)["api_key_digest"] == ""


def test_holds_secrets_only_with_a_backend_key():
    assert check()["holds_secrets"] is False
    assert check(gateway_backend_api_keys={"m": "k" * 16})["holds_secrets"] is True


def test_stats_beyond_loopback_needs_the_gateway_open():
    with pytest.raises(ValueError, match=r"^gateway_stats_address: must be a loopback address"):
        check(gateway_stats_port=8404, gateway_stats_address="10.0.0.9", gateway_api_key=KEY)
    assert check(gateway_stats_port=0, gateway_stats_address="10.0.0.9")["stats_port"] == 0
    assert check(gateway_stats_port=8404, gateway_stats_address="10.0.0.9", gateway_api_key="",
                 gateway_allow_unauthenticated=True)["stats_port"] == 8404


def test_derived_strings():
    settings = check(gateway_config_path="/etc/haproxy/haproxy.cfg", gateway_listen_port=9000,
                     gateway_user="", gateway_group="", gateway_admin_socket_group="")
    assert settings["body_reader"] == "/etc/haproxy/gpufleet-request-model.lua"
    assert settings["listen_socket"] == "127.0.0.1:9000"
    assert settings["model_header"] == "X-Model"
    assert (settings["user"], settings["group"], settings["admin_socket_group"]) == ("", "", "")
    assert check(gateway_admin_socket_group="haproxy")["admin_socket_group"] == "haproxy"
    assert settings["models_list"] == ('{"object":"list","data":[{"id":"m","object":"model","created":0,'
                                       '"owned_by":"gpufleet","instances_up":%[nbsrv(model-m)]}]}')
    assert (settings["max_rewrite"], settings["body_limit"]) == (1024, settings["buffer_size"] - 1024)


@pytest.mark.parametrize("value, expected", [
    ("auto", "auto"), ("AUTO", "auto"), (True, "true"), (False, "false"), ("yes", "true"), ("No", "false")])
def test_manage_service_forms(value, expected):
    assert check(gateway_manage_service=value)["manage_service"] == expected


def test_manage_service_refuses():
    with pytest.raises(ValueError, match=r"^gateway_manage_service: must be one of auto, true"):
        check(gateway_manage_service="maybe")


def test_backends_refuse_with_exact_messages():
    with pytest.raises(ValueError, match=r"^gateway_backends: must hold at least one vLLM backend"):
        check(gateway_backends=[])
    with pytest.raises(ValueError, match=r"^gateway_backends: must be a list of "):
        check(gateway_backends={"name": "a"})
    entry = {"name": "a-0", "address": "10.0.0.1", "port": 8000, "model": "m"}
    with pytest.raises(ValueError, match=r"^gateway_backends\[1\]\.name: must be unique; gateway_backends\[0\] has"):
        check(gateway_backends=[entry, dict(entry, port=8001)])
    with pytest.raises(ValueError, match=r"^gateway_backends\[1\]: address and port must be unique; "
                                         r"gateway_backends\[0\] has the same 10\.0\.0\.1:8000"):
        check(gateway_backends=[entry, dict(entry, name="a-1")])
    with pytest.raises(ValueError, match=r"^gateway_backends\[0\]: missing required field port"):
        check(gateway_backends=[{"name": "a-0", "address": "10.0.0.1", "model": "m"}])
    assert check(gateway_backends=[dict(entry, backend="")])["backends"][0]["backend"] == "model-m"
    assert check(gateway_backends=[dict(entry, backend=None)])["backends"][0]["host"] == ""


def test_a_model_keeps_one_backend_name():
    first = {"name": "a-0", "address": "10.0.0.1", "port": 8000, "model": "m"}
    second = dict(first, name="a-1", port=8001, backend="model-x")
    with pytest.raises(ValueError, match=r"^gateway_backends\[1\]\.backend: must be model-m, the backend of model m"):
        check(gateway_backends=[first, second])


def test_a_missing_variable_alone_is_refused():
    found = variables()
    del found["gateway_retries"]
    with pytest.raises(ValueError, match=r"^gateway_settings: missing variable\(s\) gateway_retries; "
                                         r"unknown variable\(s\) none$"):
        gs.check_settings(found)
    with pytest.raises(ValueError, match=r"^gateway_settings: missing variable\(s\) none; unknown variable\(s\) x$"):
        gs.check_settings(variables(x=1))
