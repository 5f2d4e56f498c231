# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Role gpufleet.numa.gateway, run for real with ansible-playbook.

Each case renders the HAProxy configuration into a temporary directory
(local connection, nothing installed or started) and is checked with the
real `haproxy -c`. An ansible-playbook start-up costs seconds, and loading
the role once per case costs more, so the cases share both: every case is
one host of a generated inventory, with the case's variables as its host
variables, and one block includes the role for all of them at once; its
rescue records why a case failed. Three start-ups in all: the example
cases, a second run of the staging case (nothing may change), and the
generated cases of the property test. Rendered files are compared with golden files under golden/gateway/;
set GPUFLEET_UPDATE_GOLDEN=1 to rewrite them after a deliberate change.
"""

import hashlib
import ipaddress
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks

REPO = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "gateway"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PYTHON = REPO / ".venv" / "bin" / "python"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

# Three instances on two hosts, as the deploy playbook builds them from a
# plan of a dual-socket TP4 host and a single-socket host.
# gpu-a serves one model, gpu-b another.
LLAMA = "meta-llama/Llama-3.1-70B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
LLAMA_BACKEND = "model-meta-llama_Llama-3.1-70B-Instruct"
BACKENDS = [
    {"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.20.0.11", "port": 8000, "model": LLAMA},
    {"name": "gpu-a-vllm-1", "host": "gpu-a", "address": "10.20.0.11", "port": 8001, "model": LLAMA},
    {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "fd00:20::12", "port": 8000, "model": QWEN},
]
# Secrets: none may appear in ansible-playbook's output; the gateway key
# not even in the configuration (only its digest).
GATEWAY_KEY = "gw-k3y#$HOME-0123456789"
BACKEND_KEY = 'sk-qwen "k3y" $HOME \\ #x \'q\' %Qw7L%[env(HOME)]'
# BACKEND_KEY as one double-quoted HAProxy word ('%' doubled: log-format).
BACKEND_KEY_WORD = '"Bearer sk-qwen \\"k3y\\" \\$HOME \\\\ #x \'q\' %%Qw7L%%[env(HOME)]"'

# What an unprivileged run into a staging directory needs.
STAGING = {
    "gateway_install": False,
    "gateway_manage_service": False,
    "gateway_listen_address": "127.0.0.1",
    "gateway_user": "",
    "gateway_group": "",
    "gateway_chroot": "",
    "gateway_admin_socket": "",
    "gateway_log_target": "",
}


@pytest.fixture(scope="module", autouse=True)
def haproxy_installed():
    """Every test here needs the real HAProxy: missing, they fail (a skip
    would hide that nothing was checked)."""
    if not os.access(HAPROXY, os.X_OK):
        pytest.fail("haproxy is not installed at %s: run scripts/setup (it installs it)" % HAPROXY)


# --- Harness: many cases, one ansible-playbook start-up ----------------------

def yaml_string(text):
    """A YAML double-quoted scalar that holds exactly `text`, whatever it
    holds (controls, quotes, characters outside the BMP)."""
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7f:
            out.append(char)
        elif code <= 0xff:
            out.append("\\x%02x" % code)
        elif code <= 0xffff:
            out.append("\\u%04x" % code)
        else:
            out.append("\\U%08x" % code)
    return '"' + "".join(out) + '"'


def yaml_value(value):
    """A value as YAML flow text. Strings that hold '{' are tagged !unsafe,
    so hostile values reach the role as they are and are never templated
    by the harness. Others are left untagged: Ansible 2.19 turns a
    templated !unsafe "0" into the integer 0 and !unsafe "" into None."""
    if isinstance(value, str):
        return ("!unsafe " if "{" in value else "") + yaml_string(value)
    if isinstance(value, dict):
        return "{" + ", ".join("%s: %s" % (yaml_string(str(k)), yaml_value(v)) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    return json.dumps(value)


PLAY = """\
- name: Gateway role, one host per case
  hosts: cases
  gather_facts: false
  tasks:
    - name: Run the role with the case's variables
      check_mode: "{{ case_check_mode }}"
      block:
        - name: Run the role
          ansible.builtin.include_role:
            name: gpufleet.numa.gateway
        - name: Record success
          ansible.builtin.set_fact:
            __case_result: "{{ {'failed': false, 'changed': __gateway_config.changed | default(false),
                                'backup_file': __gateway_config.backup_file | default(none),
                                'keepalived_changed': __gateway_keepalived_config.changed | default(false)} }}"
      rescue:
        - name: Record failure
          ansible.builtin.set_fact:
            __case_result: "{{ {'failed': true, 'msg': ansible_failed_result.msg | default('') | string} }}"

- name: Every case's outcome
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write every case's outcome
      ansible.builtin.copy:
        dest: "{{ case_results }}"
        content: "{{ dict(groups['cases'] | zip(groups['cases'] | map('extract', hostvars, '__case_result'))) | to_json }}"
        mode: "0644"
      check_mode: false
"""


def run_playbook(tmp_path, text, inventory="localhost,"):
    """One ansible-playbook start-up; return (returncode, combined output)."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(text)
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        # One JSON document per result: messages are not wrapped across lines.
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".ansible-tmp"),
    })
    command = [
        str(ANSIBLE_PLAYBOOK), "-i", inventory, "-c", "local",
        "-e", "ansible_python_interpreter=%s" % PYTHON, str(playbook),
    ]
    result = subprocess.run(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, check=False, timeout=1800,
    )
    return result.returncode, result.stdout


def run_cases(tmp_path, cases):
    """Run every case ({name: {"vars": {...}, "check_mode": bool}}) in one
    ansible-playbook start-up, each case a host; return ({name: outcome},
    output), outcome {"failed", "msg"} or {"failed", "changed", "backup_file"}."""
    results = tmp_path / "results.json"
    lines = ["all:", "  vars:", "    case_results: %s" % yaml_string(str(results)), "  hosts:",
             "    localhost: {case_check_mode: false}", "  children:", "    cases:", "      hosts:"]
    for name, case in cases.items():
        variables = dict(case["vars"], case_check_mode=bool(case.get("check_mode")))
        lines.append("        %s: %s" % (yaml_string(name), yaml_value(variables)))
    inventory = tmp_path / "cases.yml"
    inventory.write_text("\n".join(lines) + "\n")
    returncode, output = run_playbook(tmp_path, PLAY, inventory=str(inventory))
    assert returncode == 0, output
    outcomes = json.loads(results.read_text())
    assert sorted(outcomes) == sorted(cases), output
    return outcomes, output


def recap(output):
    """The PLAY RECAP counters of localhost as a dict of ints."""
    line = next(line for line in output.splitlines() if line.startswith("localhost") and "ok=" in line)
    return {key: int(value) for key, value in (field.split("=") for field in line.split()[2:])}


