# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Check every variable of role gpufleet.numa.gateway before anything is written.

check_settings() takes the role's variables as one dict (gateway_* name ->
value) and returns the values the HAProxy template places, each checked as
a whole (value_checks: fullmatch, no control characters anywhere) and in
its canonical form, plus the few strings derived from them (address:port
sockets, one backend per served model name, the models and health answers
and the one-model rule (surface.py), the gateway key's digest, each backend
key as one quoted word) and HAProxy's own error answers in OpenAI's shape
(errors.py). It raises
ValueError("VARIABLE: RULE (got VALUE)") for the first value that breaks a
rule, so a value can never add a line, a keyword or a server option to the
configuration; messages about keys never show them. Pure function,
standard library only.
"""

from __future__ import annotations

import hashlib
import re

import ipaddress

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as vc
from ansible_collections.gpufleet.numa.plugins.module_utils.common.names import INVENTORY_HOST, INVENTORY_HOST_RULE
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import access
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import affinity
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import agent
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import errors
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import surface
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract

BALANCE = ("leastconn", "roundrobin", "static-rr", "first", "source", "random")
MANAGE_SERVICE = ("auto", "true", "false", "yes", "no")
# HAProxy server names, inventory host names (written as a comment).
SERVER_NAME = r"[A-Za-z0-9_.:-]{1,64}"
SERVER_NAME_RULE = "must be 1-64 letters, digits, '-', '_', '.' or ':'"
PACKAGE = r"[A-Za-z0-9][A-Za-z0-9+._-]{0,127}"
SERVICE = r"[A-Za-z0-9][A-Za-z0-9@_.:-]{0,127}"
BACKEND_KEYS = ("name", "host", "address", "port", "model", "backend", "agent")
# A backend's agent: the instance name its host's agent answers for.
AGENT_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,100}"
AGENT_NAME_RULE = "must be an instance name: 1-101 letters, digits, '_', '.' or '-', starting with a letter or digit"
# HAProxy backend (proxy) names made from served model names.
BACKEND_PREFIX = "model-"
BACKEND_NAME_LIMIT = 64
# Header a client sets to name the model when the JSON body cannot say it
# (a GET, a body that is not JSON, a "model" field beyond the buffer).
MODEL_HEADER = "X-Model"
# The Lua reader of the request body's "model" (roles/gateway/files), next
# to the configuration that loads it.
BODY_READER = "gpufleet-request-model.lua"
# HAProxy's tune.maxrewrite, written out: the part of the buffer kept for
# header rewrites, which a request's headers and body cannot fill.
MAX_REWRITE = 1024
# A fragment of a key this long (or longer) in a line withholds the line.
SECRET_FRAGMENT = 4

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
    "gateway_service_name", "gateway_api_key", "gateway_allow_unauthenticated", "gateway_tls_certificate",
    "gateway_buffer_size", "gateway_backend_api_keys", "gateway_metrics_address", "gateway_metrics_port",
    "gateway_affinity",
)
TIMEOUTS = ("connect", "client", "server", "tunnel", "http_request", "http_keep_alive", "queue")

# value_checks takes strings of digits only (no sign or space around them),
# bounds HAProxy durations at its 2147483647 ms and refuses quotes in paths.
integer = vc.integer
port = vc.port
http_path = vc.url_path


def socket(address, number):
    """address:port as HAProxy reads it: an IPv6 address in brackets."""
    return ("[%s]:%d" if ":" in address else "%s:%d") % (address, number)


def duration(name, value):
    """An HAProxy duration (value_checks.haproxy_duration) above zero: zero
    means no timeout, or a check interval HAProxy refuses."""
    value = vc.haproxy_duration(name, value)
    if int(re.match(r"[0-9]+", value).group(0)) == 0:
        vc.fail(name, "must be above 0", value)
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
    to (value_checks.address: no legacy IPv4 forms such as 0 or 127.1);
    never an unspecified address (0.0.0.0, ::, ::ffff:0.0.0.0), which is a
    listen wildcard and not a place to connect to."""
    return vc.connect_address(name, value, "the gateway")


def backend_name(model, taken=()):
    """The HAProxy backend name for a served model name: 'model-' and the
    name with every character HAProxy does not take in a proxy name made
    '_'; a name too long, or one another model already maps to, ends in
    part of the name's SHA-256 so that every model keeps its own backend."""
    clean = BACKEND_PREFIX + re.sub(r"[^A-Za-z0-9_.:-]", "_", model)
    if len(clean) > BACKEND_NAME_LIMIT or clean in taken:
        digest = hashlib.sha256(model.encode("utf-8")).hexdigest()[:10]
        clean = clean[:BACKEND_NAME_LIMIT - 11] + "-" + digest
    return clean


