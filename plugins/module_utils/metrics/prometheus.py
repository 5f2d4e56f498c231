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

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as value_checks
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import rules

# The files the deploy writes into gpufleet_metrics_dir and the role
# installs into prometheus_config_dir/gpufleet/ (docs/metrics.md).
TARGET_FILES = {rules.VLLM_JOB: "vllm.json", rules.GATEWAY_JOB: "gateway.json", rules.NODE_JOB: "node.json"}
RULE_FILE = "rules.yml"
SUBDIRECTORY = "gpufleet"
GATEWAY_KEY_FILE = "gateway-api-key"


def _value(variables, name):
    if name not in variables:
        raise ValueError("%s: missing (the role's defaults set it)" % name)
    return variables[name]


def check_settings(variables):
    """The role's variables, checked; ValueError names the variable and its rule."""
    if not isinstance(variables, dict):
        raise ValueError("prometheus_settings expects a mapping of the role's variables")
    out = {
        "server": value_checks.boolean("prometheus_server", _value(variables, "prometheus_server")),
        "node_exporter": value_checks.boolean("prometheus_node_exporter",
                                              _value(variables, "prometheus_node_exporter")),
        "scrape_interval": rules.duration("prometheus_scrape_interval",
                                          _value(variables, "prometheus_scrape_interval")),
        "evaluation_interval": rules.duration("prometheus_evaluation_interval",
                                              _value(variables, "prometheus_evaluation_interval")),
        "config_dir": value_checks.absolute_path("prometheus_config_dir", _value(variables, "prometheus_config_dir")),
        "textfile_dir": value_checks.absolute_path("prometheus_textfile_dir",
                                                   _value(variables, "prometheus_textfile_dir")),
        "self_address": value_checks.address("prometheus_self_address",
                                             _value(variables, "prometheus_self_address")),
        "self_port": value_checks.port("prometheus_self_port", _value(variables, "prometheus_self_port")),
    }
    key = _value(variables, "prometheus_gateway_api_key")
    out["gateway_api_key"] = value_checks.api_key("prometheus_gateway_api_key", key) if key else ""
    out["gpufleet_dir"] = out["config_dir"].rstrip("/") + "/" + SUBDIRECTORY
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
    port = value_checks.port("prometheus_node_exporter_port", port)
    groups = []
    for host in sorted(hosts):
        address = value_checks.address("host %s address (ansible_host)" % host, hosts[host])
        target = "[%s]:%d" % (address, port) if ":" in address else "%s:%d" % (address, port)
        groups.append({"targets": [target], "labels": {"host": host, "instance": "%s/node" % host}})
    return groups
