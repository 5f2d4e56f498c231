# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""common/checks: each check accepts the good form and names variable and rule otherwise."""

import re

import pytest
from hypothesis import given, strategies as st

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks


@pytest.mark.parametrize("value", ["api-key\n", "a\nb", "x\r", "tab\there", "\x00", "esc\x1b[0m"])
def test_text_rejects_control_characters_anywhere(value):
    with pytest.raises(ValueError, match=r"^var: must not contain control characters"):
        checks.text("var", value, pattern=r"[a-z-]+.*")


def test_text_pattern_is_whole_match_not_dollar():
    # "$" in Python also matches before a trailing newline; fullmatch does not
    with pytest.raises(ValueError, match="must be lower case"):
        checks.text("var", "abc def", r"[a-z]+", "must be lower case")
    assert checks.text("var", "abc", r"[a-z]+") == "abc"


def test_error_shows_value_cut_and_escaped():
    with pytest.raises(ValueError) as info:
        checks.text("var", "x" * 500 + "\nroot:x:0:0")
    message = str(info.value)
    assert "\n" not in message and "root:x" not in message and message.endswith("characters))")


@pytest.mark.parametrize("value,expected", [("10.0.0.1", "10.0.0.1"), ("::1", "::1"),
                                            ("fd00:0::12", "fd00::12"), ("gpu-a.example.com", "gpu-a.example.com")])
def test_address_accepts_addresses_and_host_names(value, expected):
    assert checks.address("a", value) == expected


@pytest.mark.parametrize("value", ["10.0.0.1 backup", "a b", "-x", "x..y", "10.0.0.1:80", "", "[::1]"])
def test_address_rejects_anything_else(value):
    with pytest.raises(ValueError, match="^a: "):
        checks.address("a", value)


@pytest.mark.parametrize("value,expected", [("10.0.0.1", "10.0.0.1"), ("127.0.0.1", "127.0.0.1"), ("fd00:0::12", "fd00::12"),
                                            ("gpu-a", "gpu-a"), ("1.0.0.0", "1.0.0.0")])
def test_connect_address_takes_any_place_to_connect_to(value, expected):
    assert checks.connect_address("a", value, "Prometheus") == expected


@pytest.mark.parametrize("value,shown", [("0.0.0.0", "0.0.0.0"), ("::", "::"), ("0.1.2.3", "0.1.2.3"),
                                         ("::ffff:0.0.0.0", "::ffff:0:0")])
def test_connect_address_refuses_a_wildcard_naming_the_client(value, shown):
    with pytest.raises(ValueError, match=r"^a: must be an address Prometheus can connect to, not the wildcard %s \(got "
                       % re.escape(shown)):
        checks.connect_address("a", value, "Prometheus")


@pytest.mark.parametrize("value", ["2s", "500ms", "10m", 30, "1d"])
def test_haproxy_duration_accepts(value):
    assert checks.haproxy_duration("t", value) == str(value)


@pytest.mark.parametrize("value", ["2s backup ssl verify none", "2 s", "-1", "2sec", "", True, "25d", "2147483648"])
def test_haproxy_duration_rejects(value):
    with pytest.raises(ValueError, match="^t: "):
        checks.haproxy_duration("t", value)


@pytest.mark.parametrize("value", ["relative/path", "/a/../etc", "/a b", "/a\n", "/a$b"])
def test_absolute_path_rejects(value):
    with pytest.raises(ValueError, match="^p: "):
        checks.absolute_path("p", value)


@pytest.mark.parametrize("value", [True, "1.5", -1, 70000, None, "80\n", " 80"])
def test_port_rejects(value):
    with pytest.raises(ValueError, match="^port: "):
        checks.port("port", value)


def test_port_accepts_digit_strings():
    assert checks.port("port", "8080") == 8080


@pytest.mark.parametrize("value", ["--trust-remote-code", "-m"])
def test_command_word_rejects_leading_dash(value):
    with pytest.raises(ValueError, match="would be read as an option"):
        checks.command_word("vllm_model", value)


@pytest.mark.parametrize("value", ["root\n", "0day", "-x", "a b", "Ünicode"])
def test_account_rejects(value):
    with pytest.raises(ValueError, match="^vllm_user: "):
        checks.account("vllm_user", value)


@given(st.text())
def test_text_never_passes_control_characters(value):
    try:
        checks.text("v", value)
    except ValueError as exc:
        assert str(exc).startswith("v: ") and "\n" not in str(exc)
    else:
        assert not any(ord(c) < 32 or ord(c) == 127 for c in value) and value


def test_url_path_refuses_quotes():
    with pytest.raises(ValueError, match="^u: must be an HTTP path"):
        checks.url_path("u", "/health'x")


def test_printable_escapes_every_control_character_and_nothing_else():
    assert checks.printable("a\x00\x1f \x7e\x7f\x80\x9f\xa0é\u202e\\x") == "a\\x00\\x1f \x7e\\x7f\\x80\\x9f\xa0é\u202e\\x"
    assert checks.printable("gpu-a: \x1b[2J\nroot") == "gpu-a: \\x1b[2J\\x0aroot"
    assert checks.printable(7) == "7"