def backends(value):
    """Checked servers, each with its model and backend, and the models:
    [{name, backend, servers, api_key}] in the order they first appear."""
    name = "gateway_backends"
    shape = "{name, host, address, port, model, agent}"
    if not isinstance(value, list):
        vc.fail(name, "must be a list of " + shape, value)
    if not value:
        raise ValueError(
            "gateway_backends: must hold at least one vLLM backend (%s); "
            "is the fleet plan empty for these hosts?" % shape)
    checked = []
    names = {}
    sockets = {}
    for index, entry in enumerate(value):
        where = "%s[%d]" % (name, index)
        if not isinstance(entry, dict):
            vc.fail(where, "must be a dict " + shape, entry)
        unknown = sorted(str(key) for key in entry if key not in BACKEND_KEYS)
        if unknown:
            vc.fail(where, "unknown field(s) %s; a backend has %s" % (", ".join(unknown), ", ".join(BACKEND_KEYS)),
                    entry)
        for key in ("name", "address", "port", "model"):
            if key not in entry:
                vc.fail(where, "missing required field %s" % key, entry)
        backend = {
            "name": vc.text(where + ".name", entry["name"], SERVER_NAME, SERVER_NAME_RULE),
            "host": vc.text(where + ".host", entry.get("host", ""), INVENTORY_HOST, INVENTORY_HOST_RULE,
                            allow_empty=True),
            "address": backend_address(where + ".address", entry["address"]),
            "port": port(where + ".port", entry["port"]),
            "model": contract.check_served_name(where + ".model", entry["model"]),
        }
        if entry.get("backend") not in (None, ""):
            backend["backend"] = vc.text(where + ".backend", entry["backend"], SERVER_NAME, SERVER_NAME_RULE)
        # The agent-check options of the server ('' without an agent).
        backend["agent_options"] = agent.server_options(vc.text(
            where + ".agent", entry["agent"], AGENT_NAME, AGENT_NAME_RULE)) if entry.get("agent") else ""
        if backend["name"] in names:
            vc.fail(where + ".name", "must be unique; gateway_backends[%d] has the same name"
                    % names[backend["name"]], backend["name"])
        names[backend["name"]] = index
        backend["socket"] = socket(backend["address"], backend["port"])
        if backend["socket"] in sockets:
            vc.fail(where, "address and port must be unique; gateway_backends[%d] has the same %s"
                    % (sockets[backend["socket"]], backend["socket"]), backend["socket"])
        sockets[backend["socket"]] = index
        checked.append(backend)
    return checked, models(checked)


def models(servers):
    """Group servers by served model name: one HAProxy backend each; a
    given backend name must be the one the model's name makes."""
    found = {}
    taken = set()
    for index, server in enumerate(servers):
        model = found.get(server["model"])
        if model is None:
            backend = backend_name(server["model"], taken)
            taken.add(backend)
            model = found[server["model"]] = {"model": server["model"], "backend": backend, "servers": [],
                                              "api_key": ""}
        if server.get("backend", model["backend"]) != model["backend"]:
            vc.fail("gateway_backends[%d].backend" % index, "must be %s, the backend of model %s"
                    % (model["backend"], server["model"]), server["backend"])
        server["backend"] = model["backend"]
        model["servers"].append(server)
    return list(found.values())


def backend_api_keys(value, found):
    """gateway_backend_api_keys: served model name -> the key the gateway
    sends to that model's instances (their vllm_api_key). Sets api_key on
    each model of `found`; a name that is no model is an error. Keys are
    never shown in a message."""
    name = "gateway_backend_api_keys"
    # No default here: the role's defaults/main.yml gives {}.
    if not isinstance(value, dict):
        raise ValueError("%s: must be a mapping of served model name -> key (value hidden)" % name)
    by_name = dict((model["model"], model) for model in found)
    for model, key in value.items():
        if model not in by_name:
            vc.fail(name, "names a model no backend serves (models: %s)" % ", ".join(sorted(by_name)), str(model))
        if key is None or key == "":
            continue
        by_name[model]["api_key"] = vc.api_key("%s[%s]" % (name, model), key)
        by_name[model]["api_key_header"] = header_value("Bearer " + key)


def header_value(text):
    """TEXT as the value word of an HAProxy set-header, which HAProxy reads
    twice: as a log-format string, where '%' starts an expression (%[...]
    would be evaluated) and '%%' is one '%', then as a double-quoted word,
    where backslash, double quote and '$' (environment variables) are
    escaped. TEXT is printable ASCII with single spaces (value_checks.api_key):
    log-format merges a run of spaces."""
    return quoted(text.replace("%", "%%"))


def quoted(text):
    """TEXT as one double-quoted HAProxy word: backslash, double quote and
    '$' (environment variables) escaped; TEXT holds no control character."""
    return '"%s"' % re.sub(r'([\\"$])', r"\\\1", text)


def secret_forms(key):
    """Every form in which KEY may reach HAProxy's output: as given, as
    log-format text, and as the configuration's quoted word."""
    logformat = key.replace("%", "%%")
    return sorted({key, logformat, quoted(logformat)[1:-1]})


