# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The prometheus role's settings, checked whole, and the configuration
they give.

check_settings() takes the role's variables (plain dict) and returns the
checked values; scrape_config() builds prometheus.yml from them: one job
per file_sd file the deploy writes (vLLM instances, gateways, node
exporters), the rule file beside them, and Prometheus itself. The role's
template only writes the result as YAML. Pure functions, standard library
only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import rules, targets

# The files the deploy writes into gpufleet_metrics_dir and the role
# installs into prometheus_config_dir/gpufleet/ (docs/metrics.md).
TARGET_FILES = {rules.VLLM_JOB: "vllm.json", rules.GATEWAY_JOB: "gateway.json", rules.NODE_JOB: "node.json"}
RULE_FILE = "rules.yml"
SUBDIRECTORY = "gpufleet"
GATEWAY_KEY_FILE = "gateway-api-key"


# Every variable the role takes (defaults/main.yml gives each a value).
VARIABLES = (
    "prometheus_server", "prometheus_node_exporter", "prometheus_install", "prometheus_server_package",
    "prometheus_node_exporter_package", "prometheus_files_dir", "prometheus_scrape_interval",
    "prometheus_evaluation_interval", "prometheus_config_dir", "prometheus_self_address", "prometheus_self_port",
    "prometheus_gateway_api_key", "prometheus_manage_service",
)
PACKAGE_RULE = "must be a package name (letters, digits, '+', '.', '_', '-')"


def check_settings(variables):
    """The role's variables, checked (keys without the prometheus_ prefix,
    plus gpufleet_dir); ValueError names the variable and its rule."""
    v = checks.exact_names("prometheus_settings", variables, VARIABLES)
    out = {
        "server": checks.boolean("prometheus_server", v["prometheus_server"]),
        "node_exporter": checks.boolean("prometheus_node_exporter", v["prometheus_node_exporter"]),
        "install": checks.boolean("prometheus_install", v["prometheus_install"]),
        "scrape_interval": rules.duration("prometheus_scrape_interval", v["prometheus_scrape_interval"]),
        "evaluation_interval": rules.duration("prometheus_evaluation_interval", v["prometheus_evaluation_interval"]),
        "config_dir": checks.absolute_path("prometheus_config_dir", v["prometheus_config_dir"]),
        "self_address": checks.address("prometheus_self_address", v["prometheus_self_address"]),
        "self_port": checks.port("prometheus_self_port", v["prometheus_self_port"]),
        "manage_service": gateway_settings.manage_service("prometheus_manage_service", v["prometheus_manage_service"]),
    }
    for name in ("prometheus_server_package", "prometheus_node_exporter_package"):
        out[name[len("prometheus_"):]] = checks.text(name, v[name], gateway_settings.PACKAGE, PACKAGE_RULE)
    key = v["prometheus_gateway_api_key"]
    out["gateway_api_key"] = checks.api_key("prometheus_gateway_api_key", key) if key else ""
    files_dir = v["prometheus_files_dir"]
    out["files_dir"] = checks.absolute_path("prometheus_files_dir", files_dir, allow_empty=True)
    if out["server"] and not out["files_dir"]:
        checks.fail("prometheus_files_dir", "is required with prometheus_server: the controller directory "
                    "the deploy writes the Prometheus files into (gpufleet_metrics_dir; the playbook "
                    "gpufleet.numa.monitoring sets it)", files_dir)
    out["gpufleet_dir"] = out["config_dir"].rstrip("/") + "/" + SUBDIRECTORY
    out["files"] = [TARGET_FILES[job] for job in (rules.VLLM_JOB, rules.GATEWAY_JOB, rules.NODE_JOB)]
    out["rule_file"] = RULE_FILE
    out["gateway_key_file"] = GATEWAY_KEY_FILE
    return out


def scrape_config(settings):
    """prometheus.yml (a dict) for checked settings."""
    directory = settings["gpufleet_dir"]
    jobs = [{
        "job_name": "prometheus",
        "static_configs": [{"targets": ["%s:%d" % (settings["self_address"], settings["self_port"])]}],
    }]
    for job in (rules.VLLM_JOB, rules.GATEWAY_JOB, rules.NODE_JOB):
        entry = {"job_name": job, "file_sd_configs": [{"files": ["%s/%s" % (directory, TARGET_FILES[job])]}]}
        if job == rules.GATEWAY_JOB and settings["gateway_api_key"]:
            # The exporter behind the gateway's key (docs/metrics.md).
            entry["authorization"] = {"type": "Bearer",
                                      "credentials_file": "%s/%s" % (directory, GATEWAY_KEY_FILE)}
        jobs.append(entry)
    return {
        "global": {"scrape_interval": settings["scrape_interval"],
                   "evaluation_interval": settings["evaluation_interval"]},
        "rule_files": ["%s/%s" % (directory, RULE_FILE)],
        "scrape_configs": jobs,
    }


def node_targets(hosts, port):
    """One file_sd target group per host's node exporter: hosts maps
    inventory host -> the address Prometheus reaches it at."""
    port = checks.port("gpufleet_node_exporter_port", port)
    groups = []
    for host in sorted(hosts):
        address = targets.reach_address("host %s" % host, hosts[host])
        groups.append({"targets": [gateway_settings.socket(address, port)], "labels": {"host": host, "instance": "%s/node" % host}})
    return groups
