# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 2: the plan of one host (docs/plan.md, socket_local_groups).

A host's plan is built in two steps:

- a template (placement/template.py): the plan by GPU position, free of
  identities, a function of PlanKey alone (the host's Topology as
  placement/facts.py read it, which GPUs are excluded, the options).
  Templates are memoised on that key, so a fleet of identical machines
  costs one search and one template;
- the plan: the template with this host's name and GPU identities.
"""

from __future__ import annotations

import itertools
import operator
from typing import NamedTuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpu_host import plan_cpu_host
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.device import device_class
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts import host_name, read_host_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import Note, note
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError, PlanOptions
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.template import PlanKey, build_template

_CACHE_LIMIT = 4096
_TEMPLATES = {}


def clear_cache():
    """Forget memoised templates (benchmarks use it to time a cold plan)."""
    _TEMPLATES.clear()


def cache_size():
    return len(_TEMPLATES)


class Slot(NamedTuple):
    """What a fleet instance of one per-host ordinal is called and listens on."""

    name: str
    port: int  # API port
    dist_port: int  # VLLM_PORT base


class FleetSlots(NamedTuple):
    """What turns a group into a fleet instance: a Slot per ordinal."""

    tp_size: int
    pp_size: int
    slots: list
    range_last: int  # dist_port_range is [dist_port, dist_port + range_last]


def plan_host_validated(facts, opts, host=None, fleet_slots=None):
    """Plan one host for options already checked by validate_options.

    fleet_slots(count, host) -> FleetSlots, when planning for a fleet: the
    groups are then built directly as fleet instances (name, ordinal, ports).
    """
    return plan_host_view(read_host_view(facts, host), opts, fleet_slots)


def read_host_view(facts, host=None):
    """read_host_facts; any failure is a PlacementError naming the host, never a traceback."""
    try:
        return read_host_facts(facts, host)
    except PlacementError as exc:
        exc.host = host if host else host_name(facts)
        raise
    except Exception as exc:  # pylint: disable=broad-except
        raise _planner_failed(host if host else host_name(facts), exc) from None


def plan_host_view(view, opts, fleet_slots=None):
    """plan_host_validated for facts already read (HostFacts from read_host_facts).

    Any failure is a PlacementError naming the host, never a traceback:
    the caller reports the host and plans the others.
    """
    try:
        device, device_notes = device_class(view, opts.get("device_class", "auto"), excluded_gpus(view, opts))
        if device == "cpu":
            return plan_cpu_host(view, opts, fleet_slots, device_notes)
        key = plan_key(view, opts)
        template = _TEMPLATES.get(key)
        if template is None:
            template = build_template(key, view.host, [g.id for g in view.gpus])
            if len(_TEMPLATES) >= _CACHE_LIMIT:
                _TEMPLATES.clear()
            _TEMPLATES[key] = template
        slots = fleet_slots(len(template.groups), view.host) if fleet_slots is not None else None
        return instantiate(template, view, slots, device)
    except PlacementError as exc:
        exc.host = view.host
        raise
    except Exception as exc:  # pylint: disable=broad-except
        raise _planner_failed(view.host, exc) from None


def _planner_failed(host, exc):
    """The PlacementError of an unexpected failure (a planner bug, an exhausted stack) on one host."""
    if isinstance(exc, RecursionError):
        # never expected (the search runs on explicit stacks)
        error = PlacementError("host %s: the plan is too deep to compute" % host)
    else:
        error = PlacementError("host %s: the planner failed on this host (%s: %s); please report it with the "
                               "host's facts" % (host, type(exc).__name__, show(str(exc))))
    error.host = host
    return error


def excluded_gpus(view, opts):
    """Per GPU of the host (view.gpus order): whether exclude_gpus names it."""
    exclude = opts.get("exclude_gpus") or ()
    return tuple(bool(exclude) and (g.id in exclude or g.pci_bus_id in exclude or g.uuid in exclude)
                 for g in view.gpus)


def plan_key(view, opts):
    """The PlanKey of a host (HostFacts from read_host_facts) under checked options."""
    return PlanKey(PlanOptions.of(opts), excluded_gpus(view, opts), view.topology)


def host_warnings(template, view):
    """The warnings of one host's plan (Notes naming the GPUs and nodes; the fleet names the host)."""
    gpus = view.gpus
    warnings = list(view.warnings)
    for p in template.unknown_node:
        warnings.append(Note("GPU %s (index %s) has no known NUMA node; left unused" % (gpus[p].id, gpus[p].index),
                             gpus=(gpus[p].id,)))
    for moved in template.rehomed:
        gpu = gpus[moved.position]
        warnings.append(Note("GPU %s (index %s) is on NUMA node %d, which has no CPUs (memory only): %s"
                             % (gpu.id, gpu.index, moved.memory_node,
                                "left unused, no node with CPUs is known to be nearest" if moved.home is None
                                else "placed on node %d, the nearest with CPUs; memory bound there, not to node %d"
                                % (moved.home, moved.memory_node)),
                             gpus=(gpu.id,), nodes=tuple(n for n in (moved.memory_node, moved.home) if n is not None)))
    if template.missing_links is not None:
        a, b = template.missing_links.first
        warnings.append(Note("%d GPU pair(s) have no link class in the facts (first: %s - %s); ranked below SYS"
                             % (template.missing_links.count, gpus[a].id, gpus[b].id), gpus=(gpus[a].id, gpus[b].id)))
    warnings.extend(template.notes)
    warnings.extend(_few_cpus(template, view))
    return [note(w) for w in warnings]