def haproxy_check(path):
    return subprocess.run(
        [HAPROXY, "-c", "-f", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, check=False, timeout=60,
    )


def assert_matches_golden(path, golden_name):
    # The Lua reader lies beside the configuration, in the case's directory.
    rendered = path.read_text().replace(str(path.parent) + "/", "CONFIG_DIR/")
    golden = GOLDEN / golden_name
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
    assert rendered == golden.read_text(), "%s differs from %s" % (path, golden)


def assert_accepted(outcome):
    assert not outcome["failed"], outcome["msg"]


def assert_rejected(outcome, *parts):
    assert outcome["failed"], "accepted, expected a failure with %s" % (parts,)
    for part in parts:
        assert part in outcome["msg"], outcome["msg"]
    assert "Traceback" not in outcome["msg"]


# --- Example cases: one start-up for all ---------------------------------------

# Rejected before anything is written: (variables, parts of the message).
REJECTED = {
    "no_backends": ({"gateway_backends": []}, ["gateway_backends: must hold at least one vLLM backend"]),
    "duplicate_names": (
        {"gateway_backends": [BACKENDS[0], dict(BACKENDS[1], name=BACKENDS[0]["name"])]},
        ["gateway_backends[1].name: must be unique; gateway_backends[0] has the same name"]),
    "port_out_of_range": (
        {"gateway_backends": [dict(BACKENDS[0], port=70000)]},
        ["gateway_backends[0].port: must be at most 65535 (got 70000)"]),
    "name_with_spaces": (
        {"gateway_backends": [dict(BACKENDS[0], name="gpu a/vllm 0")]},
        ["gateway_backends[0].name: must be 1-64 letters"]),
    "duplicate_address_port": (
        {"gateway_backends": [BACKENDS[0], dict(BACKENDS[0], name="other")]},
        ["gateway_backends[1]: address and port must be unique", "10.20.0.11:8000"]),
    "missing_port": (
        {"gateway_backends": [{"name": "gpu-a-vllm-0", "address": "10.20.0.11", "model": LLAMA}]},
        ["missing required arguments: port"]),
    "missing_model": (
        {"gateway_backends": [{"name": "gpu-a-vllm-0", "address": "10.20.0.11", "port": 8000}]},
        ["missing required arguments: model"]),
    "model_with_quote": (
        {"gateway_backends": [dict(BACKENDS[0], model="llama' if TRUE"), BACKENDS[2]]},
        ["gateway_backends[0].model: must be a served model name"]),
    "model_with_newline": (
        {"gateway_backends": [dict(BACKENDS[0], model="llama\n    bind :2222")]},
        ["gateway_backends[0].model: must not contain control characters"]),
    "wrong_backend_name": (
        {"gateway_backends": [dict(BACKENDS[0], backend="vllm")]},
        ["gateway_backends[0].backend: must be %s, the backend of model %s" % (LLAMA_BACKEND, LLAMA)]),
    # Beyond loopback without a key; keys that break their rule.
    "no_key_beyond_loopback": (
        {"gateway_listen_address": "0.0.0.0"},
        ["gateway_api_key: is required when the gateway listens beyond loopback (gateway_listen_address 0.0.0.0)"]),
    "short_key": ({"gateway_api_key": "sk-1"}, ["gateway_api_key: must be 16-512 printable ASCII", "(value hidden)"]),
    "key_with_newline": ({"gateway_api_key": GATEWAY_KEY + "\n    bind :2222"}, ["gateway_api_key: must be 16-512"]),
    "backend_key_with_newline": (
        {"gateway_backend_api_keys": {QWEN: BACKEND_KEY + "\n    server evil 6.6.6.6:80"}},
        ["gateway_backend_api_keys[%s]: must be 16-512 printable ASCII" % QWEN, "(value hidden)"]),
    "backend_key_unknown_model": (
        {"gateway_backend_api_keys": {"other": BACKEND_KEY}},
        ["gateway_backend_api_keys: names a model no backend serves"]),
    "tls_relative": ({"gateway_tls_certificate": "gateway.pem"}, ["gateway_tls_certificate: must be an absolute path"]),
    "tls_words": ({"gateway_tls_certificate": "/etc/ssl/gw.pem verify none"},
                  ["gateway_tls_certificate: must be an absolute path"]),
    "listen_port_zero": ({"gateway_listen_port": 0}, ["gateway_listen_port: must be at least 1 (got 0)"]),
    "stats_port_is_listen_port": (
        {"gateway_listen_port": 18080, "gateway_stats_port": 18080},
        ["gateway_stats_port: must differ from gateway_listen_port"]),
    # The probes that got lines into an installed configuration.
    "check_interval_backup_ssl_verify_none": (
        {"gateway_check_interval": "2s backup ssl verify none"},
        ["gateway_check_interval: must be an HAProxy duration", "(got '2s backup ssl verify none')"]),
    "external_check_command": (
        {"gateway_log_target": "/dev/log local0\n    external-check path /tmp",
         "gateway_check_path": "/health\n    option external-check\n    external-check command /tmp/x"},
        ["gateway_check_path: must not contain control characters", "(got '/health\\n"]),
    "extra_bind": (
        {"gateway_listen_address": "127.0.0.1:18080\n    bind 0.0.0.0:2222"},
        ["gateway_listen_address: must not contain control characters"]),
    "stats_page_on_frontend": (
        {"gateway_monitor_uri": "/gateway/health\n    stats enable\n    stats uri /admin\n    stats admin if TRUE"},
        ["gateway_monitor_uri: must not contain control characters"]),
    "log_target_newline": ({"gateway_log_target": "/dev/log\n"}, ["gateway_log_target: must not contain control"]),
    "timeout_newline": ({"gateway_timeout_server": "10m\n    bind :2222"}, ["gateway_timeout_server: must not"]),
    "stats_uri_newline": ({"gateway_stats_uri": "/stats\n    stats admin if TRUE"}, ["gateway_stats_uri: must not"]),
    "backend_host_newline": (
        {"gateway_backends": [dict(BACKENDS[0], host="gpu-a\n    server evil 6.6.6.6:80")]},
        ["gateway_backends[0].host: must not contain control characters"]),
    "backend_address_newline": (
        {"gateway_backends": [dict(BACKENDS[0], address="10.20.0.11\n    bind :2222")]},
        ["gateway_backends[0].address: must not contain control characters"]),
    "affinity_unknown_model": (
        {"gateway_affinity": {"other": {}}}, ["gateway_affinity: names a model no backend serves"]),
    "affinity_header_newline": (
        {"gateway_affinity": {LLAMA: {"session_header": "X-S\n    server evil 6.6.6.6:80"}}},
        ["gateway_affinity[%s].session_header: must not contain control characters" % LLAMA]),
    "affinity_unbounded": (
        {"gateway_affinity": {LLAMA: {"balance_factor": 0}}},
        ["gateway_affinity[%s].balance_factor: must be at least 101 (got 0)" % LLAMA]),
    "admin_socket_group_words": (
        {"gateway_admin_socket": "/run/haproxy/admin.sock", "gateway_admin_socket_group": "root level admin"},
        ["gateway_admin_socket_group: must be a user or group name"]),
}


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """All example cases in one ansible-playbook run."""
    tmp_path = tmp_path_factory.mktemp("gateway-examples")
    configs = {}

    def config(name):
        configs[name] = tmp_path / name / "haproxy.cfg"
        return str(configs[name])

    certificate = tmp_path / "gateway.pem"
    echoing = tmp_path / "echoing-haproxy"
    echoing.write_text('#!/bin/sh\necho "[ALERT] config: parsing error"; cat "$3" >&2; exit 1\n')
    echoing.chmod(0o755)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-keyout", str(certificate), "-out", str(certificate)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    cases = {
        "staging": dict(STAGING, gateway_config_path=config("staging"), gateway_backends=BACKENDS,
                        gateway_listen_port=18080, gateway_stats_port=18404),
        # Distribution defaults (haproxy user, chroot, admin socket, syslog,
        # every address, so a key), only the path moved so the test needs no root.
        "defaults": {"gateway_install": False, "gateway_manage_service": False,
                     "gateway_config_path": config("defaults"), "gateway_backends": BACKENDS,
                     "gateway_api_key": GATEWAY_KEY},
        # Every address, a key, a key for one model's instances, TLS.
        "secured": dict(STAGING, gateway_config_path=config("secured"), gateway_backends=BACKENDS,
                        gateway_listen_address="0.0.0.0", gateway_api_key=GATEWAY_KEY,
                        gateway_backend_api_keys={QWEN: BACKEND_KEY}, gateway_tls_certificate=str(certificate)),
        "allow_unauthenticated": dict(STAGING, gateway_config_path=config("allow_unauthenticated"),
                                      gateway_backends=BACKENDS, gateway_listen_address="0.0.0.0",
                                      gateway_allow_unauthenticated=True),
        "one_model": dict(STAGING, gateway_config_path=config("one_model"), gateway_backends=BACKENDS[:2]),
        # Prefix affinity for one model (docs/gateway.md "Routing").
        "affinity": dict(STAGING, gateway_config_path=config("affinity"), gateway_backends=BACKENDS,
                         gateway_affinity={LLAMA: {"prefix_bytes": 512, "session_header": "X-Session-Id"}}),
        # HAProxy judges the certificate file: a missing one is its message.
        "tls_missing_file": dict(STAGING, gateway_config_path=config("tls_missing_file"), gateway_backends=BACKENDS,
                                 gateway_tls_certificate=str(tmp_path / "missing.pem")),
        "admin_socket_group": {"gateway_install": False, "gateway_manage_service": False,
                               "gateway_config_path": config("admin_socket_group"),
                               "gateway_backends": BACKENDS, "gateway_admin_socket_group": "root",
                               "gateway_api_key": GATEWAY_KEY},
        "foreign_config": dict(STAGING, gateway_config_path=config("foreign_config"), gateway_backends=BACKENDS),
        # A value only HAProxy can judge (the user must exist): its own
        # message comes back, and the previous file stays.
        "haproxy_rejects": dict(STAGING, gateway_config_path=config("haproxy_rejects"), gateway_backends=BACKENDS,
                                gateway_user="nosuchuser"),
        # A validator that echoes the configuration (with the keys) and fails.
        "validator_echoes": dict(STAGING, gateway_config_path=config("validator_echoes"), gateway_backends=BACKENDS,
                                 gateway_backend_api_keys={QWEN: BACKEND_KEY}, gateway_haproxy=str(echoing)),
        "backups_with_keys": dict(STAGING, gateway_config_path=config("backups_with_keys"), gateway_backends=BACKENDS,
                                  gateway_backend_api_keys={QWEN: BACKEND_KEY}),
        "missing_binary": dict(STAGING, gateway_config_path=config("missing_binary"), gateway_backends=BACKENDS,
                               gateway_haproxy=str(tmp_path / "no-haproxy")),
    }
    cases = {name: {"vars": variables} for name, variables in cases.items()}
    cases["check_mode"] = {"check_mode": True, "vars": dict(
        STAGING, gateway_config_path=str(tmp_path / "check_mode" / "staging" / "haproxy.cfg"),
        gateway_backends=BACKENDS)}
    for name, (variables, dummy) in REJECTED.items():
        cases[name] = {"vars": dict(dict(STAGING, gateway_config_path=config(name), gateway_backends=BACKENDS),
                                    **variables)}
    configs["foreign_config"].parent.mkdir(parents=True)
    configs["foreign_config"].write_text("# hand-written by an operator\nglobal\n    maxconn 10\n")
    configs["backups_with_keys"].parent.mkdir(parents=True)
    configs["backups_with_keys"].write_text("# previous, with an old key\n")
    (configs["backups_with_keys"].parent / "haproxy.cfg.1.2020-01-01@00:00:00~").write_text("# old key\n")
    configs["haproxy_rejects"].parent.mkdir(parents=True)
    configs["haproxy_rejects"].write_text("# previous\n")
    outcomes, output = run_cases(tmp_path, cases)
    staging_text = configs["staging"].read_text() if configs["staging"].exists() else None
    return {"tmp_path": tmp_path, "configs": configs, "outcomes": outcomes, "output": output,
            "staging_text": staging_text, "certificate": certificate}


