# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Check every variable of role gpufleet.numa.gateway before anything is written.

check_settings() takes the role's variables as one dict (gateway_* name ->
value) and returns the values the HAProxy template places, each checked as
a whole (value_checks: fullmatch, no control characters anywhere) and in
its canonical form, plus the few strings derived from them (address:port
sockets). It raises ValueError("VARIABLE: RULE (got VALUE)") for the first
value that breaks a rule, so a value can never add a line, a keyword or a
server option to the configuration. Pure function, standard library only.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.gpufleet.numa.plugins.module_utils import value_checks as vc

BALANCE = ("leastconn", "roundrobin", "static-rr", "first", "source", "random")
MANAGE_SERVICE = ("auto", "true", "false", "yes", "no")
# HAProxy server names, inventory host names (written as a comment).
SERVER_NAME = r"[A-Za-z0-9_.:-]{1,64}"
SERVER_NAME_RULE = "must be 1-64 letters, digits, '-', '_', '.' or ':'"
INVENTORY_HOST = r"[A-Za-z0-9_.:@-]{1,253}"
INVENTORY_HOST_RULE = "must be an inventory host name of letters, digits, '-', '_', '.', ':' or '@'"
PACKAGE = r"[A-Za-z0-9][A-Za-z0-9+._-]{0,127}"
SERVICE = r"[A-Za-z0-9][A-Za-z0-9@_.:-]{0,127}"
BACKEND_KEYS = ("name", "host", "address", "port")

# Every variable the role takes; each must be present in the dict.
VARIABLES = (
    "gateway_backends", "gateway_listen_address", "gateway_listen_port", "gateway_balance",
    "gateway_check_path", "gateway_check_interval", "gateway_check_fall", "gateway_check_rise",
    "gateway_timeout_connect", "gateway_timeout_client", "gateway_timeout_server",
    "gateway_timeout_tunnel", "gateway_timeout_http_request", "gateway_timeout_http_keep_alive",
    "gateway_timeout_queue", "gateway_retries", "gateway_maxconn", "gateway_server_maxconn",
    "gateway_monitor_uri", "gateway_stats_address", "gateway_stats_port", "gateway_stats_uri",
    "gateway_log_target", "gateway_user", "gateway_group", "gateway_chroot",
    "gateway_admin_socket", "gateway_admin_socket_group", "gateway_config_path",
    "gateway_install", "gateway_package", "gateway_haproxy", "gateway_manage_service",
    "gateway_service_name",
)
# HAProxy keeps times in milliseconds in a signed 32-bit int.
MAX_DURATION_MS = 2147483647
DURATION_UNITS_US = (("us", 1), ("ms", 1000), ("s", 1000000), ("m", 60000000), ("h", 3600000000),
                     ("d", 86400000000), ("", 1000))
TIMEOUTS = ("connect", "client", "server", "tunnel", "http_request", "http_keep_alive", "queue")


def integer(name, value, minimum=None, maximum=None):
    """value_checks.integer, and a string must be digits only: no sign, no
    space or newline around them (int() would forgive those)."""
    if isinstance(value, str):
        vc.text(name, value, r"[0-9]{1,18}", "must be an integer")
    return vc.integer(name, value, minimum, maximum)


def port(name, value, allow_zero=False):
    return integer(name, value, 0 if allow_zero else 1, 65535)


def socket(address, number):
    """address:port as HAProxy reads it: an IPv6 address in brackets."""
    return ("[%s]:%d" if ":" in address else "%s:%d") % (address, number)


def duration(name, value):
    """An HAProxy duration (value_checks.haproxy_duration) above zero (zero
    means no timeout, or a check interval HAProxy refuses) and at most
    2147483647ms (about 24.8 days; HAProxy refuses longer times)."""
    value = vc.haproxy_duration(name, value)
    for unit, microseconds in DURATION_UNITS_US:
        if value.endswith(unit) and value[:len(value) - len(unit)].isdigit():
            total = int(value[:len(value) - len(unit)]) * microseconds
            break
    if total == 0 or total > MAX_DURATION_MS * 1000:
        vc.fail(name, "must be above 0 and at most 2147483647ms (24d)", value)
    return value


