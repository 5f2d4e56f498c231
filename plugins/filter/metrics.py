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

from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import files, prometheus, textfile


def _text(name, content):
    """JSON for file_sd files, YAML for the rest, ending in a newline."""
    if name.endswith(".json"):
        return json.dumps(content, indent=2, sort_keys=True) + "\n"
    return yaml.safe_dump(content, default_flow_style=False, sort_keys=False, width=1000)


def metrics_files(record, **options):
    try:
        return dict((name, _text(name, content)) for name, content in files.metrics_files(record, options).items())
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def prometheus_settings(variables):
    try:
        settings = prometheus.check_settings(variables)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))
    return dict(settings, config=_text("prometheus.yml", prometheus.scrape_config(settings)))


def audit_metrics(result, memory_threshold):
    if not isinstance(result, dict):
        raise AnsibleFilterError("gpufleet.numa.audit_metrics expects one host's numa_audit result")
    return textfile.audit_metrics(result, memory_threshold)


class FilterModule(object):
    def filters(self):
        return {"metrics_files": metrics_files, "prometheus_settings": prometheus_settings,
                "audit_metrics": audit_metrics}
