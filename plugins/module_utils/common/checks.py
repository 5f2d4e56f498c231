# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Checks for values that reach a configuration file or a command line.

Every variable a role writes into a unit, an option file or the HAProxy
configuration passes one of these first. Each check takes the variable's
name and its value, returns the value in its canonical form, and raises
ValueError("NAME: RULE (got VALUE)") otherwise: the message names the
variable and the rule, and shows the value cut and escaped, so a hostile
value cannot inject lines into the error either.

Patterns match the whole value (re.fullmatch): Python's "$" also matches
before a trailing newline, which is how "api-key\\n" slipped past a "^...$"
check. No value may hold control characters. Pure functions, standard
library only.
"""

from __future__ import annotations

import ipaddress
import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HOSTNAME_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_HAPROXY_DURATION = re.compile(r"[0-9]{1,9}(?:us|ms|s|m|h|d)?")
_DURATION_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000}
_HAPROXY_MAX_MS = 2147483647
_SAFE_PATH = re.compile(r"/[A-Za-z0-9_@+=:,./-]*")
# useradd's default rule (NAME_REGEX): no leading digit or dash.
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,30}")
# Served model names as clients send them in the JSON "model" field and
# the gateway matches them: Hugging Face ids (org/name), aliases with ':'.
_SERVED_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=~-]{0,199}")

SHOW_LIMIT = 60


def show(value, limit=SHOW_LIMIT):
    """A value as it may appear in a message: repr (escapes control
    characters and newlines), cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...(%d characters)" % len(text)


# C0, DEL and C1: newlines, tabs and the bytes a terminal reads as escapes.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text):
    """TEXT as a report prints it on one line: every control character
    written as \\xNN (a host's "\\x1b[2J" cannot clear the screen or
    start a new line), the rest as it is."""
    return _UNPRINTABLE.sub(lambda m: "\\x%02x" % ord(m.group()), str(text))


def fail(name, rule, value):
    raise ValueError("%s: %s (got %s)" % (name, rule, show(value)))


def exact_names(what, variables, names):
    """A role's variables as one dict: every one of NAMES there, no other
    (the role's defaults give each a value, so a missing one is a caller's
    mistake, never a default made up here). ValueError names both lists."""
    if not isinstance(variables, dict):
        raise ValueError("%s expects a mapping of the role's variables" % what)
    missing = [key for key in names if key not in variables]
    unknown = sorted(str(key) for key in variables if key not in names)
    if missing or unknown:
        raise ValueError("%s: missing variable(s) %s; unknown variable(s) %s"
                         % (what, ", ".join(missing) or "none", ", ".join(unknown) or "none"))
    return variables


def text(name, value, pattern=None, rule=None, allow_empty=False, max_length=4096):
    """A string on one line: no control characters; with `pattern`, the
    whole string matches it (rule says in words what the pattern means)."""
    if not isinstance(value, str):
        fail(name, "must be a string", value)
    if not value and not allow_empty:
        fail(name, "must not be empty", value)
    if len(value) > max_length:
        fail(name, "must be at most %d characters" % max_length, value)
    if _CONTROL.search(value):
        fail(name, "must not contain control characters (newlines, tabs, escapes)", value)
    if pattern is not None and value and not re.fullmatch(pattern, value):
        fail(name, rule or "must match %s" % pattern, value)
    return value


def integer(name, value, minimum=None, maximum=None):
    """An int (a string of digits from the command line counts); never a bool."""
    if isinstance(value, bool):
        fail(name, "must be an integer, not a boolean", value)
    if isinstance(value, str):
        # digits only: int() would forgive a sign, spaces or a newline
        value = int(text(name, value, r"[0-9]{1,18}", "must be an integer"))
    if not isinstance(value, int):
        fail(name, "must be an integer", value)
    if minimum is not None and value < minimum:
        fail(name, "must be at least %d" % minimum, value)
    if maximum is not None and value > maximum:
        fail(name, "must be at most %d" % maximum, value)
    return int(value)