def http_path(name, value, allow_empty=False):
    """An HTTP path (value_checks.url_path) that HAProxy reads as one word:
    its parser removes single quotes, so none may appear."""
    vc.url_path(name, value, allow_empty=allow_empty)
    if "'" in value:
        vc.fail(name, "must not contain a single quote (HAProxy reads it as quoting)", value)
    return value


def listen_address(name, value):
    """An IP address to bind or connect to, canonical (IPv6 compressed)."""
    return vc.ip_address(name, value)


def log_target(name, value):
    """'' (no logging), an absolute socket path, or ADDRESS[:PORT] where
    ADDRESS is IPv4, a DNS name or [IPv6]."""
    if value == "":
        return value
    vc.text(name, value)
    if value.startswith("/"):
        return vc.absolute_path(name, value)
    rule = "must be an absolute socket path or ADDRESS[:PORT] (IPv4, DNS name or [IPv6])"
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            vc.fail(name, rule, value)
        try:
            host = str(ipaddress.IPv6Address(host))
        except ValueError:
            vc.fail(name, rule, value)
        host = "[%s]" % host
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text = value.partition(":")
        if not colon:
            port_text = None
        try:
            host = vc.address(name, host)
        except ValueError:
            vc.fail(name, rule, value)
        if ":" in host:
            vc.fail(name, "an IPv6 address must be written in brackets, e.g. [::1]:514", value)
    if port_text is None:
        return host
    try:
        number = port(name, port_text)
    except ValueError:
        vc.fail(name, rule + " with a port 1-65535", value)
    return "%s:%d" % (host, number)


def backend_address(name, value):
    """A backend's address: an IP address or DNS name the gateway connects
    to; never the unspecified address (0.0.0.0 or ::), which is a listen
    wildcard and not a place to connect to."""
    address = vc.address(name, value)
    try:
        unspecified = ipaddress.ip_address(address).is_unspecified
    except ValueError:
        unspecified = False  # a DNS name
    if unspecified:
        vc.fail(name, "must be an address the gateway can connect to, not the wildcard %s" % address, value)
    return address


def backends(value):
    name = "gateway_backends"
    if not isinstance(value, list):
        vc.fail(name, "must be a list of {name, host, address, port}", value)
    if not value:
        raise ValueError(
            "gateway_backends: must hold at least one vLLM backend ({name, host, address, port}); "
            "is the fleet plan empty for these hosts?")
    checked = []
    names = {}
    sockets = {}
    for index, entry in enumerate(value):
        where = "%s[%d]" % (name, index)
        if not isinstance(entry, dict):
            vc.fail(where, "must be a dict {name, host, address, port}", entry)
        unknown = sorted(str(key) for key in entry if key not in BACKEND_KEYS)
        if unknown:
            vc.fail(where, "unknown field(s) %s; a backend has name, host, address and port" % ", ".join(unknown), entry)
        for key in ("name", "address", "port"):
            if key not in entry:
                vc.fail(where, "missing required field %s" % key, entry)
        backend = {
            "name": vc.text(where + ".name", entry["name"], SERVER_NAME, SERVER_NAME_RULE),
            "host": vc.text(where + ".host", entry.get("host", ""), INVENTORY_HOST, INVENTORY_HOST_RULE,
                            allow_empty=True),
            "address": backend_address(where + ".address", entry["address"]),
            "port": port(where + ".port", entry["port"]),
        }
        if backend["name"] in names:
            vc.fail(where + ".name", "must be unique; gateway_backends[%d] has the same name"
                    % names[backend["name"]], backend["name"])
        names[backend["name"]] = index
        backend["socket"] = socket(backend["address"], backend["port"])
        if backend["socket"] in sockets:
            vc.fail(where, "address and port must be unique; gateway_backends[%d] has the same %s"
                    % (sockets[backend["socket"]], backend["socket"]), entry)
        sockets[backend["socket"]] = index
        checked.append(backend)
    return checked


