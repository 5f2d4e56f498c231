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

import os
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common import names
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import command
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import variables as role_variables
from ansible_collections.gpufleet.numa.plugins.module_utils.common import record_values
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import run_record
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import layout


def removal_variables(variables):
    """The checked variables of tasks/remove.yml (a new dict).

    Where the units and option files are comes from the kept plan's record
    (`recorded_files`, hosts.HOST.files) when there is one, else from the
    host's variables; either way by the role's rules, never taken whole: a
    prefix that starts with gpufleet-, so a tampered record cannot point the
    take-down at another service's units (and the playbook forgets the host
    only once its recorded units are gone: units_left)."""
    v = variables
    recorded = v.get("recorded_files") or {}
    if recorded:
        run_record.check_files("vllm_remove_files", recorded)
    out = {"manage_service": role_variables.manage_service(role_variables.role_value(v, "vllm_manage_service"),
                                                           v.get("service_mgr", ""))}
    for field, name in _RECORDED:
        where, value = ("vllm_remove_files." + field, recorded[field]) if recorded else \
            (name, role_variables.role_value(v, name))
        if field == "unit_prefix":
            out[name] = names.unit_prefix(where, value)
        else:
            out[name] = os.path.normpath(checks.absolute_path(where, value))
    # Only files that start with the role's marker are taken down.
    out["managed_first_line"] = layout.managed_first_line()
    out["recorded_units"] = recorded_units(v.get("recorded_instances") or [], out["vllm_unit_prefix"])
    limit = role_variables.INTEGERS["vllm_drain_timeout"]
    out["vllm_drain_timeout"] = checks.integer("vllm_drain_timeout", role_variables.role_value(v, "vllm_drain_timeout"),
                                               limit.minimum, limit.maximum)
    out["vllm_gateways"], out["vllm_gateway_backends"] = role_variables.gateways(
        role_variables.role_value(v, "vllm_gateways"), role_variables.role_value(v, "vllm_gateway_backends"))
    return out


# hosts.HOST.files field -> the role variable that says the same.
_RECORDED = (("unit_dir", "vllm_unit_dir"), ("config_dir", "vllm_config_dir"), ("unit_prefix", "vllm_unit_prefix"))


def recorded_units(instances, prefix):
    """The unit names of the instances the kept plan records on the host."""
    if not isinstance(instances, list):
        checks.fail("vllm_remove_instances", "must be the list of the host's recorded instance names", instances)
    instance_names = [checks.text("vllm_remove_instances[%d]" % i, name, record_values.NAME, record_values.NAME_RULE)
                      for i, name in enumerate(instances)]
    return sorted("%s%s.service" % (prefix, name) for name in instance_names)


def units_left(shown, files):
    """The recorded units still there after the take-down: from `systemctl
    show --property=Id,LoadState,FragmentPath` of them (text; "" where
    systemd does not run) and the unit files still found (paths). A host
    leaves the kept plan only when this is empty."""
    left = ["%s (a unit file is still at %s)" % (path.rsplit("/", 1)[-1], path) for path in sorted(files)]
    for block in shown.split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if fields.get("Id") and fields.get("LoadState") not in (None, "not-found"):
            left.append("%s (systemd still has it %s, from %s)"
                        % (fields["Id"], fields["LoadState"], fields.get("FragmentPath") or "no file"))
    return left


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
        # Only a gpufleet-* unit of an instance name is ever the role's.
        if name is None or not v["vllm_unit_prefix"].startswith(names.UNIT_PREFIX_START) \
                or not re.fullmatch(record_values.NAME, name):
            continue
        out.append({"path": path, "unit": path.rsplit("/", 1)[-1], "instance": name,
                    "drain": command.drain_targets(name, v, host)})
    return out
