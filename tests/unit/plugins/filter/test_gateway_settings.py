# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""gpufleet.numa.gateway_settings: every gateway variable checked as a whole.

The probes are the ones that got lines into an installed HAProxy
configuration before the filter existed: newlines in a value, an option
appended after a space, a `log` + `option httpchk` pair that added an
`external-check command`, an extra `bind`, a `stats enable` page.
"""

import hashlib
import json
import pathlib
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.gateway import gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import vrrp
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway.settings import VARIABLES

REPO = pathlib.Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "gateway"
# The HAProxy settings' defaults (the gateway_vrrp_* ones go to gateway_vrrp).
DEFAULTS = dict((name, value) for name, value in yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()).items()
                if name in VARIABLES)
LLAMA = "meta-llama/Llama-3.1-70B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
BACKENDS = [
    {"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.20.0.11", "port": 8000, "model": LLAMA},
    {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "fd00:20::12", "port": 8000, "model": LLAMA},
]
# The defaults listen on every address: a key is required.
KEY = "k3y-0f-the-gateway#$x"
GOOD = dict(DEFAULTS, gateway_backends=BACKENDS, gateway_api_key=KEY)

# Every string variable that reaches the configuration, with a good value.
STRING_VARIABLES = {
    "gateway_listen_address": "0.0.0.0",
    "gateway_balance": "leastconn",
    "gateway_check_path": "/health",
    "gateway_check_interval": "2s",
    "gateway_timeout_connect": "5s",
    "gateway_timeout_client": "10m",
    "gateway_timeout_server": "10m",
    "gateway_timeout_tunnel": "10m",
    "gateway_timeout_http_request": "10s",
    "gateway_timeout_http_keep_alive": "10s",
    "gateway_timeout_queue": "30s",
    "gateway_monitor_uri": "/gateway/health",
    "gateway_stats_address": "127.0.0.1",
    "gateway_stats_uri": "/stats",
    "gateway_log_target": "/dev/log",
    "gateway_user": "haproxy",
    "gateway_group": "haproxy",
    "gateway_chroot": "/var/lib/haproxy",
    "gateway_admin_socket": "/run/haproxy/admin.sock",
    "gateway_admin_socket_group": "haproxy",
    "gateway_config_path": "/etc/haproxy/haproxy.cfg",
    "gateway_package": "haproxy",
    "gateway_haproxy": "/usr/sbin/haproxy",
    "gateway_service_name": "haproxy",
}


def check(**changes):
    return gateway_settings(dict(GOOD, **changes))


def rejected(match, **changes):
    with pytest.raises(AnsibleFilterError, match=match) as error:
        check(**changes)
    message = str(error.value)
    assert "\n" not in message and "\r" not in message, message
    return message


def backend(**changes):
    return [dict(BACKENDS[0], **changes), BACKENDS[1]]


def test_gateway_settings_defaults_pass_in_canonical_form():
    settings = check()
    assert settings["listen_socket"] == "0.0.0.0:8080"
    assert settings["backends"][1] == {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "fd00:20::12",
                                       "port": 8000, "socket": "[fd00:20::12]:8000", "model": LLAMA,
                                       "backend": "model-meta-llama_Llama-3.1-70B-Instruct", "agent_options": ""}
    assert settings["check_interval"] == "2s" and settings["retries"] == 2
    assert settings["admin_socket_group"] == "" and settings["manage_service"] == "auto"


def test_gateway_settings_every_default_is_a_variable_and_back():
    every = VARIABLES + vrrp.VARIABLES
    assert sorted(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())) == sorted(every)
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__gateway_variables"]
    assert sorted(role_vars) == sorted(VARIABLES)
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    assert sorted(specs["argument_specs"]["main"]["options"]) == sorted(every)


def test_gateway_settings_canonicalises_and_converts():
    settings = check(gateway_listen_address="fd00:0:0::1", gateway_listen_port="9000",
                     gateway_stats_port=8404, gateway_stats_address="::1",
                     gateway_manage_service=False, gateway_install="yes",
                     gateway_check_interval=500, gateway_log_target="[::1]:514")
    assert settings["listen_socket"] == "[fd00::1]:9000"
    assert settings["stats_socket"] == "[::1]:8404"
    assert settings["manage_service"] == "false" and settings["install"] is True
    assert settings["check_interval"] == "500" and settings["log_target"] == "[::1]:514"


@pytest.mark.parametrize("variable", sorted(STRING_VARIABLES))
@pytest.mark.parametrize("payload", [
    pytest.param("\n", id="newline_end"),
    pytest.param("\r", id="carriage_return"),
    pytest.param("\t", id="tab"),
    pytest.param("\x00", id="nul"),
    pytest.param("\n    stats enable\n    stats uri /admin", id="stats_page"),
    pytest.param("\n    bind 0.0.0.0:2222", id="extra_bind"),
    pytest.param("\n    external-check command /tmp/x", id="external_check"),
])
def test_gateway_settings_rejects_control_characters_in_every_variable(variable, payload):
    value = STRING_VARIABLES[variable] + payload
    message = rejected("^%s: " % variable, **{variable: value})
    assert "(got " + repr(value)[:10] in message


@pytest.mark.parametrize("field, value", [
    ("name", "gpu-a-vllm-0\n    server evil 6.6.6.6:80"),
    ("host", "gpu-a\n    stats enable"),
    ("address", "10.20.0.11\n    bind :2222"),
    ("address", "10.20.0.11:8000 backup\n"),
])
def test_gateway_settings_rejects_newlines_in_backends(field, value):
    rejected(r"^gateway_backends\[0\]\.%s: must not contain control characters" % field,
             gateway_backends=backend(**{field: value}))


def test_gateway_settings_rejects_option_appended_to_check_interval():
    """No newline at all: a space was enough to make every server a backup
    with TLS verification off."""
    rejected("^gateway_check_interval: must be an HAProxy duration", gateway_check_interval="2s backup ssl verify none")


def test_gateway_settings_rejects_external_check_pair():
    """The pair that made HAProxy run a script once per health check."""
    rejected("^gateway_(log_target|check_path): must not contain control characters",
             gateway_log_target="/dev/log local0\n    external-check path /tmp",
             gateway_check_path="/health\n    option external-check\n    external-check command /tmp/x")
    rejected("^gateway_check_path: must not contain control characters",
             gateway_check_path="/health\n    option external-check\n    external-check command /tmp/x")
    rejected("^gateway_log_target: must be an absolute path", gateway_log_target="/dev/log external-check")


@pytest.mark.parametrize("variable, value", [
    ("gateway_listen_address", "0.0.0.0:2222 ssl"),
    ("gateway_listen_address", "0.0.0.0 transparent"),
    ("gateway_monitor_uri", "/health stats enable"),
    ("gateway_monitor_uri", "/health#"),
    ("gateway_stats_uri", "/stats admin if TRUE"),
    ("gateway_check_path", "/health HTTP/1.1"),
    ("gateway_timeout_client", "10m\u2028"),
    ("gateway_admin_socket", "/run/haproxy/admin.sock level admin"),
    ("gateway_chroot", "/ user root"),
    ("gateway_user", "haproxy group root"),
    ("gateway_balance", "leastconn\n    stats enable"),
])
def test_gateway_settings_rejects_words_appended_without_newline(variable, value):
    rejected("^%s: " % variable, **{variable: value})


@pytest.mark.parametrize("variable, value, rule", [
    ("gateway_listen_address", "localhost", "IPv4 or IPv6 address"),
    ("gateway_listen_address", "[::1]", "IPv4 or IPv6 address"),
    ("gateway_listen_address", "", "must not be empty"),
    ("gateway_stats_address", "10.0.0.256", "IPv4 or IPv6 address"),
    ("gateway_listen_port", 0, "at least 1"),
    ("gateway_listen_port", 65536, "at most 65535"),
    ("gateway_listen_port", True, "not a boolean"),
    ("gateway_listen_port", "80 ssl", "must be an integer"),
    ("gateway_listen_port", " 8080", "must be an integer"),
    ("gateway_listen_port", "+8080", "must be an integer"),
    ("gateway_check_fall", "3\n", "must not contain control characters"),
    ("gateway_maxconn", "4096\r\n", "must not contain control characters"),
    ("gateway_stats_port", -1, "at least 0"),
    ("gateway_stats_port", 8080, "must differ from gateway_listen_port"),
    ("gateway_balance", "uri", "must be one of leastconn, roundrobin"),
    ("gateway_balance", "", "must be one of"),
    ("gateway_check_path", "health", "HTTP path starting with '/'"),
    ("gateway_check_path", "/a'b", "quotes"),
    ("gateway_check_path", '/a"b', "HTTP path"),
    ("gateway_check_path", "/a\\b", "HTTP path"),
    ("gateway_check_path", "", "must not be empty"),
    ("gateway_monitor_uri", "gateway", "HTTP path"),
    ("gateway_stats_uri", "", "must not be empty"),
    ("gateway_check_interval", "soon", "HAProxy duration"),
    ("gateway_check_interval", "2 s", "HAProxy duration"),
    ("gateway_check_interval", "-2s", "HAProxy duration"),
    ("gateway_check_interval", "2sec", "HAProxy duration"),
    ("gateway_timeout_queue", "", "must not be empty"),
    ("gateway_check_interval", "0", "must be above 0"),
    ("gateway_check_interval", "0us", "must be above 0"),
    ("gateway_timeout_client", "0s", "must be above 0"),
    ("gateway_timeout_client", "25d", "at most 24d"),
    ("gateway_timeout_client", "2147484s", "at most 24d"),
    ("gateway_timeout_client", "597h", "at most 24d"),
    ("gateway_timeout_client", "9999999999", "HAProxy duration"),
    ("gateway_timeout_server", 1.5, "must be a string"),
    ("gateway_check_fall", 0, "at least 1"),
    ("gateway_check_rise", "2 backup", "must be an integer"),
    ("gateway_retries", -1, "at least 0"),
    ("gateway_maxconn", 0, "at least 1"),
    ("gateway_server_maxconn", "-1", "must be an integer"),
    ("gateway_log_target", "dev/log", "absolute socket path or ADDRESS"),
    ("gateway_log_target", "::1", "absolute socket path or ADDRESS"),
    ("gateway_log_target", "[::1", "absolute socket path or ADDRESS"),
    ("gateway_log_target", "[10.0.0.1]:514", "absolute socket path or ADDRESS"),
    ("gateway_log_target", "logs.example:0", "with a port 1-65535"),
    ("gateway_log_target", "logs.example:514:1", "with a port 1-65535"),
    ("gateway_log_target", "/dev/../etc/passwd", "must not contain '..'"),
    ("gateway_log_target", "log_host", "absolute socket path or ADDRESS"),
    ("gateway_user", "Root", "user or group name"),
    ("gateway_group", "-haproxy", "user or group name"),
    ("gateway_admin_socket_group", "1adm", "user or group name"),
    ("gateway_chroot", "var/lib/haproxy", "absolute path"),
    ("gateway_admin_socket", "/run/haproxy/../admin.sock", "must not contain '..'"),
    ("gateway_config_path", "haproxy.cfg", "absolute path"),
    ("gateway_haproxy", "haproxy -d", "absolute path"),
    ("gateway_package", "haproxy; rm", "package name"),
    ("gateway_service_name", "haproxy service", "systemd unit name"),
    ("gateway_manage_service", "maybe", "must be one of auto, true"),
    ("gateway_install", "perhaps", "must be a boolean"),
])
def test_gateway_settings_rule_names_variable_and_value(variable, value, rule):
    message = rejected("^%s: .*%s" % (variable, re.escape(rule)), **{variable: value})
    assert message.endswith("(got %r)" % (value,)), message


@pytest.mark.parametrize("value, canonical", [
    ("/dev/log", "/dev/log"),
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.1:514", "127.0.0.1:514"),
    ("logs.example.org:514", "logs.example.org:514"),
    ("[fd00:0::1]:514", "[fd00::1]:514"),
    ("[::1]", "[::1]"),
    ("", ""),
])
def test_gateway_settings_log_targets(value, canonical):
    assert check(gateway_log_target=value)["log_target"] == canonical


@pytest.mark.parametrize("value", ["2s", "500ms", "1us", "10m", "1h", "24d", "3000", 3000, "999999999",
                                   "2147483s", "596h", "000000005s"])
def test_gateway_settings_haproxy_durations(value):
    assert check(gateway_check_interval=value)["check_interval"] == str(value)


@pytest.mark.parametrize("variable", ["gateway_monitor_uri", "gateway_log_target", "gateway_user",
                                      "gateway_group", "gateway_chroot", "gateway_admin_socket",
                                      "gateway_admin_socket_group"])
def test_gateway_settings_empty_turns_off(variable):
    assert check(**{variable: ""})[variable[len("gateway_"):]] == ""


@pytest.mark.parametrize("backends, match", [
    ([], r"^gateway_backends: must hold at least one vLLM backend"),
    ("gpu-a:8000", r"^gateway_backends: must be a list"),
    (["gpu-a:8000"], r"^gateway_backends\[0\]: must be a dict"),
    (backend(port=70000), r"^gateway_backends\[0\]\.port: must be at most 65535"),
    (backend(port="8000 backup"), r"^gateway_backends\[0\]\.port: must be an integer"),
    (backend(port="8000\n"), r"^gateway_backends\[0\]\.port: must not contain control characters"),
    (backend(name="gpu a/vllm 0"), r"^gateway_backends\[0\]\.name: must be 1-64 letters"),
    (backend(name=""), r"^gateway_backends\[0\]\.name: must not be empty"),
    (backend(host="gpu a"), r"^gateway_backends\[0\]\.host: must be an inventory host name"),
    (backend(address="10.20.0.11 backup"), r"^gateway_backends\[0\]\.address: must be an IPv4 or IPv6 address or a DNS"),
    (backend(address="0.0.0.0"), r"^gateway_backends\[0\]\.address: .*not the wildcard"),
    (backend(address="[fd00::1]"), r"^gateway_backends\[0\]\.address: must be an IPv4"),
    (backend(weight=10), r"^gateway_backends\[0\]: unknown field\(s\) weight"),
    ([{"name": "gpu-a-vllm-0", "address": "10.20.0.11", "model": LLAMA}],
     r"^gateway_backends\[0\]: missing required field port"),
    ([{"name": "gpu-a-vllm-0", "address": "10.20.0.11", "port": 8000}],
     r"^gateway_backends\[0\]: missing required field model"),
    # Served model names reach the configuration quoted: one word, no quote.
    (backend(model="llama' if TRUE"), r"^gateway_backends\[0\]\.model: must be a served model name"),
    (backend(model='llama" "x'), r"^gateway_backends\[0\]\.model: must be a served model name"),
    (backend(model="llama\\x"), r"^gateway_backends\[0\]\.model: must be a served model name"),
    (backend(model="llama ${HOME}"), r"^gateway_backends\[0\]\.model: must be a served model name"),
    (backend(model="llama\n    bind :2222"), r"^gateway_backends\[0\]\.model: must not contain control"),
    (backend(model="-x"), r"^gateway_backends\[0\]\.model: must not start with '-'"),
    (backend(model="m" * 201), r"^gateway_backends\[0\]\.model: must be at most 200 characters"),
    (backend(backend="other"),
     r"^gateway_backends\[0\]\.backend: must be model-meta-llama_Llama-3.1-70B-Instruct, the backend of model"),
    (backend(backend="b\n    stats enable"), r"^gateway_backends\[0\]\.backend: must not contain control"),
    ([BACKENDS[0], dict(BACKENDS[1], name=BACKENDS[0]["name"])],
     r"^gateway_backends\[1\]\.name: must be unique; gateway_backends\[0\] has the same name"),
    ([BACKENDS[0], dict(BACKENDS[0], name="other")],
     r"^gateway_backends\[1\]: address and port must be unique; gateway_backends\[0\] has the same 10.20.0.11:8000"),
    ([BACKENDS[1], dict(BACKENDS[1], name="other", address="fd00:20:0::12")],
     r"^gateway_backends\[1\]: address and port must be unique"),
])
def test_gateway_settings_rejects_bad_backends(backends, match):
    rejected(match, gateway_backends=backends)


def test_gateway_settings_backend_dns_name_and_no_host():
    settings = check(gateway_backends=[{"name": "x", "address": "gpu-a.internal", "port": 8000, "model": "m"}])
    assert settings["backends"] == [{"name": "x", "host": "", "address": "gpu-a.internal", "port": 8000,
                                     "socket": "gpu-a.internal:8000", "model": "m", "backend": "model-m",
                                     "agent_options": ""}]


def test_gateway_settings_rejects_missing_and_unknown_variables():
    variables = dict(GOOD, gateway_stats_enable=True)
    del variables["gateway_chroot"]
    with pytest.raises(AnsibleFilterError, match="missing variable.s. gateway_chroot; unknown variable.s. gateway_stats_enable"):
        gateway_settings(variables)
    with pytest.raises(AnsibleFilterError, match="gateway_settings expects a mapping of the role.s variables"):
        gateway_settings(["gateway_listen_port"])


def test_gateway_settings_shows_long_values_cut():
    message = rejected("^gateway_check_path: ", gateway_check_path="/" + "a" * 500 + "\n")
    assert "characters)" in message and len(message) < 300


# --- Several models, one backend each -----------------------------------------

def test_gateway_settings_groups_servers_by_model_in_order():
    servers = [dict(BACKENDS[0]), dict(BACKENDS[1], model=QWEN),
               {"name": "gpu-c-vllm-0", "host": "gpu-c", "address": "10.20.0.13", "port": 8000, "model": LLAMA}]
    settings = check(gateway_backends=servers)
    assert [(m["model"], m["backend"], [s["name"] for s in m["servers"]]) for m in settings["models"]] == [
        (LLAMA, "model-meta-llama_Llama-3.1-70B-Instruct", ["gpu-a-vllm-0", "gpu-c-vllm-0"]),
        (QWEN, "model-Qwen_Qwen2.5-7B-Instruct", ["gpu-b-vllm-0"]),
    ]
    listed = settings["models_list"].replace("%[nbsrv(model-meta-llama_Llama-3.1-70B-Instruct)]", "2")
    listed = listed.replace("%[nbsrv(model-Qwen_Qwen2.5-7B-Instruct)]", "1")
    assert json.loads(listed) == {"object": "list", "data": [
        {"id": LLAMA, "object": "model", "created": 0, "owned_by": "gpufleet", "instances_up": 2},
        {"id": QWEN, "object": "model", "created": 0, "owned_by": "gpufleet", "instances_up": 1}]}


def test_gateway_settings_backend_names_stay_distinct_and_short():
    """'org/m' and 'org_m' clean to the same name; a long name is cut: both
    end in part of the name's SHA-256, so every model keeps its backend."""
    long_name = "org/" + "m" * 190
    servers = [dict(BACKENDS[0], model="org/m"), dict(BACKENDS[1], model="org_m"),
               {"name": "c", "address": "10.20.0.13", "port": 8000, "model": long_name}]
    names = [m["backend"] for m in check(gateway_backends=servers)["models"]]
    assert names[0] == "model-org_m"
    assert names[1] == "model-org_m-" + hashlib.sha256(b"org_m").hexdigest()[:10]
    assert len(names[2]) == 64 and names[2].endswith(hashlib.sha256(long_name.encode()).hexdigest()[:10])
    assert len(set(names)) == 3
    # The name the plan gives (plan_views) is accepted as it is.
    check(gateway_backends=[dict(s, backend=n) for s, n in zip(servers, names)])