@pytest.fixture(scope="module")
def second_run(examples):
    """The staging case run again into the same directory, as its own
    ansible-playbook run: the recap must count no change."""
    tmp_path = examples["tmp_path"] / "second-run"
    tmp_path.mkdir()
    variables = dict(STAGING, gateway_config_path=str(examples["configs"]["staging"]), gateway_backends=BACKENDS,
                     gateway_listen_port=18080, gateway_stats_port=18404)
    return run_playbook(tmp_path, (
        "- name: Gateway role under test\n  hosts: localhost\n  gather_facts: false\n"
        "  roles:\n    - role: gpufleet.numa.gateway\n      vars: %s\n" % yaml_value(variables)))


def test_gateway_role_staging_renders_golden_config(examples):
    outcome = examples["outcomes"]["staging"]
    assert_accepted(outcome)
    assert outcome["changed"] and outcome["backup_file"] is None
    assert_matches_golden(examples["configs"]["staging"], "staging.cfg")


def test_gateway_role_staging_config_passes_haproxy_check_without_warnings(examples):
    check = haproxy_check(examples["configs"]["staging"])
    assert check.returncode == 0, check.stdout
    assert "WARNING" not in check.stdout, check.stdout


def test_gateway_role_second_run_changes_nothing(examples, second_run):
    returncode, output = second_run
    assert returncode == 0, output
    assert recap(output)["changed"] == 0, output
    config = examples["configs"]["staging"]
    assert config.read_text() == examples["staging_text"]
    # Nothing changed, so no backup was made either (the Lua reader of the
    # body's model lies beside the configuration).
    assert sorted(p.name for p in config.parent.iterdir()) == ["gpufleet-request-model.lua", "haproxy.cfg"]


def test_gateway_role_defaults_render_golden_config(examples):
    assert_accepted(examples["outcomes"]["defaults"])
    config = examples["configs"]["defaults"]
    assert_matches_golden(config, "defaults.cfg")
    check = haproxy_check(config)
    assert check.returncode == 0, check.stdout
    text = config.read_text()
    assert "    balance leastconn\n" in text
    assert "    option httpchk GET /health\n    http-check expect status 200\n" in text
    # weight 100: the agent answers a percentage of it (agent.SERVER_WEIGHT).
    assert "    default-server check inter 2s fall 3 rise 2 weight 100\n" in text
    assert "    timeout server 10m\n" in text and "    timeout client 10m\n" in text
    assert "    bind 0.0.0.0:8080\n" in text