def redact_lines(lines, secrets):
    """LINES (e.g. `haproxy -c` output), each kept only if it holds no
    fragment of SECRETS' forms of SECRET_FRAGMENT or more characters;
    the others are replaced by a note that says why, never by a part of
    them. A configuration that holds keys is never echoed raw through here."""
    fragments = set()
    for secret in secrets:
        if not isinstance(secret, str) or not secret:
            continue
        for form in secret_forms(secret):
            if len(form) < SECRET_FRAGMENT:
                fragments.add(form)
            for start in range(len(form) - SECRET_FRAGMENT + 1):
                fragments.add(form[start:start + SECRET_FRAGMENT])
    kept = []
    for line in lines:
        line = str(line)
        if any(fragment in line for fragment in fragments):
            kept.append("(a line that mentions an API key, withheld)")
        else:
            kept.append(line)
    return kept


def manage_service(name, value):
    """'auto', or one of MANAGE_SERVICE's words read by value_checks.boolean: 'true' or 'false'."""
    if isinstance(value, str):
        if value.lower() == "auto":
            return "auto"
        if value.lower() not in MANAGE_SERVICE:
            vc.fail(name, "must be one of %s" % ", ".join(MANAGE_SERVICE), value)
    return "true" if vc.boolean(name, value) else "false"


def check_settings(variables):
    """Return the checked settings (keys without the gateway_ prefix, plus
    listen_socket, stats_socket, metrics_socket, and socket for each backend). Raises
    ValueError naming the first variable that breaks its rule."""
    v = vc.exact_names("gateway_settings", variables, VARIABLES)
    s = {}
    s["backends"], s["models"] = backends(v["gateway_backends"])
    s["listen_address"] = listen_address("gateway_listen_address", v["gateway_listen_address"])
    backend_api_keys(v["gateway_backend_api_keys"], s["models"])
    s["api_key_digest"] = access.gateway_key(v, s["listen_address"])
    s["allow_unauthenticated"] = vc.boolean("gateway_allow_unauthenticated", v["gateway_allow_unauthenticated"])
    s["tls_certificate"] = vc.absolute_path("gateway_tls_certificate", v["gateway_tls_certificate"],
                                            allow_empty=True)
    s["buffer_size"] = integer("gateway_buffer_size", v["gateway_buffer_size"], 16384, 16777216)
    # The configuration holds a secret (a key sent to instances): the role
    # writes it 0640 and shows no diff of it.
    s["holds_secrets"] = any(model["api_key"] for model in s["models"])
    s["model_header"] = MODEL_HEADER
    # The models, health and one-model routing answers (surface.py).
    s.update(surface.answers(s["models"]))
    # What of the buffer a request may fill, headers and body together.
    s["max_rewrite"], s["body_limit"] = MAX_REWRITE, s["buffer_size"] - MAX_REWRITE
    # HAProxy's own error answers as JSON (errors.py): fixed texts.
    s["http_errors"], s["monitor_down"] = errors.http_errors(), errors.monitor_down()
    s["listen_port"] = port("gateway_listen_port", v["gateway_listen_port"])
    s["balance"] = vc.choice("gateway_balance", v["gateway_balance"], BALANCE)
    # Each model's balance and prefix affinity (affinity.py), and the body
    # reader's action (with the prompt's first bytes when a model hashes them).
    s["body_action"] = affinity.check_affinity(v["gateway_affinity"], s["models"], s["balance"])
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
    # Each server's configured weight, of which the agent answers a percentage.
    s["server_weight"] = agent.SERVER_WEIGHT
    s["monitor_uri"] = http_path("gateway_monitor_uri", v["gateway_monitor_uri"], allow_empty=True)
    s["stats_address"] = listen_address("gateway_stats_address", v["gateway_stats_address"])
    s["stats_port"] = port("gateway_stats_port", v["gateway_stats_port"], allow_zero=True)
    s["stats_uri"] = http_path("gateway_stats_uri", v["gateway_stats_uri"])
    if s["stats_port"] == s["listen_port"]:
        vc.fail("gateway_stats_port", "must differ from gateway_listen_port (0 turns the statistics page off)",
                v["gateway_stats_port"])
    access.stats_access(s)
    s["metrics_address"] = listen_address("gateway_metrics_address", v["gateway_metrics_address"])
    s["metrics_port"] = port("gateway_metrics_port", v["gateway_metrics_port"], allow_zero=True)
    if s["metrics_port"] and s["metrics_port"] in (s["listen_port"], s["stats_port"]):
        vc.fail("gateway_metrics_port", "must differ from gateway_listen_port and gateway_stats_port (0 turns the "
                "exporter off)", v["gateway_metrics_port"])
    # The digest the exporter checks ('' when it is open).
    s["metrics_key_digest"] = access.metrics_access(s)
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
    s["manage_service"] = manage_service("gateway_manage_service", v["gateway_manage_service"])
    s["service_name"] = vc.text("gateway_service_name", v["gateway_service_name"], SERVICE,
                                "must be a systemd unit name (letters, digits, '@', '_', '.', ':', '-')")
    s["body_reader"] = s["config_path"].rsplit("/", 1)[0] + "/" + BODY_READER
    s["listen_socket"] = socket(s["listen_address"], s["listen_port"])
    s["stats_socket"] = socket(s["stats_address"], s["stats_port"])
    s["metrics_socket"] = socket(s["metrics_address"], s["metrics_port"])
    return s