# --- No one in who does not belong -------------------------------------------

def test_gateway_settings_key_required_beyond_loopback():
    message = rejected(r"^gateway_api_key: is required when the gateway listens beyond loopback "
                       r"\(gateway_listen_address 0.0.0.0\)", gateway_api_key="")
    assert "gateway_allow_unauthenticated" in message
    rejected(r"^gateway_api_key: is required", gateway_api_key="", gateway_listen_address="10.0.0.10")
    assert check(gateway_api_key="", gateway_allow_unauthenticated=True)["api_key_digest"] == ""
    for loopback in ("127.0.0.1", "::1", "127.0.0.2"):
        assert check(gateway_api_key="", gateway_listen_address=loopback)["api_key_digest"] == ""


def test_gateway_settings_config_holds_only_the_keys_digest():
    settings = check()
    assert settings["api_key_digest"] == hashlib.sha256(("Bearer " + KEY).encode()).hexdigest().upper()
    assert KEY not in repr(settings)


@pytest.mark.parametrize("key", ["short", " " + "a" * 16, "a" * 16 + " ", "a" * 16 + "\t", "a" * 16 + "\u00e9",
                                 "a" * 16 + "\n    bind :2222", "a" * 513, ["a" * 16], 1234567890123456789])
def test_gateway_settings_rejects_bad_key_without_showing_it(key):
    message = rejected(r"^gateway_api_key: must be 16-512 printable ASCII characters, not starting or ending "
                       r"with a space, with no two spaces in a row \(value hidden\)$", gateway_api_key=key)
    assert "aaaa" not in message and "short" not in message and "123456" not in message


