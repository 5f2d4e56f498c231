# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters of role gateway: check its variables before anything is written; redact
HAProxy's output of the API keys."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings


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


class FilterModule(object):
    def filters(self):
        return {"gateway_settings": gateway_settings, "gateway_redact": gateway_redact}
