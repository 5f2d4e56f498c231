# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Taking instances down (docs/deploy.md, "Taking instances and hosts
down"): each unit the role no longer plans is drained on every gateway,
then stopped and disabled, then its files go (tasks/cleanup.yml for the
instances a host no longer plans, tasks/remove.yml for every instance of
a host that leaves the fleet).

removal_variables() checks only what taking a host down reads: a host
taken out of gpu_servers may no longer have the rest of the role's
variables (its model, its listen address). retiring_units() pairs each
stale unit with the gateway servers to drain first. Pure functions.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as vc
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import command
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import variables as role_variables


def removal_variables(variables):
    """The checked variables of tasks/remove.yml (a new dict)."""
    v = variables
    out = {}
    for name in ("vllm_config_dir", "vllm_unit_dir"):
        out[name] = vc.absolute_path(name, role_variables.role_value(v, name))
    out["vllm_unit_prefix"] = vc.text("vllm_unit_prefix", role_variables.role_value(v, "vllm_unit_prefix"),
                                      role_variables.UNIT_PREFIX, role_variables.UNIT_PREFIX_RULE,
                                      allow_empty=True)
    limit = role_variables.INTEGERS["vllm_drain_timeout"]
    out["vllm_drain_timeout"] = vc.integer("vllm_drain_timeout", role_variables.role_value(v, "vllm_drain_timeout"),
                                           limit.minimum, limit.maximum)
    out["manage_service"] = role_variables.manage_service(role_variables.role_value(v, "vllm_manage_service"),
                                                          v.get("service_mgr", ""))
    out["vllm_gateways"], out["vllm_gateway_backends"] = role_variables.gateways(
        role_variables.role_value(v, "vllm_gateways"), role_variables.role_value(v, "vllm_gateway_backends"))
    return out


def instance_of_unit(path, prefix):
    """The instance name of one of the role's unit files (PREFIX<name>.service), or None."""
    base = path.rsplit("/", 1)[-1]
    if not base.startswith(prefix) or not base.endswith(".service") or len(base) <= len(prefix) + len(".service"):
        return None
    return base[len(prefix):-len(".service")]


def retiring_units(stale, v, host):
    """The stale unit files among `stale` (paths), each with its instance's
    gateway servers: [{path, unit, instance, drain}] in path order."""
    out = []
    for path in sorted(stale):
        name = instance_of_unit(path, v["vllm_unit_prefix"])
        if name is None:
            continue
        out.append({"path": path, "unit": path.rsplit("/", 1)[-1], "instance": name,
                    "drain": command.drain_targets(name, v, host)})
    return out