def test_gateway_role_replays_requests_an_instance_dropped(examples):
    """L7 retries in the defaults section, with the body buffered so that
    HAProxy can replay it; `haproxy -c` accepts them (the test above). The
    body is waited for only after the key check (wait-for-body after the
    401 rule), not for every connection (option http-buffer-request). Only
    a request no instance answered is replayed, never one that outlasted
    timeout server (test_gateway_streams_and_errors.py runs them)."""
    text = examples["configs"]["defaults"].read_text()
    defaults = text.split("\ndefaults\n", 1)[1].split("\nfrontend ", 1)[0]
    assert "http-buffer-request" not in text
    frontend = text.split("\nfrontend vllm_api\n", 1)[1]
    assert frontend.index("return status 401") < frontend.index("    http-request wait-for-body time 10s\n")
    assert "    retry-on conn-failure empty-response\n" in defaults and "response-timeout" not in text
    assert "    option abortonclose\n" in defaults and "    option http-no-delay\n" in defaults
    assert "    option redispatch\n" in defaults


def section(text, header):
    """The lines of one section of a configuration, up to the next blank line."""
    return text.split("\n" + header + "\n", 1)[1].split("\n\n", 1)[0]


def test_gateway_role_routes_each_model_to_its_own_backend(examples):
    text = examples["configs"]["staging"].read_text()
    assert ("    use_backend %s if { var(txn.model) -m str '%s' }\n" % (LLAMA_BACKEND, LLAMA)) in text
    assert ("    use_backend model-Qwen_Qwen2.5-7B-Instruct if { var(txn.model) -m str '%s' }\n" % QWEN) in text
    sections = [line for line in text.splitlines() if line.startswith("backend ")]
    assert sections == ["backend " + LLAMA_BACKEND, "backend model-Qwen_Qwen2.5-7B-Instruct"]
    # Each server in its model's backend.
    llama = section(text, "backend " + LLAMA_BACKEND)
    assert "server gpu-a-vllm-0 " in llama and "server gpu-a-vllm-1 " in llama and "gpu-b" not in llama
    # Several models: a request naming none is refused, not guessed.
    assert "default_backend" not in text and "return status 400" in text
    models = re.search(r"lf-string '(\{\"object\":\"list\".*?)' if \{ path /v1/models \}", text).group(1)
    models = json.loads(re.sub(r"%\[nbsrv\([^)]*\)\]", "0", models))
    assert [m["id"] for m in models["data"]] == [LLAMA, QWEN] and models["object"] == "list"


def test_gateway_role_one_model_takes_requests_that_name_none(examples):
    assert_accepted(examples["outcomes"]["one_model"])
    config = examples["configs"]["one_model"]
    text = config.read_text()
    assert "    default_backend %s\n" % LLAMA_BACKEND in text and "No model in the request" not in text
    assert haproxy_check(config).returncode == 0


def test_gateway_role_affinity_hashes_one_models_prompt_prefix(examples):
    """A model named in gateway_affinity: a bounded-load consistent hash of
    the key the Lua reader took (the session header over it); the other
    model keeps leastconn; haproxy -c accepts it without a warning.
    tests/system/test_gateway_affinity.py runs it."""
    assert_accepted(examples["outcomes"]["affinity"])
    config = examples["configs"]["affinity"]
    check = haproxy_check(config)
    assert check.returncode == 0 and "WARNING" not in check.stdout, check.stdout
    text = config.read_text()
    assert "    http-request lua.gpufleet_request_model_prefix 512\n" in text
    llama = section(text, "backend " + LLAMA_BACKEND)
    assert ("    balance hash var(txn.affinity_key)\n" in llama and "    hash-type consistent\n" in llama
            and "    hash-balance-factor 125\n" in llama), llama
    key = llama.index("    http-request set-var(txn.affinity_key) var(txn.body_prefix),bytes(0,512)\n")
    header = llama.index("    http-request set-var(txn.affinity_key) req.fhdr(X-Session-Id) "
                         "if { req.fhdr(X-Session-Id) -m found }\n")
    assert key < header
    qwen = section(text, "backend model-Qwen_Qwen2.5-7B-Instruct")
    assert "    balance leastconn\n" in qwen and "hash" not in qwen and "affinity" not in qwen


def test_gateway_role_secured_config(examples):
    """TLS on the bind line, the gateway key as a digest only, the backend
    key in its model's backend only, the file 0640, no secret in the output."""
    assert_accepted(examples["outcomes"]["secured"])
    config = examples["configs"]["secured"]
    text = config.read_text()
    assert "    bind 0.0.0.0:8080 ssl crt %s\n" % examples["certificate"] in text
    digest = hashlib.sha256(("Bearer " + GATEWAY_KEY).encode()).hexdigest().upper()
    assert "req.fhdr(authorization),sha2(256),hex -m str %s }" % digest in text
    assert GATEWAY_KEY not in text
    qwen = section(text, "backend model-Qwen_Qwen2.5-7B-Instruct")
    assert "    http-request set-header Authorization %s\n" % BACKEND_KEY_WORD in qwen
    assert text.count(BACKEND_KEY_WORD) == 1
    llama = section(text, "backend " + LLAMA_BACKEND)
    assert "    http-request del-header Authorization\n" in llama
    assert oct(config.stat().st_mode & 0o777) == "0o640"
    check = haproxy_check(config)
    assert check.returncode == 0, check.stdout
    for secret in (GATEWAY_KEY, BACKEND_KEY, "gw-k3y", "sk-qwen"):
        assert secret not in examples["output"]


def test_gateway_role_allow_unauthenticated_opens_the_gateway(examples):
    assert_accepted(examples["outcomes"]["allow_unauthenticated"])
    text = examples["configs"]["allow_unauthenticated"].read_text()
    assert "    bind 0.0.0.0:8080\n" in text and "status 401" not in text


def test_gateway_role_missing_certificate_is_haproxys_message(examples):
    assert_rejected(examples["outcomes"]["tls_missing_file"], "haproxy.cfg was not written", "missing.pem")
    assert not examples["configs"]["tls_missing_file"].exists()


def test_gateway_role_admin_socket_is_private_by_default(examples):
    """The runtime API can drain servers and change weights: mode 0600
    unless a group is named."""
    sockets = [line for line in examples["configs"]["defaults"].read_text().splitlines() if "stats socket" in line]
    assert sockets == ["    stats socket /run/haproxy/admin.sock mode 600 level admin expose-fd listeners"]


def test_gateway_role_admin_socket_group_gets_0660(examples):
    assert_accepted(examples["outcomes"]["admin_socket_group"])
    config = examples["configs"]["admin_socket_group"]
    sockets = [line for line in config.read_text().splitlines() if "stats socket" in line]
    assert sockets == ["    stats socket /run/haproxy/admin.sock mode 660 group root level admin expose-fd listeners"]
    check = haproxy_check(config)
    assert check.returncode == 0, check.stdout


def test_gateway_role_check_mode_writes_nothing(examples):
    outcome = examples["outcomes"]["check_mode"]
    assert_accepted(outcome)
    assert outcome["changed"]  # it reports what it would do
    assert not (examples["tmp_path"] / "check_mode").exists()


def test_gateway_role_backs_up_foreign_config(examples):
    outcome = examples["outcomes"]["foreign_config"]
    assert_accepted(outcome)
    config = examples["configs"]["foreign_config"]
    backups = [p for p in config.parent.iterdir() if p.name not in ("haproxy.cfg", "gpufleet-request-model.lua")]
    assert len(backups) == 1, backups
    assert backups[0].name.startswith("haproxy.cfg.") and backups[0].name.endswith("~")
    assert backups[0].read_text() == "# hand-written by an operator\nglobal\n    maxconn 10\n"
    assert outcome["backup_file"] == str(backups[0])
    assert "was kept as %s" % backups[0] in examples["output"]
    assert "server gpu-a-vllm-0 10.20.0.11:8000" in config.read_text()