def port(name, value, allow_zero=False):
    """A TCP port: 1-65535 (0 too when it means off)."""
    return integer(name, value, 0 if allow_zero else 1, 65535)


def batch_size(name, value):
    """A play's batch size (`serial`): a positive integer or a percentage
    1%-100%. Ansible reads 0, -1 and a percentage under 1% as the whole
    play and anything else as an unexpected exception; both are refused."""
    rule = "must be a positive integer or a percentage 1%-100%"
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,3}%", value):
        if not 1 <= int(value[:-1]) <= 100:
            fail(name, rule, value)
        return value
    try:
        return integer(name, value, 1, 10 ** 6)
    except ValueError:
        fail(name, rule, value)


def boolean(name, value):
    """A real boolean, or the YAML/INI words Ansible accepts for one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.lower()
        if word in ("yes", "true", "on", "1"):
            return True
        if word in ("no", "false", "off", "0"):
            return False
    fail(name, "must be a boolean (true or false)", value)


def choice(name, value, choices):
    if not isinstance(value, str) or value not in choices:
        fail(name, "must be one of %s" % ", ".join(choices), value)
    return value


def ip_address(name, value):
    """An IPv4 or IPv6 address, in its compressed canonical form."""
    text(name, value)
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        fail(name, "must be an IPv4 or IPv6 address", value)


# What inet_aton() (and so getaddrinfo(), which HAProxy and vLLM call)
# reads as an IPv4 address although it is no dotted quad: "0", "127.1",
# "0x7f.1", "017.0.0.1" (octal). A name made only of such parts is an
# address in disguise, never a DNS name.
_LEGACY_IPV4_PART = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")


def address(name, value):
    """An IP address or a DNS host name (RFC 1123 labels, at most 253
    characters). Names that are IPv4 addresses in a legacy form (a number,
    shorthand "127.1", hex or octal parts) or end in an all-numeric label
    are refused: the resolver would read them as an address."""
    text(name, value)
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    labels = value[:-1].split(".") if value.endswith(".") else value.split(".")
    if len(value) > 253 or not all(_HOSTNAME_LABEL.fullmatch(label) for label in labels):
        fail(name, "must be an IPv4 or IPv6 address or a DNS host name", value)
    if all(_LEGACY_IPV4_PART.fullmatch(label) for label in labels) or labels[-1].isdigit():
        fail(name, "must be an IPv4 address as four decimal numbers (a.b.c.d), an IPv6 address or a DNS "
                   "host name; a name of numbers is read as an address in a legacy form", value)
    return value


def address_scope(value):
    """Where an address leads, the collection's one answer: 'unspecified'
    (0.0.0.0/8, ::, and their IPv4-mapped forms such as ::ffff:0.0.0.0: a
    listen wildcard, no place to connect to), 'loopback' (127.0.0.0/8, ::1,
    ::ffff:127.0.0.0/104, 'localhost' and every name under it such as
    gpu.localhost, in any case, with or without the final dot: RFC 6761
    keeps them on this host) or 'other' (any other address or DNS name).
    `value` is an address as address() returns it."""
    name = value.lower()[:-1] if value.endswith(".") else value.lower()
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return "other"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified or (ip.version == 4 and ip in _THIS_NETWORK):
        return "unspecified"
    return "loopback" if ip.is_loopback else "other"


_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def connect_address(name, value, client):
    """An address CLIENT ("the gateway", "Prometheus") connects to:
    address(), never an unspecified one (0.0.0.0/8, ::, ::ffff:0.0.0.0),
    which is a listen wildcard and no place to connect to."""
    value_address = address(name, value)
    if address_scope(value_address) == "unspecified":
        fail(name, "must be an address %s can connect to, not the wildcard %s" % (client, value_address), value)
    return value_address


def absolute_path(name, value, allow_empty=False):
    """An absolute path of characters that need no quoting in a unit file
    or a configuration ([A-Za-z0-9_@+=:,./-]), without '..' parts."""
    if allow_empty and value == "":
        return value
    text(name, value, _SAFE_PATH, "must be an absolute path of [A-Za-z0-9_@+=:,./-]")
    if ".." in value.split("/"):
        fail(name, "must not contain '..'", value)
    return value


def haproxy_duration(name, value):
    """An HAProxy time: digits with an optional unit (us, ms, s, m, h, d)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    text(name, value, _HAPROXY_DURATION,
         "must be an HAProxy duration: digits and an optional unit us, ms, s, m, h or d")
    digits = re.match(r"[0-9]+", value).group(0)
    unit = value[len(digits):] or "ms"
    if int(digits) * _DURATION_MS[unit] > _HAPROXY_MAX_MS:
        fail(name, "must be at most 24d (HAProxy's limit is 2147483647 ms)", value)
    return value


