# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the host preflight probes: each planned instance's unit as role
vllm would write it (controller side).

probe_units() reads the host's instances through placement/contract.py and
turns them into the units role vllm renders (deploy/vllm/host_state.py,
the gpufleet.numa.vllm_units filter's own code), and keeps of each what
the probe needs: the NUMA directives and sandboxing the unit file carries
(its `numa` and `hardening` lists), its numactl prefix, its account, its
nodes, CPUs and memory policy, its device class and GPUs. Pure functions,
standard library only; errors are ValueError naming the variable.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import normalize_bus_id
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.host_state import host_units
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract

UNIT_FIELDS = ("name", "device", "gpus", "mems", "cpus", "policy", "prefix", "properties", "user", "group")


def _bus_ids(instance):
    out = []
    for gpu in instance.get("gpus") or []:
        bus = gpu.get("pci_bus_id") if isinstance(gpu, dict) else None
        if bus:
            try:
                out.append(normalize_bus_id(bus))
            except ValueError:
                continue
    return out


def probe_units(instances, variables):
    """INSTANCES (this host's plan entries) and the role's variables as the
    deploy gives them (defaults, the host's own, the playbook's) ->
    {units, numactl_installed_by_role}: one probe unit per instance, {name,
    device, gpus (bus ids), mems ("0,1"), cpus, policy, prefix (numactl
    words or []), properties ([directive, value] pairs: NUMA directives,
    then vllm_hardening), user, group}; and whether the role installs
    numactl (vllm_packages) before the units start."""
    if not instances:
        return {"units": [], "numactl_installed_by_role": False}
    rendered = host_units(instances, dict(variables, vllm_instances=instances))
    v = rendered["variables"]
    out = []
    for instance, unit in zip(instances, rendered["units"]):
        binding = contract.binding(instance)
        engine = devices.engine_command({"device": unit["device"]}, v)
        prefix = unit["command"][:len(unit["command"]) - len(engine)]
        out.append({
            "name": unit["name"],
            "device": contract.device(instance),
            "gpus": _bus_ids(instance),
            "mems": ",".join(str(node) for node in binding["mems"]),
            "cpus": binding["cpus"],
            "policy": binding["policy"],
            "prefix": prefix,
            "properties": [list(pair) for pair in unit["numa"] + unit["hardening"]],
            "user": unit["user"],
            "group": unit["group"],
        })
    return {"units": out, "numactl_installed_by_role": bool(rendered["install"] and "numactl" in rendered["packages"])}