def test_gateway_settings_any_printable_key_is_hashed_whole():
    key = 'k3y "with" $pecial \\ chars #x \'q\''
    assert check(gateway_api_key=key)["api_key_digest"] == hashlib.sha256(
        ("Bearer " + key).encode()).hexdigest().upper()


def test_gateway_settings_backend_api_keys_per_model():
    servers = [dict(BACKENDS[0]), dict(BACKENDS[1], model=QWEN)]
    settings = check(gateway_backends=servers, gateway_backend_api_keys={QWEN: "sk-qwen#$1-0123456789", LLAMA: ""})
    assert [(m["model"], m["api_key"]) for m in settings["models"]] == [(LLAMA, ""), (QWEN, "sk-qwen#$1-0123456789")]
    # One double-quoted HAProxy word, whatever the key holds; '%' doubled
    # (HAProxy reads a set-header value as log-format).
    hostile = 'k3y "with" $pecial \\ chars %[env(HOME)]'
    models = check(gateway_backends=servers, gateway_backend_api_keys={QWEN: hostile})["models"]
    assert models[1]["api_key_header"] == '"Bearer k3y \\"with\\" \\$pecial \\\\ chars %%[env(HOME)]"'
    assert settings["holds_secrets"] is True
    assert check()["holds_secrets"] is False
    message = rejected(r"^gateway_backend_api_keys: names a model no backend serves \(models: "
                       r"meta-llama/Llama-3.1-70B-Instruct\) \(got 'other'\)",
                       gateway_backend_api_keys={"other": "sk-1-0123456789abcdef"})
    assert "sk-1" not in message
    for bad in (" sk1", "sk1 ", "sk\n1", "sk\u00e91", "sk\x001", "sk-0123456789abcdef  two-spaces", "sk-short"):
        message = rejected(r"^gateway_backend_api_keys\[meta-llama/Llama-3.1-70B-Instruct\]: must be .*"
                           r"\(value hidden\)$", gateway_backend_api_keys={LLAMA: bad})
        assert "sk" not in message.split("]:", 1)[1]
    rejected(r"^gateway_backend_api_keys: must be a mapping .*\(value hidden\)$",
             gateway_backend_api_keys="sk-secret")