def test_gateway_role_haproxy_rejection_shows_haproxys_message(examples):
    """A configuration HAProxy rejects is not written, and the failure says
    what HAProxy said (the role used to validate with -q)."""
    assert_rejected(examples["outcomes"]["haproxy_rejects"], "haproxy.cfg was not written",
                    "cannot find user id for 'nosuchuser'")
    assert examples["configs"]["haproxy_rejects"].read_text() == "# previous\n"


def test_gateway_role_missing_haproxy_binary_fails_with_message(examples):
    assert_rejected(examples["outcomes"]["missing_binary"], "no-haproxy is missing or not executable")
    assert not examples["configs"]["missing_binary"].exists()


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_gateway_role_bad_input_fails_with_message_before_writing(examples, name):
    assert_rejected(examples["outcomes"][name], *REJECTED[name][1])
    assert not examples["configs"][name].parent.exists()
    for secret in ("gw-k3y", "sk-qwen", "sk-1"):
        assert secret not in examples["outcomes"][name]["msg"]


# --- Property: generated values through the real role and HAProxy's parser ----

GROUPS = ["root", "daemon", "nogroup"]
USERS = ["root", "daemon", "nobody"]
# A clean render with every optional line present and every value distinct,
# so each generated value has exactly one place in the configuration.
BASE = {
    "gateway_install": False, "gateway_manage_service": False, "gateway_backends": BACKENDS[:2],
    "gateway_listen_address": "127.0.0.1", "gateway_listen_port": 18080, "gateway_balance": "leastconn",
    "gateway_check_path": "/health", "gateway_check_interval": "2s", "gateway_check_fall": 3,
    "gateway_check_rise": 2, "gateway_timeout_connect": "5s", "gateway_timeout_client": "601s",
    "gateway_timeout_server": "602s", "gateway_timeout_tunnel": "603s", "gateway_timeout_http_request": "11s",
    "gateway_timeout_http_keep_alive": "12s", "gateway_timeout_queue": "30s", "gateway_retries": 4,
    "gateway_maxconn": 4096, "gateway_server_maxconn": 16, "gateway_monitor_uri": "/gateway/health",
    "gateway_stats_address": "127.0.0.2", "gateway_stats_port": 48404, "gateway_stats_uri": "/stats",
    "gateway_metrics_address": "127.0.0.3", "gateway_metrics_port": 48405,
    "gateway_log_target": "/dev/log", "gateway_user": "root", "gateway_group": "root",
    "gateway_chroot": "/var/empty", "gateway_admin_socket": "/run/haproxy/admin.sock",
    "gateway_admin_socket_group": "root", "gateway_api_key": GATEWAY_KEY,
}


def socket(address, port):
    address = str(ipaddress.ip_address(address)) if address != "localhost" else address
    return ("[%s]:%d" if ":" in address else "%s:%d") % (address, port)


def canonical_log_target(value):
    if value.startswith("["):
        host, dummy, port = value[1:].partition("]")
        return "[%s]%s" % (ipaddress.IPv6Address(host), port)
    return value


def timeout(name, index=2):
    return ("defaults", ("timeout", name), index, lambda v: v["gateway_timeout_" + name.replace("-", "_")])


# Where each variable lands: (section, first tokens of the line, token index,
# expected token from the case's variables).
PLACES = {
    "gateway_listen_address": [("frontend vllm_api", ("bind",), 1,
                                lambda v: socket(v["gateway_listen_address"], v["gateway_listen_port"]))],
    "gateway_stats_address": [("listen stats", ("bind",), 1,
                               lambda v: socket(v["gateway_stats_address"], v["gateway_stats_port"]))],
    "gateway_balance": [("backend %s" % LLAMA_BACKEND, ("balance",), 1, lambda v: v["gateway_balance"])],
    "gateway_check_path": [("backend %s" % LLAMA_BACKEND, ("option", "httpchk"), 3, lambda v: v["gateway_check_path"])],
    "gateway_check_interval": [("backend %s" % LLAMA_BACKEND, ("default-server",), 3, lambda v: v["gateway_check_interval"])],
    "gateway_check_fall": [("backend %s" % LLAMA_BACKEND, ("default-server",), 5, lambda v: str(v["gateway_check_fall"]))],
    "gateway_check_rise": [("backend %s" % LLAMA_BACKEND, ("default-server",), 7, lambda v: str(v["gateway_check_rise"]))],
    "gateway_server_maxconn": [("backend %s" % LLAMA_BACKEND, ("default-server",), 11, lambda v: str(v["gateway_server_maxconn"]))],
    "gateway_timeout_connect": [timeout("connect")],
    "gateway_timeout_client": [timeout("client")],
    "gateway_timeout_server": [timeout("server")],
    "gateway_timeout_tunnel": [timeout("tunnel")],
    "gateway_timeout_http_request": [timeout("http-request"),
                                     ("frontend vllm_api", ("http-request", "wait-for-body"), 3,
                                      lambda v: v["gateway_timeout_http_request"])],
    "gateway_timeout_http_keep_alive": [timeout("http-keep-alive")],
    "gateway_timeout_queue": [timeout("queue")],
    "gateway_retries": [("defaults", ("retries",), 1, lambda v: str(v["gateway_retries"]))],
    "gateway_maxconn": [("global", ("maxconn",), 1, lambda v: str(v["gateway_maxconn"])),
                        ("frontend vllm_api", ("maxconn",), 1, lambda v: str(v["gateway_maxconn"]))],
    "gateway_monitor_uri": [("frontend vllm_api", ("monitor-uri",), 1, lambda v: v["gateway_monitor_uri"])],
    "gateway_stats_uri": [("listen stats", ("stats", "uri"), 2, lambda v: v["gateway_stats_uri"])],
    "gateway_log_target": [("global", ("log",), 1, lambda v: canonical_log_target(v["gateway_log_target"]))],
    "gateway_user": [("global", ("user",), 1, lambda v: v["gateway_user"])],
    "gateway_group": [("global", ("group",), 1, lambda v: v["gateway_group"])],
    "gateway_chroot": [("global", ("chroot",), 1, lambda v: v["gateway_chroot"])],
    "gateway_admin_socket": [("global", ("stats", "socket"), 2, lambda v: v["gateway_admin_socket"])],
    "gateway_admin_socket_group": [("global", ("stats", "socket"), 6, lambda v: v["gateway_admin_socket_group"])],
    "gateway_backends": [
        ("backend %s" % LLAMA_BACKEND, ("server", BACKENDS[0]["name"]), None,
         lambda v: ("server", v["gateway_backends"][0]["name"],
                    socket(v["gateway_backends"][0]["address"], v["gateway_backends"][0]["port"]))),
    ],
}
PLACES["gateway_listen_port"] = PLACES["gateway_listen_address"]
PLACES["gateway_stats_port"] = PLACES["gateway_stats_address"]
PLACES["gateway_metrics_address"] = [("frontend prometheus", ("bind",), 1,
                                      lambda v: socket(v["gateway_metrics_address"], v["gateway_metrics_port"]))]
