# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters of role gateway: check its variables before anything is written; redact
HAProxy's output of the API keys; keepalived's settings (deploy/gateway/vrrp.py)
and the order the deploy playbook configures the gateways in."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import vrrp
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain


def gateway_settings(variables):
    try:
        return settings.check_settings(variables)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def gateway_redact(lines, secrets):
    if isinstance(lines, str) or not isinstance(lines, (list, tuple)):
        raise AnsibleFilterError("gpufleet.numa.gateway_redact expects a list of lines")
    if isinstance(secrets, str) or not isinstance(secrets, (list, tuple)):
        raise AnsibleFilterError("gpufleet.numa.gateway_redact expects a list of secrets (values hidden)")
    return settings.redact_lines(lines, [secret for secret in secrets if isinstance(secret, str)])


def _members(hostvars, hosts):
    """host -> its gateway_vrrp_* variables as role gateway takes them (its defaults, the host's own over them)."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.gateway_vrrp expects hostvars")
    errors = []
    members = {}
    for host in hosts:
        merged = role_files.host_role_variables(hostvars, host, "gateway", errors, prefixes=("gateway_",))
        members[str(host)] = dict((name, merged.get(name)) for name in vrrp.VARIABLES)
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    return members


def gateway_vrrp(variables, gateway, hostvars, groups, host):
    """keepalived's settings of HOST: its own gateway_vrrp_* VARIABLES, its checked
    HAProxy settings GATEWAY, the other hosts of its VRRP group from HOSTVARS."""
    variables = plain(variables)
    group = variables.get("gateway_vrrp_group") if isinstance(variables, dict) else None
    hosts = [h for h in (groups.get(group) or []) if h != host] if isinstance(group, str) and vrrp.enabled(variables) else []
    members = _members(hostvars, hosts)
    if isinstance(group, str) and host in (groups.get(group) or []):
        members[host] = variables
    try:
        return vrrp.check_vrrp(variables, plain(gateway), host, members)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def gateway_rollout(hosts, hostvars):
    """HOSTS (the gateways) in the order the deploy playbook configures them, one at a time
    (a host HOSTVARS lacks keeps its place as one without VRRP)."""
    hosts = [str(h) for h in hosts or []]
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.gateway_rollout expects hostvars")
    return vrrp.rollout_order(hosts, _members(hostvars, [h for h in hosts if h in hostvars]))


class FilterModule(object):
    def filters(self):
        return {"gateway_settings": gateway_settings, "gateway_redact": gateway_redact, "gateway_vrrp": gateway_vrrp,
                "gateway_rollout": gateway_rollout}