@pytest.mark.parametrize("variable, value, match", [
    ("gateway_tls_certificate", "certs/gateway.pem", r"^gateway_tls_certificate: must be an absolute path"),
    ("gateway_tls_certificate", "/etc/ssl/gw.pem alpn h2", r"^gateway_tls_certificate: must be an absolute path"),
    ("gateway_tls_certificate", "/etc/ssl/gw.pem\n    bind :2222", r"^gateway_tls_certificate: must not contain"),
    ("gateway_allow_unauthenticated", "sometimes", r"^gateway_allow_unauthenticated: must be a boolean"),
    ("gateway_buffer_size", 1024, r"^gateway_buffer_size: must be at least 16384"),
    ("gateway_buffer_size", "64k", r"^gateway_buffer_size: must be an integer"),
])
def test_gateway_settings_rejects_bad_security_settings(variable, value, match):
    rejected(match, **{variable: value})


@pytest.mark.parametrize("name", ["gateway_settings", "gateway_backends", "gateway_api_keys"])
def test_gateway_filter_docs_parse(name):
    """ansible-doc reads these files; a ': ' in a plain scalar breaks them."""
    doc = yaml.safe_load((REPO / "plugins" / "filter" / ("%s.yml" % name)).read_text())
    assert doc["DOCUMENTATION"]["name"] == name
    assert doc["DOCUMENTATION"]["version_added"] == "0.1.0"
    assert isinstance(yaml.safe_load(doc["EXAMPLES"]), list)
    assert "_value" in doc["RETURN"]


@pytest.mark.parametrize("value", [None, "", [], "none"])
def test_gateway_settings_backend_api_keys_has_no_default_of_its_own(value):
    # defaults/main.yml gives {}; the check invents nothing for null or "".
    rejected(r"^gateway_backend_api_keys: must be a mapping", gateway_backend_api_keys=value)


@pytest.mark.parametrize("value, canonical", [("auto", "auto"), ("AUTO", "auto"), (True, "true"), ("no", "false"),
                                              ("Yes", "true"), (False, "false")])
def test_gateway_settings_manage_service_is_auto_or_a_boolean(value, canonical):
    assert check(gateway_manage_service=value)["manage_service"] == canonical


@pytest.mark.parametrize("value", ["maybe", "on", "1", 1, None, ["true"]])
def test_gateway_settings_manage_service_refuses_what_is_no_boolean(value):
    rejected(r"^gateway_manage_service: must be (one of auto|a boolean)", gateway_manage_service=value)
