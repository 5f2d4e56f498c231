# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filter vllm_units: what each vLLM unit of a host runs (role gpufleet.numa.vllm).

Thin shell around module_utils/deploy/vllm/host_state.py; see docs/plan.md and the role's README.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain as _plain
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state, rollout


def vllm_units(instances, variables):
    """This host's plan instances and the role's variables -> every unit's argv, environment and files."""
    if not hasattr(variables, "keys"):
        raise AnsibleFilterError("gpufleet.numa.vllm_units: variables must be a mapping of role variable -> value")
    try:
        return host_state.host_units(_plain(instances), _plain(dict(variables)))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_units: %s" % exc)


def vllm_stale(found, files):
    """find's results for the role's marked files and vllm_units' files -> paths no longer planned."""
    try:
        return rollout.stale_files(_plain(found), _plain(files))
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_stale: found and files must be lists of {path} (%s)" % exc)


def vllm_restarting(units, written):
    """vllm_units' units and the template task's loop results -> names of the instances that restart."""
    try:
        return rollout.restarting_instances(_plain(units), _plain(written))
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_restarting: written must be the results of the role's "
                                 "template loop (%s)" % exc)


class FilterModule(object):
    def filters(self):
        return {"vllm_units": vllm_units, "vllm_stale": vllm_stale, "vllm_restarting": vllm_restarting}