PLACES["gateway_metrics_port"] = PLACES["gateway_metrics_address"]

PATH_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/"
URL_CHARS = PATH_CHARS + "~!$&()*+,;=:@%?"
NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-"
# What no accepted value may hold: it would end a line, a word or the line's
# meaning (comment, quoting) in HAProxy's configuration.
FORBIDDEN = "\n\r\t\x00\x0b\x0c\x1b\x7f #'\"\\"
PROBES = ["\n    bind 0.0.0.0:2222", " backup ssl verify none", "\n    external-check command /tmp/x",
          "\n    option external-check", "\n    stats enable\n    stats uri /admin", "\r\n    stats admin if TRUE",
          "\n", " # comment", "\n    server evil 6.6.6.6:80"]

durations = st.builds(lambda n, unit: "%d%s" % (n, unit), st.integers(1, 999), st.sampled_from(["ms", "s", "m", "h", ""]))
http_paths = st.text(URL_CHARS, max_size=24).map(lambda text: "/" + text)
abs_paths = st.lists(st.text(PATH_CHARS.replace("/", "").replace(".", ""), min_size=1, max_size=10),
                     min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))
ips = st.ip_addresses().map(str)
log_targets = st.one_of(
    abs_paths,
    st.builds(lambda a, p: "%s:%d" % (a, p), st.ip_addresses(v=4).map(str), st.integers(1, 65535)),
    st.builds(lambda a, p: "[%s]:%d" % (a, p), st.ip_addresses(v=6).map(str), st.integers(1, 65535)),
)
backend_addresses = st.one_of(ips.filter(lambda a: checks.address_scope(a) != "unspecified"
                                         and socket(a, 8000) != "10.20.0.11:8001"),
                              st.just("localhost"))

VALID = {
    "gateway_listen_address": ips,
    "gateway_listen_port": st.integers(1, 30000),
    # The statistics page has no login: loopback only.
    "gateway_stats_address": st.one_of(st.ip_addresses(network="127.0.0.0/8").map(str), st.just("::1")),
    "gateway_stats_port": st.integers(30001, 47999),
    # The exporter: loopback here (beyond it, it takes the key: test_settings_metrics.py).
    "gateway_metrics_address": st.one_of(st.ip_addresses(network="127.0.0.0/8").map(str), st.just("::1")),
    "gateway_metrics_port": st.integers(48000, 65535).filter(lambda p: p != 48404),
    "gateway_balance": st.sampled_from(["leastconn", "roundrobin", "static-rr", "first", "source", "random"]),
    "gateway_check_path": http_paths,
    "gateway_check_interval": durations,
    "gateway_check_fall": st.integers(1, 1000),
    "gateway_check_rise": st.integers(1, 1000),
    "gateway_server_maxconn": st.integers(1, 100000),
    "gateway_timeout_connect": durations,
    "gateway_timeout_client": durations,
    "gateway_timeout_server": durations,
    "gateway_timeout_tunnel": durations,
    "gateway_timeout_http_request": durations,
    "gateway_timeout_http_keep_alive": durations,
    "gateway_timeout_queue": durations,
    "gateway_retries": st.integers(0, 100),
    "gateway_maxconn": st.integers(1, 100000),
    "gateway_monitor_uri": http_paths,
    "gateway_stats_uri": http_paths,
    "gateway_log_target": log_targets,
    "gateway_user": st.sampled_from(USERS),
    "gateway_group": st.sampled_from(GROUPS),
    "gateway_chroot": abs_paths,
    "gateway_admin_socket": abs_paths,
    "gateway_admin_socket_group": st.sampled_from(GROUPS),
    "gateway_backends": st.fixed_dictionaries({
        "name": st.text(NAME_CHARS, min_size=1, max_size=30).filter(lambda n: n != BACKENDS[1]["name"]),
        "host": st.text(NAME_CHARS + "@", min_size=1, max_size=30),
        "address": backend_addresses,
        "port": st.integers(1, 65535).filter(lambda p: p != 8001),
        "model": st.just(LLAMA),
    }),
}
# The backend field a hostile backends value spoils.
BACKEND_FIELDS = ["name", "host", "address", "model"]


@st.composite
def spoiled(draw, value):
    """`value` (as text) with hostile text inserted somewhere: a known probe,
    or any text holding at least one forbidden character."""
    text = str(value)
    payload = draw(st.one_of(
        st.sampled_from(PROBES),
        st.builds(lambda a, c, b: a + c + b, st.text(max_size=6), st.sampled_from(FORBIDDEN), st.text(max_size=6)),
    ))
    at = draw(st.integers(0, len(text)))
    return text[:at] + payload + text[at:]


@st.composite
def cases(draw):
    """One case: BASE with 1-3 variables changed, each to a valid value or
    a spoiled one; returns (variables, names of spoiled variables)."""
    variables = dict(BASE)
    names = draw(st.lists(st.sampled_from(sorted(VALID)), min_size=1, max_size=3, unique=True))
    hostile = []
    for name in names:
        value = draw(VALID[name])
        bad = draw(st.booleans())
        if name == "gateway_backends":
            if bad:
                field = draw(st.sampled_from(BACKEND_FIELDS))
                value = dict(value, **{field: draw(spoiled(value[field]))})
            value = [value, BACKENDS[1]]
        elif bad:
            value = draw(spoiled(value))
        variables[name] = value
        if bad:
            hostile.append(name)
    return variables, hostile


def directives(text):
    """(section, tokens) of every line that is not blank or a comment; a
    '#' ends a line's words as it does for HAProxy."""
    section, found = None, []
    for line in text.splitlines():
        tokens = tuple(line.split("#", 1)[0].split())
        if tokens[:1] == ("lua-load-per-thread",):
            tokens = (tokens[0], "CONFIG_DIR/" + tokens[1].rsplit("/", 1)[1])  # beside each case's configuration
        if not tokens:
            continue
        if not line[0].isspace():
            section = " ".join(tokens)
        found.append((section, tokens))
    return found


def expected_directives(clean, variables):
    """The clean render's lines with each changed variable's token(s) put in
    their one place; nothing else may differ."""
    expected = []
    for section, tokens in clean:
        tokens = list(tokens)
        for name, places in PLACES.items():
            if variables[name] == BASE[name]:
                continue
            for place_section, start, index, token in places:
                if section == place_section and tuple(tokens[:len(start)]) == start:
                    if index is None:
                        tokens = list(token(variables))
                    else:
                        tokens[index] = token(variables)
        expected.append((section, tuple(tokens)))
    return expected


PROPERTY_CASES = 40


def generate_cases(count=PROPERTY_CASES):
    """`count` cases drawn by Hypothesis, derandomized (the same cases on
    every run). Drawn here, not by @given on the test, so that one
    ansible-playbook run checks all of them."""
    drawn = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def draw(case):
        drawn.append(case)

    draw()
    return drawn[:count]


