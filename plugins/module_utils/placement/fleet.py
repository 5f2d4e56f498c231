# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 4: the plan of a fleet (docs/plan.md, fleet_plan).

Every host is planned on its own (placement/host.py), so adding a host
never moves an instance on another; names and ports depend only on the
per-host ordinal. Instances over several hosts (nodes_per_instance > 1)
are placement/multinode.py's.
"""

from __future__ import annotations

import gc
import operator
from collections.abc import Mapping

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts import host_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import host_warnings
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.host import FleetSlots, Slot, plan_host_validated
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.multinode import plan_multinode
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import (
    FLEET_OPTIONS,
    HOST_OPTIONS,
    PlacementError,
    validate_options,
)


def plan_fleet(fleet, **options):
    """Plan a fleet: the fleet_plan result (docs/plan.md).

    fleet: mapping host -> vars (hostvars-like) or host -> topology facts.
    """
    return plan_fleet_validated(fleet, validate_options(options, FLEET_OPTIONS))


def plan_fleet_validated(fleet, opts):
    """plan_fleet for options already checked by validate_options(..., FLEET_OPTIONS)."""
    # The plan is a tree of small new containers and holds no cycles; cyclic
    # garbage collections while building it would only walk the (large)
    # inventory again and again, so they wait until the plan is done.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _plan_fleet(fleet, opts)
    finally:
        if was_enabled:
            gc.enable()


def _plan_fleet(hosts, opts):
    if not isinstance(hosts, Mapping):
        raise PlacementError("fleet_plan input must be a mapping host -> vars or facts, got %s" % type(hosts).__name__)
    names = opts["hosts"]
    if names is None:
        names = sorted(hosts, key=str)
    else:
        missing = [h for h in names if h not in hosts]
        if missing:
            raise PlacementError("hosts not in the input: %s" % ", ".join(missing))
        seen = set()
        dupes = sorted(set(h for h in names if h in seen or seen.add(h)))
        if dupes:
            raise PlacementError("hosts listed twice: %s" % ", ".join(dupes))
    exclude = opts["exclude_gpus"]
    if isinstance(exclude, dict):
        unknown = sorted(set(exclude) - set(names))
        if unknown:
            raise PlacementError("exclude_gpus names host(s) not planned: %s" % ", ".join(unknown))
    host_opts = dict((k, opts[k]) for k in HOST_OPTIONS)
    instances = []
    unused = []
    warnings = []
    gpu_total = 0
    slots = []  # per ordinal: name, API port, VLLM_PORT base; the same on every host
    checked = set()

    def fleet_slots(count, host):
        # ports depend only on the per-host ordinal; checked once per instance count
        if count not in checked:
            check_ports(opts, count, host)
            checked.add(count)
        while len(slots) < count:
            slots.append(slot_of(opts, len(slots)))
        return FleetSlots(opts["tp_size"], opts["pp_size"], slots, opts["dist_port_stride"] - 1)

    if opts["nodes_per_instance"] > 1:
        return plan_multinode(hosts, names, opts, host_opts, fleet_slots)
    for host in names:
        facts = host_facts(host, hosts[host])
        if isinstance(exclude, dict):
            host_opts["exclude_gpus"] = exclude.get(host, frozenset())
        plan = plan_host_validated(facts, host_opts, str(host), fleet_slots)
        groups = plan["groups"]
        # every GPU of the host is in a group or unused
        gpu_total += sum(map(len, map(_gpus_of, groups))) + len(plan["unused"])
        instances += groups
        host = plan["host"]
        for entry in plan["unused"]:
            unused.append({"host": host, "id": entry["id"], "index": entry["index"], "reason": entry["reason"]})
        warnings.extend(host_warnings(host, plan["warnings"]))
    return {"instances": instances, "unused": unused, "warnings": warnings,
            "totals": contract.plan_totals(len(names), gpu_total, instances)}


_gpus_of = operator.itemgetter("gpus")


def slot_of(opts, ordinal):
    """The Slot (name, API port, VLLM_PORT base) of the instance of this per-host ordinal:
    the one place a name or port follows from an ordinal (plan/identity.py reuses it)."""
    dist = opts["dist_port_base"] + ordinal * opts["dist_port_stride"]
    return Slot("%s%d" % (opts["name_prefix"], ordinal), opts["base_port"] + ordinal * opts["port_stride"], dist)


def check_ports(opts, count, host):
    """API ports and VLLM_PORT ranges of `count` instances: in range, never overlapping."""
    if count == 0:
        return
    last_api = opts["base_port"] + (count - 1) * opts["port_stride"]
    last_dist = opts["dist_port_base"] + count * opts["dist_port_stride"] - 1
    if last_api > 65535 or last_dist > 65535:
        error = PlacementError(
            "host %s: %d instances need API ports up to %d and VLLM_PORT ranges up to %d; ports end at 65535"
            % (host, count, last_api, last_dist)
        )
        error.host = host  # this host's instance count: the others may still fit
        raise error
    lo = opts["dist_port_base"]
    for ordinal in range(count):
        port = opts["base_port"] + ordinal * opts["port_stride"]
        if lo <= port <= last_dist:
            owner = (port - lo) // opts["dist_port_stride"]
            raise PlacementError(
                "host %s: API port %d of instance %d falls inside the VLLM_PORT range of instance %d (%d-%d); "
                "move base_port or dist_port_base" % (
                    host, port, ordinal, owner, lo + owner * opts["dist_port_stride"],
                    lo + (owner + 1) * opts["dist_port_stride"] - 1)
            )