def url_path(name, value, allow_empty=False):
    """An HTTP path: starts with '/', printable ASCII without spaces,
    quotes (HAProxy reads ' as quoting), backslashes or '#'."""
    return text(name, value, r"/[A-Za-z0-9._~!$&()*+,;=:@%/?-]*",
                "must be an HTTP path starting with '/' (no spaces, quotes or '#')",
                allow_empty=allow_empty)


def account(name, value):
    """A Unix user or group name as useradd accepts it."""
    return text(name, value, _ACCOUNT,
                "must be a user or group name: lower case letters, digits, _ and -, "
                "not starting with a digit or -, at most 31 characters")


def served_model_name(name, value):
    """A served model name (vLLM's --served-model-name, the OpenAI "model"
    field): 1-200 of letters, digits and . _ : / @ + = ~ -, starting with a
    letter or digit. No spaces, quotes, backslashes, '$' or '#', so it is
    one word in a command line and in HAProxy's configuration."""
    return text(name, value, _SERVED_MODEL_NAME,
                "must be a served model name: 1-200 letters, digits and . _ : / @ + = ~ -, "
                "starting with a letter or digit (no spaces, quotes or backslashes)", max_length=200)


def is_loopback(value):
    """True for a loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z) or
    'localhost' (address_scope)."""
    return address_scope(value) == "loopback"


def secret(name, value, minimum=1, maximum=512):
    """A secret such as an API key: `minimum`-`maximum` printable ASCII
    characters (spaces inside only; quotes and backslashes are for the
    writer to quote). The message never shows the value, only the variable
    and the rule."""
    if (not isinstance(value, str) or not minimum <= len(value) <= maximum
            or not re.fullmatch(r"[!-~](?:[ -~]*[!-~])?", value)):
        raise ValueError("%s: must be %d-%d printable ASCII characters, not starting or ending with a space "
                         "(value hidden)" % (name, minimum, maximum))
    return value


API_KEY_MINIMUM = 16
API_KEY_MAXIMUM = 512
# Visible ASCII; single spaces inside only (HAProxy's log-format, which
# places a key in a header, merges a run of spaces into one).
_API_KEY = re.compile(r"[!-~]+(?: [!-~]+)*")
API_KEY_RULE = ("must be %d-%d printable ASCII characters, not starting or ending with a space, with no two "
                "spaces in a row (value hidden)" % (API_KEY_MINIMUM, API_KEY_MAXIMUM))


def api_key(name, value):
    """An API key: the one rule for vllm_api_key, gateway_api_key and the
    keys the gateway sends to instances (gateway_backend_api_keys), so a
    key one role takes the other places exactly. The message never shows
    the value."""
    if (not isinstance(value, str) or not API_KEY_MINIMUM <= len(value) <= API_KEY_MAXIMUM
            or not _API_KEY.fullmatch(value)):
        raise ValueError("%s: %s" % (name, API_KEY_RULE))
    return value


def command_word(name, value):
    """A value that lands as one word on a command line: it must not start
    with '-', or the program would read it as an option."""
    text(name, value)
    if value.startswith("-"):
        fail(name, "must not start with '-' (it would be read as an option)", value)
    return value
