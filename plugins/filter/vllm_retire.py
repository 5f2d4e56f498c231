# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters of role vllm for taking instances down: vllm_removal_variables
(what tasks/remove.yml reads, checked), vllm_retiring (each stale unit
with the gateway servers to drain first) and vllm_units_left (the recorded
units still there after a take-down). Thin shells around
module_utils/deploy/vllm/retire.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain as _plain
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import retire


def vllm_removal_variables(variables):
    try:
        variables = _plain(variables)
        if not isinstance(variables, dict):
            raise ValueError("input must be the mapping of the role's variables")
        return retire.removal_variables(variables)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_removal_variables: %s" % exc)


def vllm_retiring(stale, variables, host):
    try:
        stale, variables = _plain(stale), _plain(variables)
        if isinstance(stale, str) or not isinstance(stale, list):
            raise ValueError("input must be the list of stale file paths")
        if not isinstance(variables, dict) or "vllm_unit_prefix" not in variables:
            raise ValueError("variables must be the role's checked variables")
        return retire.retiring_units([str(p) for p in stale], variables, str(host))
    except (TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_retiring: %s" % exc)


def vllm_units_left(shown, files):
    try:
        shown, files = _plain(shown), _plain(files)
        if not isinstance(shown, str):
            raise ValueError("input must be the text of systemctl show (empty where systemd does not run)")
        if isinstance(files, str) or not isinstance(files, list):
            raise ValueError("files must be the list of unit files still found")
        return retire.units_left(shown, [str(p) for p in files])
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_units_left: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"vllm_removal_variables": vllm_removal_variables, "vllm_retiring": vllm_retiring,
                "vllm_units_left": vllm_units_left}
