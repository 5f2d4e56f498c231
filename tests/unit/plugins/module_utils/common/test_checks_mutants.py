# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""value checks at their edges: every limit held where it moves by one, each
branch's result and message (scripts/mutation.py common/checks found these
untested)."""

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks


def test_named_limits_are_pinned():
    assert (checks.SHOW_LIMIT, checks.API_KEY_MINIMUM, checks.API_KEY_MAXIMUM) == (60, 16, 512)
    assert checks.API_KEY_RULE.startswith("must be 16-512 printable ASCII characters")
    # HAProxy's own limits: 2**31 - 1 ms is prime and nine digits of ms stay
    # below it, so no duration lands on the edge; the figures are pinned here
    assert checks._HAPROXY_MAX_MS == 2 ** 31 - 1
    assert checks._DURATION_MS == {"us": 0.001, "ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000}


def test_show_cuts_at_the_limit():
    assert checks.show("x" * 58) == repr("x" * 58)  # 60 characters with the quotes
    assert checks.show("x" * 59) == repr("x" * 59)[:60] + "...(61 characters)"
    assert checks.show("abcdef", limit=8) == "'abcdef'"
    assert checks.show("abcdefg", limit=8) == "'abcdefg...(9 characters)"


def test_fail_message_form():
    with pytest.raises(ValueError, match=r"^v: must be red \(got 'blue'\)$"):
        checks.fail("v", "must be red", "blue")


def test_text_length_limit_and_empty():
    assert checks.text("v", "a" * 4096) == "a" * 4096
    with pytest.raises(ValueError, match=r"^v: must be at most 4096 characters"):
        checks.text("v", "a" * 4097)
    assert checks.text("v", "abc", max_length=3) == "abc"
    with pytest.raises(ValueError, match=r"^v: must be at most 3 characters"):
        checks.text("v", "abcd", max_length=3)
    with pytest.raises(ValueError, match=r"^v: must not be empty \(got ''\)$"):
        checks.text("v", "")
    assert checks.text("v", "", allow_empty=True) == ""
    assert checks.text("v", "", r"[a-z]+", allow_empty=True) == ""
    with pytest.raises(ValueError, match=r"^v: must be a string \(got 5\)$"):
        checks.text("v", 5)
    with pytest.raises(ValueError, match=r"^v: must match \[a-z\]\+ \(got '1'\)$"):
        checks.text("v", "1", r"[a-z]+")


def test_integer_bounds_are_inclusive():
    assert checks.integer("n", 5, 5, 5) == 5
    assert checks.integer("n", "7") == 7 and checks.integer("n", "7").__class__ is int
    with pytest.raises(ValueError, match=r"^n: must be at least 5 \(got 4\)$"):
        checks.integer("n", 4, 5, 9)
    with pytest.raises(ValueError, match=r"^n: must be at most 9 \(got 10\)$"):
        checks.integer("n", 10, 5, 9)
    with pytest.raises(ValueError, match=r"^n: must be an integer, not a boolean"):
        checks.integer("n", False)
    with pytest.raises(ValueError, match=r"^n: must be an integer \(got 1.5\)$"):
        checks.integer("n", 1.5)
    with pytest.raises(ValueError, match=r"^n: must be an integer \(got '-1'\)$"):
        checks.integer("n", "-1")
    assert checks.integer("n", "9" * 18) == int("9" * 18)
    with pytest.raises(ValueError):
        checks.integer("n", "9" * 19)


def test_port_range_edges():
    assert checks.port("p", 1) == 1 and checks.port("p", 65535) == 65535
    assert checks.port("p", 0, allow_zero=True) == 0
    for value in (0, 65536):
        with pytest.raises(ValueError, match="^p: "):
            checks.port("p", value)
    with pytest.raises(ValueError, match="^p: must be at most 65535"):
        checks.port("p", 65536, allow_zero=True)


@pytest.mark.parametrize("value", ["1%", "100%", "50%", 1, "1", 10 ** 6, "1000000"])
def test_batch_size_accepts(value):
    assert checks.batch_size("serial", value) == (value if isinstance(value, str) and "%" in value else int(value))


@pytest.mark.parametrize("value", ["0%", "101%", 0, -1, 10 ** 6 + 1, "1000001", "1.5%", True, None])
def test_batch_size_refuses(value):
    with pytest.raises(ValueError, match=r"^serial: must be a positive integer or a percentage 1%-100% \(got "):
        checks.batch_size("serial", value)


@pytest.mark.parametrize("value, expected", [
    (True, True), (False, False), ("yes", True), ("TRUE", True), ("on", True), ("1", True),
    ("No", False), ("false", False), ("off", False), ("0", False)])
def test_boolean_words(value, expected):
    assert checks.boolean("b", value) is expected


@pytest.mark.parametrize("value", ["y", "", 1, 0, None, "truee"])
def test_boolean_refuses(value):
    with pytest.raises(ValueError, match=r"^b: must be a boolean \(true or false\)"):
        checks.boolean("b", value)


def test_choice():
    assert checks.choice("c", "b", ("a", "b")) == "b"
    for value in ("x", 1, None):
        with pytest.raises(ValueError, match=r"^c: must be one of a, b \(got "):
            checks.choice("c", value, ("a", "b"))


def test_ip_address_canonical_and_refused():
    assert checks.ip_address("i", "fd00:0::1") == "fd00::1"
    with pytest.raises(ValueError, match=r"^i: must be an IPv4 or IPv6 address \(got 'host'\)$"):
        checks.ip_address("i", "host")


def test_address_name_length_limit():
    name = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253 characters
    assert len(name) == 253 and checks.address("a", name) == name
    short = name[:-1]
    assert checks.address("a", short + ".") == short + "."  # the trailing dot counts
    with pytest.raises(ValueError, match=r"^a: must be an IPv4 or IPv6 address or a DNS host name"):
        checks.address("a", name + "b")
    assert checks.address("a", "x" * 63) == "x" * 63
    with pytest.raises(ValueError):
        checks.address("a", "x" * 64)


@pytest.mark.parametrize("value", ["0", "127.1", "0x7f.1", "017.0.0.1", "host.123", "1.2.3.4."])
def test_address_refuses_legacy_ipv4_forms(value):
    with pytest.raises(ValueError, match=r"^a: must be an IPv4 address as four decimal numbers"):
        checks.address("a", value)


@pytest.mark.parametrize("value", ["host.example.", "123.example", "a1", "0x7f.host"])
def test_address_takes_names_with_numbers(value):
    assert checks.address("a", value) == value


@pytest.mark.parametrize("value, scope", [
    ("localhost", "loopback"), ("localhost.", "loopback"), ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"),
    ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"), ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"),
    ("::", "unspecified"), ("::ffff:0.0.0.0", "unspecified"), ("10.0.0.1", "other"), ("1.0.0.0", "other"),
    ("fd00::1", "other"), ("host.example", "other"), ("::ffff:10.0.0.1", "other"),
    # The cases four answers once disagreed on: one answer now (address_scope).
    ("0.0.0.5", "unspecified"), ("::ffff:0.0.0.5", "unspecified"), ("gpu.localhost", "loopback"),
    ("gpu.localhost.", "loopback"), ("LocalHost", "loopback"), ("GPU.LOCALHOST", "loopback"),
    ("localhost.example", "other"), ("notlocalhost", "other"), ("gpu-localhost", "other"), ("1.0.0.1", "other"),
    ("::0.0.0.1", "loopback"), ("::2", "other")])
def test_address_scope(value, scope):
    assert checks.address_scope(value) == scope
    assert checks.is_loopback(value) is (scope == "loopback")


def test_absolute_path():
    assert checks.absolute_path("p", "", allow_empty=True) == ""
    assert checks.absolute_path("p", "/a/b..c/.d") == "/a/b..c/.d"
    with pytest.raises(ValueError, match=r"^p: must not be empty"):
        checks.absolute_path("p", "")
    with pytest.raises(ValueError, match=r"^p: must not contain '\.\.'"):
        checks.absolute_path("p", "/a/..")


@pytest.mark.parametrize("value", ["999999999", "999999999ms", "2147483s", "35791m", "596h", "24d", 0, "0us"])
def test_haproxy_duration_at_the_limit(value):
    assert checks.haproxy_duration("t", value) == str(value)


@pytest.mark.parametrize("value", ["2147484s", "35792m", "597h", "25d", "999999999d"])
def test_haproxy_duration_over_the_limit(value):
    with pytest.raises(ValueError, match=r"^t: must be at most 24d \(HAProxy's limit is 2147483647 ms\)"):
        checks.haproxy_duration("t", value)


def test_url_path_allow_empty():
    assert checks.url_path("u", "", allow_empty=True) == ""
    assert checks.url_path("u", "/v1/models?x=%20") == "/v1/models?x=%20"
    with pytest.raises(ValueError, match="^u: must not be empty"):
        checks.url_path("u", "")


def test_account_length_limit():
    assert checks.account("u", "a" * 31) == "a" * 31
    with pytest.raises(ValueError, match="^u: must be a user or group name"):
        checks.account("u", "a" * 32)


def test_served_model_name_length_limit():
    assert checks.served_model_name("m", "m" * 200) == "m" * 200
    with pytest.raises(ValueError, match="^m: must be at most 200 characters"):
        checks.served_model_name("m", "m" * 201)


def test_secret_bounds_and_message_hides_the_value():
    assert checks.secret("s", "k") == "k"
    assert checks.secret("s", "k" * 512) == "k" * 512
    assert checks.secret("s", "abc", minimum=3, maximum=3) == "abc"
    for value in ("", "k" * 513, " k", "k ", "k\n", 5):
        with pytest.raises(ValueError, match=r"^s: must be 1-512 printable ASCII characters, .*\(value hidden\)$"):
            checks.secret("s", value)
    for value in ("ab", "abcd"):
        with pytest.raises(ValueError, match=r"^s: must be 3-3 "):
            checks.secret("s", value, minimum=3, maximum=3)


def test_api_key_bounds():
    assert checks.api_key("k", "k" * 16) == "k" * 16
    assert checks.api_key("k", "k" * 512) == "k" * 512
    assert checks.api_key("k", "key with spaces!") == "key with spaces!"
    for value in ("k" * 15, "k" * 513, "two  spaces here", " leading-space-key", 16):
        with pytest.raises(ValueError, match=r"^k: must be 16-512 printable ASCII characters"):
            checks.api_key("k", value)


def test_command_word():
    assert checks.command_word("w", "model-a") == "model-a"
    with pytest.raises(ValueError, match="^w: must not be empty"):
        checks.command_word("w", "")


def test_port_with_zero_still_refuses_below_zero():
    with pytest.raises(ValueError, match=r"^p: must be at least 0 \(got -1\)$"):
        checks.port("p", -1, allow_zero=True)


def test_haproxy_duration_takes_ints_but_not_booleans():
    assert checks.haproxy_duration("t", 5) == "5"
    with pytest.raises(ValueError, match=r"^t: must be a string \(got True\)$"):
        checks.haproxy_duration("t", True)
