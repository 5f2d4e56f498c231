# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Role gpufleet.numa.gateway, run for real with ansible-playbook.

Each test renders the HAProxy configuration into a temporary directory
(local connection, nothing installed or started) and checks it with the
real `haproxy -c`. Rendered files are compared with golden files under
golden/gateway/; set GPUFLEET_UPDATE_GOLDEN=1 to rewrite them after a
deliberate change.
"""

import json
import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "gateway"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PYTHON = REPO / ".venv" / "bin" / "python"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

pytestmark = pytest.mark.skipif(
    not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (scripts/setup installs it)"
)

PLAYBOOK = """\
- name: Gateway role under test
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.numa.gateway
"""

# Three instances on two hosts, as the deploy playbook builds them from a
# plan of a dual-socket TP4 host and a single-socket host.
BACKENDS = [
    {"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.20.0.11", "port": 8000},
    {"name": "gpu-a-vllm-1", "host": "gpu-a", "address": "10.20.0.11", "port": 8001},
    {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "fd00:20::12", "port": 8000},
]

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


def run_role(tmp_path, variables, check=False):
    """Run the role once; return (returncode, combined output)."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(variables))
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        # One JSON document per result: messages are not wrapped across lines.
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".ansible-tmp"),
    })
    command = [
        str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
        "-e", "ansible_python_interpreter=%s" % PYTHON,
        "-e", "@%s" % extra, str(playbook),
    ]
    if check:
        command.append("--check")
    result = subprocess.run(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, check=False, timeout=300,
    )
    return result.returncode, result.stdout


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
    rendered = path.read_text()
    golden = GOLDEN / golden_name
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
    assert rendered == golden.read_text(), "%s differs from %s" % (path, golden)


@pytest.fixture(scope="module")
def staging_run(tmp_path_factory):
    """The role run twice into the same staging directory."""
    tmp_path = tmp_path_factory.mktemp("gateway-staging")
    config = tmp_path / "gateway" / "haproxy.cfg"
    variables = dict(STAGING, gateway_config_path=str(config), gateway_backends=BACKENDS,
                     gateway_listen_port=18080, gateway_stats_port=18404)
    first = run_role(tmp_path, variables)
    rendered_after_first = config.read_text() if config.exists() else None
    second = run_role(tmp_path, variables)
    return {"config": config, "first": first, "second": second, "after_first": rendered_after_first}


def test_gateway_role_staging_renders_golden_config(staging_run):
    returncode, output = staging_run["first"]
    assert returncode == 0, output
    assert recap(output)["changed"] >= 1
    assert_matches_golden(staging_run["config"], "staging.cfg")


def test_gateway_role_staging_config_passes_haproxy_check_without_warnings(staging_run):
    check = haproxy_check(staging_run["config"])
    assert check.returncode == 0, check.stdout
    assert "WARNING" not in check.stdout, check.stdout


def test_gateway_role_second_run_changes_nothing(staging_run):
    returncode, output = staging_run["second"]
    assert returncode == 0, output
    assert recap(output)["changed"] == 0, output
    assert staging_run["config"].read_text() == staging_run["after_first"]
    # Nothing changed, so no backup was made either.
    assert sorted(p.name for p in staging_run["config"].parent.iterdir()) == ["haproxy.cfg"]


def test_gateway_role_defaults_render_golden_config(tmp_path):
    """Distribution defaults (haproxy user, chroot, admin socket, syslog),
    only the path moved so the test needs no root."""
    config = tmp_path / "etc" / "haproxy" / "haproxy.cfg"
    variables = {"gateway_install": False, "gateway_manage_service": False,
                 "gateway_config_path": str(config), "gateway_backends": BACKENDS}
    returncode, output = run_role(tmp_path, variables)
    assert returncode == 0, output
    assert_matches_golden(config, "defaults.cfg")
    check = haproxy_check(config)
    assert check.returncode == 0, check.stdout
    text = config.read_text()
    assert "    balance leastconn\n" in text
    assert "    option httpchk GET /health\n    http-check expect status 200\n" in text
    assert "    default-server check inter 2s fall 3 rise 2\n" in text
    assert "    timeout server 10m\n" in text and "    timeout client 10m\n" in text
    assert "    bind 0.0.0.0:8080\n" in text