def test_gateway_role_generated_values_render_exactly_or_fail(tmp_path):
    """Generated values through the real role, checked by HAProxy's parser.

    A case whose changed values are all valid is written, passes
    `haproxy -c`, and its directive lines are exactly the clean render's
    with those values in their places: no extra bind, stats, server or
    external-check line, no word appended to a line. A case with a spoiled
    value (a probe, or text with a newline, space, '#', quote...) fails
    naming a spoiled variable, and writes nothing.
    """
    generated = generate_cases()
    config = {}
    run = {"clean": {"vars": dict(BASE, gateway_config_path=str(tmp_path / "clean" / "haproxy.cfg"))}}
    for index, (variables, dummy) in enumerate(generated):
        config[index] = tmp_path / str(index) / "haproxy.cfg"
        run["case-%d" % index] = {"vars": dict(variables, gateway_config_path=str(config[index]))}
    outcomes, output = run_cases(tmp_path, run)
    assert_accepted(outcomes["clean"])
    clean = directives((tmp_path / "clean" / "haproxy.cfg").read_text())
    assert haproxy_check(tmp_path / "clean" / "haproxy.cfg").returncode == 0
    summary = {"accepted": 0, "rejected": 0}
    for index, (variables, hostile) in enumerate(generated):
        outcome = outcomes["case-%d" % index]
        changed = {name: variables[name] for name in variables if variables[name] != BASE[name]}
        if hostile:
            assert outcome["failed"], "case %d %r was accepted:\n%s" % (
                index, changed, config[index].read_text() if config[index].exists() else "")
            assert any(name in outcome["msg"] for name in hostile), (index, changed, outcome["msg"])
            assert "Traceback" not in outcome["msg"]
            assert not config[index].exists(), (index, changed)
            summary["rejected"] += 1
        else:
            assert not outcome["failed"], "case %d %r was rejected: %s" % (index, changed, outcome["msg"])
            text = config[index].read_text()
            check = haproxy_check(config[index])
            assert check.returncode == 0, "case %d %r: %s" % (index, changed, check.stdout)
            assert directives(text) == expected_directives(clean, variables), (index, changed, text)
            summary["accepted"] += 1
    # Both kinds were generated, so both halves of the property ran.
    assert summary["accepted"] >= 5 and summary["rejected"] >= 5, summary


def test_gateway_role_failed_check_never_echoes_a_key(examples):
    """The validator's whole answer quotes the configuration, keys and all:
    the role reports it with every line that holds a fragment of a key
    withheld, and the failed task's own result is not shown."""
    outcome = examples["outcomes"]["validator_echoes"]
    assert_rejected(outcome, "haproxy.cfg was not written", "[ALERT] config: parsing error",
                    "(a line that mentions an API key, withheld)")
    assert "    balance leastconn" in outcome["msg"]  # lines without a key stay
    for fragment in {BACKEND_KEY[i:i + 4] for i in range(len(BACKEND_KEY) - 3)}:
        assert fragment not in outcome["msg"], fragment
    assert "Qw7L" not in examples["output"] and "sk-qwen" not in examples["output"]
    assert not examples["configs"]["validator_echoes"].exists()


def test_gateway_role_keeps_no_backup_of_a_config_with_keys(examples):
    assert_accepted(examples["outcomes"]["backups_with_keys"])
    config = examples["configs"]["backups_with_keys"]
    assert sorted(p.name for p in config.parent.iterdir()) == ["gpufleet-request-model.lua", "haproxy.cfg"]
    assert examples["outcomes"]["backups_with_keys"]["backup_file"] is None
    assert "no backup is kept (this file holds API keys)" in config.read_text()


ROLE = REPO / "roles" / "gateway"


def test_gateway_role_defaults_are_the_argument_specs_defaults():
    """defaults/main.yml is the one source of every default: the argument
    specs say the same, for every option, and the Python check has none."""
    import yaml

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(specs)
    for name, spec in sorted(specs.items()):
        assert "default" in spec, "%s: argument_specs.yml has no default" % name
        assert spec["default"] == defaults[name], "%s: defaults/main.yml %r, argument_specs.yml %r" % (
            name, defaults[name], spec["default"])
    passed = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
    from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import vrrp
    assert sorted(passed["__gateway_variables"]) == sorted(gateway_settings.VARIABLES)
    assert sorted(passed["__gateway_vrrp_variables"]) == sorted(vrrp.VARIABLES)
    assert sorted(defaults) == sorted(gateway_settings.VARIABLES + vrrp.VARIABLES)
    # Each variable missing from the check's input is an error, never a default.
    for name in gateway_settings.VARIABLES:
        with pytest.raises(ValueError, match="missing variable\\(s\\) %s;" % name):
            gateway_settings.check_settings(dict((n, defaults[n]) for n in gateway_settings.VARIABLES if n != name))
    for name in vrrp.VARIABLES:
        with pytest.raises(ValueError, match="missing variable\\(s\\) %s;" % name):
            vrrp.check_vrrp(dict((n, defaults[n]) for n in vrrp.VARIABLES if n != name), {}, "gw", {})


# --- Two gateways, one address (keepalived) -----------------------------------

KEEPALIVED = shutil.which("keepalived") or "/usr/sbin/keepalived"
VRRP_PASSWORD = "pa55-vr"
VRRP_SHARED = {"gateway_listen_address": "0.0.0.0", "gateway_allow_unauthenticated": True,
               "gateway_vrrp_address": "10.213.250.100/24", "gateway_vrrp_router_id": 213,
               "gateway_vrrp_password": VRRP_PASSWORD}


def vrrp_interface():
    """An interface of this machine keepalived -t accepts (not loopback), up ones first."""
    names = sorted(name for name in os.listdir("/sys/class/net") if name != "lo")
    up = [n for n in names if pathlib.Path("/sys/class/net/%s/operstate" % n).read_text().strip() in ("up", "unknown")]
    if not (up or names):
        pytest.fail("no network interface but lo: keepalived -t refuses lo for VRRP")
    return (up or names)[0]


@pytest.fixture(scope="module")
def vrrp_cases(tmp_path_factory):
    """Gateways in VRRP groups, one ansible-playbook run (then the pair again:
    nothing may change). Groups: pair (p1, p2: accepted; p3 the check-mode
    twin in check_pair), dup (same priority), echo (a validator that echoes
    the configuration and fails), and lone hosts with one bad value each."""
    if not os.access(KEEPALIVED, os.X_OK):
        pytest.fail("keepalived is not installed at %s: run scripts/setup (it installs it)" % KEEPALIVED)
    tmp_path = tmp_path_factory.mktemp("gateway-vrrp")
    interface = vrrp_interface()
    echoing = tmp_path / "echoing-keepalived"
    echoing.write_text('#!/bin/sh\necho "config: parsing error"; cat "$3" >&2; exit 1\n')
    echoing.chmod(0o755)
    results = tmp_path / "results.json"
    hosts, groups = {}, {}

    def host(name, group, priority, octet, check_mode=False, member=True, **extra):
        variables = dict(STAGING, **VRRP_SHARED)
        variables.update(gateway_backends=BACKENDS, gateway_vrrp_interface=interface, gateway_vrrp_group=group,
                         gateway_vrrp_priority=priority, gateway_vrrp_unicast_address="10.213.250.%d" % octet,
                         gateway_config_path=str(tmp_path / name / "haproxy.cfg"),
                         gateway_vrrp_config_path=str(tmp_path / name / "keepalived" / "keepalived.conf"),
                         case_check_mode=check_mode)
        variables.update(extra)
        hosts[name] = variables
        if member:
            groups.setdefault(group, []).append(name)

    host("p1", "pair", 150, 11)
    host("p2", "pair", 100, 12)
    host("c1", "check_pair", 150, 11, check_mode=True)
    host("c2", "check_pair", 100, 12, check_mode=True)
    host("d1", "dup", 100, 11)
    host("d2", "dup", 100, 12)
    host("e1", "echo", 150, 11, gateway_vrrp_keepalived=str(echoing))
    host("e2", "echo", 100, 12)
    for name, changes in VRRP_REJECTED.items():
        host(name, "pair", 120, 30, member=False, **changes[0])
    lines = ["all:", "  vars:", "    case_results: %s" % yaml_string(str(results)), "  hosts:",
             "    localhost: {case_check_mode: false}", "  children:", "    cases:", "      hosts:"]
    lines += ["        %s: %s" % (name, yaml_value(variables)) for name, variables in hosts.items()]
    for group, members in groups.items():
        lines += ["    %s:" % group, "      hosts:"] + ["        %s:" % member for member in members]
    inventory = tmp_path / "vrrp.yml"
    inventory.write_text("\n".join(lines) + "\n")
    returncode, output = run_playbook(tmp_path, PLAY, inventory=str(inventory))
    assert returncode == 0, output
    outcomes = json.loads(results.read_text())
    play = PLAY.replace("hosts: cases", "hosts: pair").replace("groups['cases']", "groups['pair']")
    again_code, again = run_playbook(tmp_path, play, inventory=str(inventory))
    return {"tmp_path": tmp_path, "outcomes": outcomes, "output": output, "interface": interface,
            "again": (again_code, again, json.loads(results.read_text()))}


