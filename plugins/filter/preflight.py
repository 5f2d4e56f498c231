# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filter preflight_errors: every variable of the fleet checked before
anything changes (module_utils/plan/preflight.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as vc
from ansible_collections.gpufleet.numa.plugins.module_utils.common.secret_mask import is_secret_name
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import preflight
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain


def _inventory_variables(hostvars, host, errors):
    """HOST's variables with the collection's prefixes, as plain values; one
    that cannot be evaluated is an error (its text cut, never a value)."""
    out = {}
    variables = hostvars[host]
    for name in preflight.inventory_names(list(variables.keys())):
        try:
            out[name] = plain(variables[name])
        except Exception as exc:  # a template error of the inventory's
            # The template's text may hold the secret it was to give.
            reason = "reason hidden" if is_secret_name(name) else vc.show(str(exc), 200)
            errors.append("%s: %s: cannot be evaluated (%s)" % (host, name, reason))
    return out


def preflight_errors(hostvars, gpu_hosts, gateway_hosts=()):
    """Every error of the fleet's variables, one string each ([] when none)."""
    if not hasattr(hostvars, "keys"):
        raise AnsibleFilterError("gpufleet.numa.preflight_errors expects hostvars")
    errors = []
    gpu = dict((str(h), _inventory_variables(hostvars, h, errors)) for h in gpu_hosts or [])
    gateways = dict((str(h), _inventory_variables(hostvars, h, errors)) for h in gateway_hosts or [])
    try:
        errors.extend(preflight.check_fleet(
            gpu, gateways, role_files.spec_names(), role_files.defaults("vllm"), role_files.defaults("gateway"),
            extra_vars=role_files.extra_var_names()))
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.preflight_errors: %s" % exc)
    return errors


class FilterModule(object):
    def filters(self):
        return {"preflight_errors": preflight_errors}
