# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters that present a fleet plan: a text table, its warnings' lines, a change of the kept record, the gateway's backends and servers."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import backends as gateway_view
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import table


def plan_table(plan):
    try:
        return table.plan_table(plan)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.plan_table: %s" % exc)


def plan_warning_lines(plan):
    """The plan's warnings, "warning: HOST: text" each."""
    try:
        return table.plan_warning_lines(plan)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.plan_warning_lines: %s" % exc)


def record_diff_table(after, before, check_mode=False):
    """The kept record's change, per instance (under --diff); under --check it says it is not written."""
    if not isinstance(check_mode, bool):
        raise AnsibleFilterError("gpufleet.numa.record_diff_table: check_mode must be true or false (ansible_check_mode)")
    try:
        return table.record_diff_table(before, after, check_mode)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.record_diff_table: %s" % exc)


def gateway_backends(plan, addresses):
    try:
        return gateway_view.gateway_backends(plan, addresses)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.gateway_backends: %s" % exc)


def gateway_servers(plan):
    try:
        return gateway_view.gateway_servers(plan)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.gateway_servers: %s" % exc)


def gateway_api_keys(plan, api_keys):
    try:
        if isinstance(api_keys, dict):
            # Vaulted values arrive as string-like objects: plain text here.
            api_keys = dict((str(k), "" if v is None else str(v)) for k, v in api_keys.items())
        return gateway_view.gateway_api_keys(plan, api_keys)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.gateway_api_keys: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"plan_table": plan_table, "plan_warning_lines": plan_warning_lines, "record_diff_table": record_diff_table,
                "gateway_backends": gateway_backends, "gateway_servers": gateway_servers,
                "gateway_api_keys": gateway_api_keys}