# One bad value each (host in group pair, which it is not a member of: its
# own values are checked first): (variables, parts of the message).
VRRP_REJECTED = {
    "vrrp_no_prefix": ({"gateway_vrrp_address": "10.213.250.100"},
                       ["gateway_vrrp_address: must be an IPv4 address with its prefix length"]),
    "vrrp_interface_words": ({"gateway_vrrp_interface": "eth0 }\n"}, ["gateway_vrrp_interface: must not contain"]),
    "vrrp_router_id_zero": ({"gateway_vrrp_router_id": 0}, ["gateway_vrrp_router_id: must be at least 1 (got 0)"]),
    "vrrp_router_id_256": ({"gateway_vrrp_router_id": 256}, ["gateway_vrrp_router_id: must be at most 255"]),
    "vrrp_password_long": ({"gateway_vrrp_password": "pa55-vrrp"},
                           ["gateway_vrrp_password: must be at most 8 characters", "(value hidden)"]),
    "vrrp_no_priority": ({"gateway_vrrp_priority": 0}, ["gateway_vrrp_priority: must be at least 1 (got 0)"]),
    "vrrp_listen_loopback": ({"gateway_listen_address": "127.0.0.1"},
                             ["gateway_listen_address: must be 0.0.0.0 or :: when gateway_vrrp_address is set"]),
    "vrrp_not_in_group": ({}, ["gateway_vrrp_group: this gateway (vrrp_not_in_group) is not in group pair"]),
}


def test_gateway_role_vrrp_pair_renders_golden_keepalived_conf(vrrp_cases):
    for name in ("p1", "p2"):
        outcome = vrrp_cases["outcomes"][name]
        assert_accepted(outcome)
        assert outcome["keepalived_changed"]
        directory = vrrp_cases["tmp_path"] / name / "keepalived"
        conf = directory / "keepalived.conf"
        text = conf.read_text().replace(str(directory) + "/", "CONFIG_DIR/")
        text = text.replace(" %s" % vrrp_cases["interface"], " INTERFACE")
        golden = GOLDEN / ("keepalived-%s.conf" % name)
        if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
            golden.write_text(text)
        assert text == golden.read_text(), "%s differs from %s" % (conf, golden)
        assert oct(conf.stat().st_mode & 0o777) == "0o600"
        script = directory / "gpufleet-haproxy-check"
        assert os.access(script, os.X_OK)
        assert "'http://127.0.0.1:8080/gateway/health'" in script.read_text()
        # The track script as rendered is a clean shell script (scripts/lint
        # shellchecks the repository's scripts, not templates).
        lint = subprocess.run(["shellcheck", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=60, check=False)
        assert lint.returncode == 0, lint.stdout
        # keepalived itself accepts it (the role validated it the same way).
        check = subprocess.run([KEEPALIVED, "-t", "-f", str(conf)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=60, check=False)
        assert check.returncode == 0, check.stdout
        # The HAProxy configuration is what it is without VRRP.
        assert haproxy_check(vrrp_cases["tmp_path"] / name / "haproxy.cfg").returncode == 0
    assert VRRP_PASSWORD not in vrrp_cases["output"]


def test_gateway_role_vrrp_keepalived_t_refuses_what_keepalived_refuses(vrrp_cases, tmp_path):
    """keepalived -t can fail: the validation the role relies on is real."""
    conf = vrrp_cases["tmp_path"] / "p1" / "keepalived" / "keepalived.conf"
    broken = tmp_path / "keepalived.conf"
    broken.write_text(conf.read_text().replace("    nopreempt\n", "    nopreempt\n    no_such_keyword 1\n"))
    check = subprocess.run([KEEPALIVED, "-t", "-f", str(broken)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60, check=False)
    assert check.returncode != 0 and "no_such_keyword" in check.stdout, check.stdout


def test_gateway_role_vrrp_second_run_changes_nothing(vrrp_cases):
    code, output, outcomes = vrrp_cases["again"]
    assert code == 0, output
    for name in ("p1", "p2"):
        assert_accepted(outcomes[name])
        assert not outcomes[name]["keepalived_changed"] and not outcomes[name]["changed"]
    assert VRRP_PASSWORD not in output


def test_gateway_role_vrrp_check_mode_writes_nothing(vrrp_cases):
    for name in ("c1", "c2"):
        assert_accepted(vrrp_cases["outcomes"][name])
        assert not (vrrp_cases["tmp_path"] / name).exists()


def test_gateway_role_vrrp_same_priority_refused(vrrp_cases):
    for name in ("d1", "d2"):
        assert_rejected(vrrp_cases["outcomes"][name], "gateway_vrrp_priority: must differ on every gateway of group dup",
                        "d1 and d2" if name == "d1" else "d2 and d1", "both have 100")
        assert not (vrrp_cases["tmp_path"] / name).exists()


def test_gateway_role_vrrp_failed_validation_never_echoes_the_password(vrrp_cases):
    outcome = vrrp_cases["outcomes"]["e1"]
    assert_rejected(outcome, "keepalived.conf was not written", "config: parsing error")
    assert VRRP_PASSWORD not in outcome["msg"] and VRRP_PASSWORD not in vrrp_cases["output"]
    assert not (vrrp_cases["tmp_path"] / "e1" / "keepalived" / "keepalived.conf").exists()
    assert_accepted(vrrp_cases["outcomes"]["e2"])


@pytest.mark.parametrize("name", sorted(VRRP_REJECTED))
def test_gateway_role_vrrp_bad_input_fails_before_writing(vrrp_cases, name):
    assert_rejected(vrrp_cases["outcomes"][name], *VRRP_REJECTED[name][1])
    assert not (vrrp_cases["tmp_path"] / name).exists()
    assert VRRP_PASSWORD not in vrrp_cases["outcomes"][name]["msg"]