def check_settings(variables):
    """Return the checked settings (keys without the gateway_ prefix, plus
    listen_socket, stats_socket, and socket for each backend). Raises
    ValueError naming the first variable that breaks its rule."""
    if not isinstance(variables, dict):
        raise ValueError("gateway_settings expects a dict of the role's gateway_* variables")
    missing = [key for key in VARIABLES if key not in variables]
    unknown = sorted(str(key) for key in variables if key not in VARIABLES)
    if missing or unknown:
        raise ValueError("gateway_settings: missing variable(s) %s; unknown variable(s) %s"
                         % (", ".join(missing) or "none", ", ".join(unknown) or "none"))
    v = variables
    s = {"backends": backends(v["gateway_backends"])}
    s["listen_address"] = listen_address("gateway_listen_address", v["gateway_listen_address"])
    s["listen_port"] = port("gateway_listen_port", v["gateway_listen_port"])
    s["balance"] = vc.choice("gateway_balance", v["gateway_balance"], BALANCE)
    s["check_path"] = http_path("gateway_check_path", v["gateway_check_path"])
    s["check_interval"] = duration("gateway_check_interval", v["gateway_check_interval"])
    s["check_fall"] = integer("gateway_check_fall", v["gateway_check_fall"], 1, 1000)
    s["check_rise"] = integer("gateway_check_rise", v["gateway_check_rise"], 1, 1000)
    for timeout in TIMEOUTS:
        key = "gateway_timeout_" + timeout
        s["timeout_" + timeout] = duration(key, v[key])
    s["retries"] = integer("gateway_retries", v["gateway_retries"], 0, 100)
    s["maxconn"] = integer("gateway_maxconn", v["gateway_maxconn"], 1, 10000000)
    s["server_maxconn"] = integer("gateway_server_maxconn", v["gateway_server_maxconn"], 0, 10000000)
    s["monitor_uri"] = http_path("gateway_monitor_uri", v["gateway_monitor_uri"], allow_empty=True)
    s["stats_address"] = listen_address("gateway_stats_address", v["gateway_stats_address"])
    s["stats_port"] = port("gateway_stats_port", v["gateway_stats_port"], allow_zero=True)
    s["stats_uri"] = http_path("gateway_stats_uri", v["gateway_stats_uri"])
    if s["stats_port"] == s["listen_port"]:
        vc.fail("gateway_stats_port", "must differ from gateway_listen_port (0 turns the statistics page off)",
                v["gateway_stats_port"])
    s["log_target"] = log_target("gateway_log_target", v["gateway_log_target"])
    s["user"] = vc.account("gateway_user", v["gateway_user"]) if v["gateway_user"] != "" else ""
    s["group"] = vc.account("gateway_group", v["gateway_group"]) if v["gateway_group"] != "" else ""
    s["chroot"] = vc.absolute_path("gateway_chroot", v["gateway_chroot"], allow_empty=True)
    s["admin_socket"] = vc.absolute_path("gateway_admin_socket", v["gateway_admin_socket"], allow_empty=True)
    group = v["gateway_admin_socket_group"]
    s["admin_socket_group"] = vc.account("gateway_admin_socket_group", group) if group != "" else ""
    s["config_path"] = vc.absolute_path("gateway_config_path", v["gateway_config_path"])
    s["install"] = vc.boolean("gateway_install", v["gateway_install"])
    s["package"] = vc.text("gateway_package", v["gateway_package"], PACKAGE,
                           "must be a package name (letters, digits, '+', '.', '_', '-')")
    s["haproxy"] = vc.absolute_path("gateway_haproxy", v["gateway_haproxy"])
    manage = v["gateway_manage_service"]
    if isinstance(manage, bool):
        manage = "true" if manage else "false"
    vc.choice("gateway_manage_service", manage.lower() if isinstance(manage, str) else manage, MANAGE_SERVICE)
    s["manage_service"] = "auto" if manage.lower() == "auto" else str(vc.boolean("gateway_manage_service", manage)).lower()
    s["service_name"] = vc.text("gateway_service_name", v["gateway_service_name"], SERVICE,
                                "must be a systemd unit name (letters, digits, '@', '_', '.', ':', '-')")
    s["listen_socket"] = socket(s["listen_address"], s["listen_port"])
    s["stats_socket"] = socket(s["stats_address"], s["stats_port"])
    return s