def _few_cpus(template, view):
    """An instance with fewer CPUs than GPUs: each GPU worker is a process
    that feeds its GPU; sharing one CPU, they wait on each other."""
    for grp in template.groups:
        positions = [p for st in grp.stages for p in st.positions]
        cpus = len(parse_cpulist(grp.cpus))
        if cpus < len(positions):
            yield Note("the instance on GPUs %s gets %d CPU%s for %d GPUs (CPUs %s): each GPU's worker wants a CPU "
                       "of its own (fewer reserved CPUs or smaller instances give it one)"
                       % (",".join(str(view.gpus[p].index) for p in positions), cpus, "" if cpus == 1 else "s",
                          len(positions), grp.cpus), gpus=tuple(view.gpus[p].id for p in positions))


_gpu_id = operator.itemgetter(0)  # Gpu.id
_gpu_index = operator.itemgetter(2)  # Gpu.index


_GPU_FIELDS = ("id", "pci_bus_id", "index", "uuid", "name")  # a plan's GPU entry: Gpu's fields, in its order


def instantiate(template, view, fleet=None, device="nvidia"):
    """The plan of one host from its template; with fleet (FleetSlots) the groups are fleet instances,
    each on `device` (its host's device class: nvidia or amd).

    Every container is new (callers may change their plan); built with C-level maps where
    it can: a fleet of 10,000 hosts instantiates 40,000 groups.
    """
    gpus = view.gpus
    gpu_at = gpus.__getitem__
    host = view.host
    out_groups = []
    for ordinal, grp in enumerate(template.groups):
        stage_out = []
        members = []
        indices = []
        for st in grp.stages:
            stage_gpus = list(map(gpu_at, st.positions))
            stage_indices = list(map(_gpu_index, stage_gpus))
            stage_out.append({
                "gpus": list(map(_gpu_id, stage_gpus)),
                "gpu_indices": stage_indices,
                "numa_nodes": list(st.numa_nodes),
                "socket": st.socket,
                "sockets": list(st.sockets),
                "worst_link": st.worst_link,
            })
            members += stage_gpus
            indices += stage_indices
        binding = grp.binding
        group = {
            "device": device,
            "gpus": list(map(dict, map(zip, itertools.repeat(_GPU_FIELDS), members))),
            "gpu_indices": indices,
            "stages": stage_out,
            "numa_nodes": list(grp.numa_nodes),
            "sockets": list(grp.sockets),
            "cpus": grp.cpus,
            "cpus_shared_node": grp.cpus_shared_node,
            "cpus_whole_nodes": grp.cpus_whole_nodes,
            "memory_policy": grp.memory_policy,
            # How the unit binds (docs/plan.md): by node only when the
            # instance owns its nodes' CPUs outright.
            "binding": {"mode": binding.mode, "cpus": binding.cpus, "mems": list(binding.mems),
                        "policy": binding.policy, "by_node": grp.by_node,
                        "workers": [{"gpu_index": index, "node": node, "cpus": cpus}
                                    for index, (node, cpus) in zip(indices, binding.workers)]},
            "worst_link": grp.worst_link,
            "reason": grp.reason,
        }
        if fleet is not None:
            slot = fleet.slots[ordinal]
            group["host"] = host
            group["name"] = slot.name
            group["ordinal"] = ordinal
            group["tp_size"] = fleet.tp_size
            group["pp_size"] = fleet.pp_size
            group["port"] = slot.port
            group["dist_port"] = slot.dist_port
            group["dist_port_range"] = [slot.dist_port, slot.dist_port + fleet.range_last]
        out_groups.append(group)
    unused = [{"id": gpus[u.position].id, "index": gpus[u.position].index, "reason": u.reason} for u in template.unused]
    return {"host": host, "groups": out_groups, "unused": unused, "warnings": host_warnings(template, view)}
