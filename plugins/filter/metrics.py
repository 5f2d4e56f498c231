# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters for Prometheus: the files the deploy writes beside the inventory
(targets and alert rules), the prometheus role's checked settings and
configuration, and an audit result as node_exporter textfile metrics.
The logic is in module_utils/metrics; here values are serialised."""

from __future__ import annotations

import json

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import addresses as fleet_addresses
from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import files, prometheus, textfile
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain


def _text(name, content):
    """JSON for file_sd files, YAML for the rest, ending in a newline."""
    if name.endswith(".json"):
        return json.dumps(content, indent=2, sort_keys=True) + "\n"
    return yaml.safe_dump(content, default_flow_style=False, sort_keys=False, width=1000)


def _reach(hostvars, host):
    """Where the controller's inventory says a host is: ansible_host, else its name."""
    value = hostvars[host].get("ansible_host") if hasattr(hostvars[host], "get") else None
    return str(value) if value else str(host)


def metrics_files(record, hostvars, gpu_servers, gateways, nodes, node_exporter_port, down_for):
    """file name -> text of every file of gpufleet_metrics_dir. Each GPU
    server's instances are scraped where the gateway reaches them
    (fleet/addresses.deployed: the address the record keeps for the host,
    else its vllm_listen_host over the vllm role's defaults, its own
    address when that is a wildcard), each gateway's exporter from its
    gateway_metrics_* over the gateway role's defaults; nodes are the hosts
    whose node exporter is scraped."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.metrics_files expects hostvars as its first argument")
    errors = []
    exporters = {}
    for host in gateways or []:
        merged = role_files.host_role_variables(hostvars, host, "gateway", errors, prefixes=("gateway_",))
        exporters[str(host)] = {"listen": plain(merged["gateway_metrics_address"]),
                                "port": plain(merged["gateway_metrics_port"]), "reach": _reach(hostvars, host)}
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    record = plain(record)
    try:
        # Today's addresses only of the hosts whose record entry keeps none.
        listen, reach = role_files.listen_and_reach(hostvars, fleet_addresses.unaddressed(record, gpu_servers or []))
        options = {"addresses": fleet_addresses.deployed(record, listen, reach), "gateways": exporters,
                   "nodes": dict((str(h), _reach(hostvars, h)) for h in nodes or []),
                   "node_exporter_port": plain(node_exporter_port), "down_for": plain(down_for)}
        return dict((name, _text(name, content)) for name, content in files.metrics_files(record, options).items())
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def metrics_to_write(files_text, directory, looked, mode="0644"):
    """The files of metrics_files that differ from what stat_paths found in DIRECTORY."""
    try:
        return files.to_write(plain(files_text), str(directory), plain(looked), str(mode))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.metrics_to_write: %s" % exc)


def prometheus_settings(variables):
    try:
        settings = prometheus.check_settings(plain(variables))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))
    return dict(settings, config=_text("prometheus.yml", prometheus.scrape_config(settings)))


def audit_metrics(result, memory_threshold, directory):
    """{path, text}: the *.prom file in `directory` (audit_textfile_dir) and its text."""
    if not isinstance(result, dict):
        raise AnsibleFilterError("gpufleet.numa.audit_metrics expects one host's numa_audit result")
    try:
        return textfile.textfile(plain(result), plain(memory_threshold), plain(directory))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"metrics_files": metrics_files, "metrics_to_write": metrics_to_write,
                "prometheus_settings": prometheus_settings,
                "audit_metrics": audit_metrics}