def test_gateway_role_check_mode_writes_nothing(tmp_path):
    config = tmp_path / "staging" / "gateway" / "haproxy.cfg"
    variables = dict(STAGING, gateway_config_path=str(config), gateway_backends=BACKENDS)
    returncode, output = run_role(tmp_path, variables, check=True)
    assert returncode == 0, output
    assert recap(output)["changed"] >= 1  # it reports what it would do
    assert not (tmp_path / "staging").exists()


def test_gateway_role_backs_up_foreign_config(tmp_path):
    config = tmp_path / "gateway" / "haproxy.cfg"
    config.parent.mkdir()
    foreign = "# hand-written by an operator\nglobal\n    maxconn 10\n"
    config.write_text(foreign)
    variables = dict(STAGING, gateway_config_path=str(config), gateway_backends=BACKENDS)
    returncode, output = run_role(tmp_path, variables)
    assert returncode == 0, output
    backups = [p for p in config.parent.iterdir() if p.name != "haproxy.cfg"]
    assert len(backups) == 1, backups
    assert backups[0].name.startswith("haproxy.cfg.") and backups[0].name.endswith("~")
    assert backups[0].read_text() == foreign
    assert "was kept as %s" % backups[0] in output
    assert "server gpu-a-vllm-0 10.20.0.11:8000" in config.read_text()


def test_gateway_role_invalid_config_is_not_written(tmp_path):
    """A value HAProxy rejects fails the validation, and the old file stays."""
    config = tmp_path / "gateway" / "haproxy.cfg"
    config.parent.mkdir()
    config.write_text("# previous\n")
    variables = dict(STAGING, gateway_config_path=str(config), gateway_backends=BACKENDS,
                     gateway_check_interval="soon")
    returncode, output = run_role(tmp_path, variables)
    assert returncode != 0, output
    assert "failed to validate" in output
    assert config.read_text() == "# previous\n"


@pytest.mark.parametrize(
    "backends, message",
    [
        pytest.param([], "gateway_backends is empty", id="no_backends"),
        pytest.param(
            [BACKENDS[0], dict(BACKENDS[1], name=BACKENDS[0]["name"])],
            "duplicate backend name(s) gpu-a-vllm-0", id="duplicate_names"),
        pytest.param(
            [dict(BACKENDS[0], port=70000)],
            "gateway_backends entry gpu-a-vllm-0 (10.20.0.11:70000) is invalid", id="port_out_of_range"),
        pytest.param(
            [dict(BACKENDS[0], name="gpu a/vllm 0")],
            "gateway_backends entry gpu a/vllm 0", id="name_with_spaces"),
        pytest.param(
            [BACKENDS[0], dict(BACKENDS[0], name="other")],
            "10.20.0.11:8000 appears more than once", id="duplicate_address_port"),
        pytest.param(
            [{"name": "gpu-a-vllm-0", "address": "10.20.0.11"}],
            "missing required arguments: port", id="missing_port"),
    ],
)
def test_gateway_role_bad_backends_fail_with_message(tmp_path, backends, message):
    config = tmp_path / "gateway" / "haproxy.cfg"
    variables = dict(STAGING, gateway_config_path=str(config), gateway_backends=backends)
    returncode, output = run_role(tmp_path, variables)
    assert returncode != 0, output
    assert message in output, output
    assert "Traceback" not in output
    assert not config.exists()


def test_gateway_role_bad_listen_port_fails_with_message(tmp_path):
    config = tmp_path / "gateway" / "haproxy.cfg"
    variables = dict(STAGING, gateway_config_path=str(config), gateway_backends=BACKENDS,
                     gateway_listen_port=0)
    returncode, output = run_role(tmp_path, variables)
    assert returncode != 0, output
    assert "gateway_listen_port (0) must lie in 1-65535" in output, output
    assert not config.exists()


def test_gateway_role_missing_haproxy_binary_fails_with_message(tmp_path):
    config = tmp_path / "gateway" / "haproxy.cfg"
    variables = dict(STAGING, gateway_config_path=str(config), gateway_backends=BACKENDS,
                     gateway_haproxy=str(tmp_path / "no-haproxy"))
    returncode, output = run_role(tmp_path, variables)
    assert returncode != 0, output
    assert "no-haproxy is missing or not executable" in output, output
    assert not config.exists()
