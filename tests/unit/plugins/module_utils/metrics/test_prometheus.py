# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""metrics/prometheus.py: the prometheus role's variables checked whole
(errors name the variable, a key is never shown), the configuration they
give accepted by Debian's real `promtool check config`, and the node
exporters' targets."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.filter import metrics as metrics_filters
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import prometheus, rules
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

PROMTOOL = shutil.which("promtool")
with open(os.path.join(fixture_paths.REPO, "roles", "prometheus", "defaults", "main.yml")) as _defaults:
    ROLE_DEFAULTS = dict(yaml.safe_load(_defaults), prometheus_files_dir="/srv/gpufleet/prometheus")


def promtool(*args):
    return subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, timeout=60, check=False)


def write_rules(directory):
    path = directory / prometheus.RULE_FILE
    path.write_text(metrics_filters._text("rules.yml", rules.alert_rules("1m")))
    return path


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/setup installs Debian's prometheus")
@pytest.mark.parametrize("key", ["", "sk-gw-0123456789abcdef"])
def test_promtool_accepts_the_scrape_configuration(tmp_path, key):
    settings = metrics_filters.prometheus_settings(dict(
        ROLE_DEFAULTS, prometheus_config_dir=str(tmp_path), prometheus_gateway_api_key=key))
    directory = tmp_path / prometheus.SUBDIRECTORY
    directory.mkdir()
    write_rules(directory)
    (directory / prometheus.GATEWAY_KEY_FILE).write_text(key)
    config = tmp_path / "prometheus.yml"
    config.write_text(settings["config"])
    result = promtool("check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = yaml.safe_load(settings["config"])["scrape_configs"]
    assert [j["job_name"] for j in jobs] == ["prometheus", rules.VLLM_JOB, rules.GATEWAY_JOB, rules.NODE_JOB]
    assert ("authorization" in jobs[2]) is bool(key)


@pytest.mark.parametrize("name, value, message", [
    ("prometheus_scrape_interval", "15", "prometheus_scrape_interval: must be a Prometheus duration"),
    ("prometheus_config_dir", "etc/prometheus", "prometheus_config_dir"),
    ("prometheus_self_port", 0, "prometheus_self_port"),
    ("prometheus_server", "maybe", "prometheus_server: must be a boolean"),
    ("prometheus_gateway_api_key", "short", "prometheus_gateway_api_key"),
    ("prometheus_files_dir", "", "prometheus_files_dir: is required with prometheus_server"),
    ("prometheus_manage_service", "sometimes", "prometheus_manage_service"),
    ("prometheus_server_package", "prometheus; rm", "prometheus_server_package"),
])
def test_role_settings_errors_name_the_variable(name, value, message):
    """Each bad value fails naming its variable; a key is never shown."""
    with pytest.raises(Exception, match=message) as caught:
        metrics_filters.prometheus_settings(dict(ROLE_DEFAULTS, **{name: value}))
    assert "short" not in str(caught.value) or name != "prometheus_gateway_api_key"


def test_role_settings_name_missing_and_unknown_variables():
    with pytest.raises(Exception, match=r"missing variable\(s\) prometheus_self_port; unknown variable\(s\) prometheus_x"):
        metrics_filters.prometheus_settings(dict(
            [(k, v) for k, v in ROLE_DEFAULTS.items() if k != "prometheus_self_port"], prometheus_x=1))


def test_without_a_server_no_files_are_needed():
    settings = metrics_filters.prometheus_settings(dict(ROLE_DEFAULTS, prometheus_server=False, prometheus_files_dir=""))
    assert (settings["server"], settings["node_exporter"], settings["files_dir"]) == (False, True, "")


def test_node_targets_one_per_host_sorted():
    assert prometheus.node_targets({"gpu-b": "fd00::2", "gpu-a": "10.0.0.1"}, 9100) == [
        {"targets": ["10.0.0.1:9100"], "labels": {"host": "gpu-a", "instance": "gpu-a/node"}},
        {"targets": ["[fd00::2]:9100"], "labels": {"host": "gpu-b", "instance": "gpu-b/node"}}]


@pytest.mark.parametrize("hosts, port, message", [
    ({"gpu-a": "10.0.0.1"}, 0, "gpufleet_node_exporter_port"),
    ({"gpu-a": "10.0.0.1 x"}, 9100, r"host gpu-a address \(ansible_host\)"),
    # a wildcard is where a listener waits, not a scrape target
    ({"gpu-a": "10.0.0.1", "gpu-b": "0.0.0.0"}, 9100,
     r"^host gpu-b address \(ansible_host\): must be an address Prometheus can connect to, not the wildcard 0\.0\.0\.0"),
    ({"gpu-a": "::"}, 9100, r"^host gpu-a address \(ansible_host\): must be an address Prometheus can connect to"),
])
def test_node_target_errors_name_the_field(hosts, port, message):
    with pytest.raises(ValueError, match=message):
        prometheus.node_targets(hosts, port)
