# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Role gpufleet.numa.prometheus, run for real with ansible-playbook on this
machine (local connection, nothing installed or started): the fleet's
files the deploy wrote are installed, the rules and the configuration pass
Debian's real promtool before they are written, a second run changes
nothing, check mode writes nothing, and rules promtool refuses are not
installed. The defaults are the argument specs' and the Python check's."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.filter import metrics as metrics_filters
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import prometheus, rules

REPO = pathlib.Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "prometheus"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PYTHON = REPO / ".venv" / "bin" / "python"
PROMTOOL = shutil.which("promtool")
KEY = "sk-gw-0123456789abcdef"

PLAY = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.numa.prometheus
      vars: {variables}
"""


def fleet_files(directory):
    """What the deploy writes into gpufleet_metrics_dir (one instance, one gateway, one node)."""
    directory.mkdir(parents=True)
    targets = [{"targets": ["10.0.0.11:8000"], "labels": {"host": "gpu-a", "instance": "gpu-a/vllm-0"}}]
    (directory / "vllm.json").write_text(json.dumps(targets))
    (directory / "gateway.json").write_text(json.dumps([]))
    (directory / "node.json").write_text(json.dumps([]))
    (directory / "rules.yml").write_text(metrics_filters._text("rules.yml", rules.alert_rules("1m")))
    return directory


def run_role(tmp_path, variables, check=False):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY.format(variables=json.dumps(variables)))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible-tmp"))
    command = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
               "-e", "ansible_python_interpreter=%s" % PYTHON, str(playbook)] + (["--check"] if check else [])
    result = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False, timeout=600)
    return result.returncode, result.stdout


def recap(output):
    line = next(line for line in output.splitlines() if line.startswith("localhost") and "ok=" in line)
    return {key: int(value) for key, value in (field.split("=") for field in line.split()[2:])}


@pytest.fixture
def case(tmp_path):
    config = tmp_path / "etc"
    variables = {"prometheus_install": False, "prometheus_node_exporter": False, "prometheus_manage_service": False,
                 "prometheus_config_dir": str(config), "prometheus_files_dir": str(fleet_files(tmp_path / "files")),
                 "prometheus_gateway_api_key": KEY}
    return {"tmp": tmp_path, "config": config, "variables": variables}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/setup installs Debian's prometheus")
def test_prometheus_role_installs_checked_files_once(case):
    config = case["config"]
    returncode, output = run_role(case["tmp"], case["variables"], check=True)
    assert returncode == 0, output
    assert not config.exists() or not any(config.rglob("*")), "check mode wrote %s" % list(config.rglob("*"))

    returncode, output = run_role(case["tmp"], case["variables"])
    assert returncode == 0, output
    assert recap(output)["changed"] > 0
    installed = config / prometheus.SUBDIRECTORY
    for name in ("vllm.json", "gateway.json", "node.json", "rules.yml"):
        assert (installed / name).read_text() == (case["tmp"] / "files" / name).read_text(), name
    assert (installed / prometheus.GATEWAY_KEY_FILE).read_text() == KEY
    assert oct((installed / prometheus.GATEWAY_KEY_FILE).stat().st_mode & 0o777) == "0o640"
    written = yaml.safe_load((config / "prometheus.yml").read_text())
    assert written["rule_files"] == [str(installed / "rules.yml")]
    assert written["scrape_configs"][2]["authorization"]["credentials_file"] == str(
        installed / prometheus.GATEWAY_KEY_FILE)
    assert KEY not in (config / "prometheus.yml").read_text() and KEY not in output
    checked = subprocess.run([PROMTOOL, "check", "config", str(config / "prometheus.yml")], capture_output=True,
                             text=True, check=False, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    returncode, output = run_role(case["tmp"], case["variables"])
    assert returncode == 0, output
    assert recap(output)["changed"] == 0, output


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/setup installs Debian's prometheus")
def test_prometheus_role_refuses_rules_promtool_refuses(case):
    (case["tmp"] / "files" / "rules.yml").write_text("groups:\n- name: x\n  rules:\n  - alert: A\n    expr: up ==\n")
    returncode, output = run_role(case["tmp"], case["variables"])
    assert returncode != 0
    assert "failed to validate" in output
    assert not (case["config"] / prometheus.SUBDIRECTORY / "rules.yml").exists()
    assert not (case["config"] / "prometheus.yml").exists()


def test_prometheus_role_bad_variable_fails_before_anything_is_written(case):
    returncode, output = run_role(case["tmp"], dict(case["variables"], prometheus_scrape_interval="often"))
    assert returncode != 0
    assert "prometheus_scrape_interval: must be a Prometheus duration" in output
    assert not case["config"].exists()


def test_prometheus_role_defaults_are_the_argument_specs_defaults():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(specs)
    for name, spec in specs.items():
        assert spec["default"] == defaults[name], name
    passed = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__prometheus_variables"]
    assert sorted(passed) == sorted(defaults) == sorted(prometheus.VARIABLES)
