# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filter state_settings: the store of the run's record (the file beside
the inventory, or etcd), its settings built once per run from the
controller's variables (gpufleet_state_backend, gpufleet_etcd_*) and
checked. Thin shell around module_utils/state/store.py; docs/state.md.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.state import store as state_store
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain


def controller_variables(variables):
    """The store's variables the controller has (hostvars['localhost'] or a
    mapping), as plain values; one that cannot be evaluated is a ValueError
    naming it (its reason hidden for the password: the template may hold it)."""
    if not hasattr(variables, "keys"):
        raise ValueError("the input must be the controller's variables (hostvars['localhost'])")
    out = {}
    for name in state_store.VARIABLES:
        if name not in variables:
            continue
        try:
            out[name] = plain(variables[name])
        except Exception as exc:  # a template error of the inventory's
            reason = "reason hidden" if name in state_store.SECRET_VARIABLES else checks.show(str(exc), 200)
            raise ValueError("%s: cannot be evaluated (%s)" % (name, reason))
    return out


def state_settings(variables, plan_file=None):
    """The run's store settings: {backend, location, path} or {backend,
    location, etcd, lock_ttl}; fails naming the variable."""
    try:
        return state_store.settings(controller_variables(variables), None if plan_file is None else str(plan_file))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.state_settings: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"state_settings": state_settings}
