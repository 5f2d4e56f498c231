# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Stable instance identity (docs/plan.md, "Stable identity").

A fresh plan numbers a host's instances by position, so excluding one GPU
can rename, move and rebind instances the change does not touch. The kept
plan is the memory: an instance deployed on GPUs and CPUs that are all
still there, under the same options, is kept exactly as deployed; only the
rest of the host is planned again (through the planner the caller passes
in), and every instance that is not kept takes the ordinal of a deployed
instance on exactly its GPUs (a CPU instance: its NUMA nodes), else the
lowest free one. Names and ports follow the ordinal through
placement/fleet.py's slot_of.

Controller-side, plain dicts; one-host instances only (multi-node hosts
keep their fresh plan).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet import check_ports, slot_of
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import Note, host_warning
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import FLEET_OPTIONS, PlacementError
from ansible_collections.gpufleet.numa.plugins.module_utils.plan.artifact import typed_options

# Set per host from its vllm_* variables (host_settings.host_models): a kept
# instance takes today's values, never the deployed ones.
MODEL_FIELDS = ("model", "served_model_name")
# The options a name or port follows from (with the ordinal).
SLOT_OPTIONS = ("base_port", "port_stride", "dist_port_base", "dist_port_stride", "name_prefix")


class HostPart(NamedTuple):
    """One host's share of a plan."""

    instances: list
    unused: list
    warnings: list


def stable_plan(fresh, deployed, settings, facts, replan):
    """The plan of the hosts in `settings` with deployed identities kept.

    fresh: the positional plan of those hosts (fleet_plan_by_host without
    `deployed`); deployed: load_artifact's result, or None before the first
    run; settings: host -> fleet_plan options; facts: host -> the topology
    facts it was planned from; replan(host, facts, options): the planner,
    returning fleet_plan's result for that one host. Raises PlacementError
    when the ordinals kept need ports past 65535 or overlapping.
    """
    if not deployed or not deployed.get("instances"):
        return fresh
    parts = _split(fresh, settings)
    deployed_by_host = {}
    for entry in deployed["instances"]:
        deployed_by_host.setdefault(entry["host"], []).append(entry)
    known = deployed.get("hosts") or {}
    instances, unused, warnings = [], [], []
    for host in sorted(settings):
        part = parts[host]
        old = deployed_by_host.get(host)
        if old and not _multinode(settings[host], old + part.instances):
            part = stable_host(host, part, old, known.get(host) or {}, settings[host], facts[host], replan)
        instances += part.instances
        unused += part.unused
        warnings += part.warnings
    totals = fresh["totals"]
    return dict(fresh, instances=instances, unused=unused, warnings=warnings,
                totals=contract.plan_totals(totals["hosts"], totals["gpus"], instances))


def _split(plan, settings):
    parts = dict((host, HostPart([], [], [])) for host in settings)
    for instance in plan["instances"]:
        parts[instance["host"]].instances.append(instance)
    for entry in plan["unused"]:
        parts[entry["host"]].unused.append(entry)
    for warning in plan["warnings"]:
        if warning["host"] in parts:
            parts[warning["host"]].warnings.append(warning)
    return parts


def _multinode(options, entries):
    return options.get("nodes_per_instance", 1) > 1 or any("multinode" in entry for entry in entries)


def stable_host(host, part, old, entry, options, facts, replan):
    """One host's HostPart: deployed instances kept where nothing forces a
    change, the rest planned around them, every instance numbered."""
    slots = dict((key, options.get(key, FLEET_OPTIONS[key])) for key in SLOT_OPTIONS)
    survivors = []
    if same_options(host, options, entry.get("options")):
        survivors = survivors_of(old, facts, options.get("exclude_gpus") or ())
    if survivors:
        if options.get("device_class") == "cpu":
            rest = cpu_rest(host, survivors, part, facts, options)
        else:
            rest = plan_rest(host, survivors, part, facts, options, replan)
        if rest is None:
            survivors = []  # the change forces the fresh plan
        else:
            part = rest
    kept = [dict(_without_models(instance), device=contract.device(instance)) for instance in survivors]
    return HostPart(number(host, kept, part.instances, old, slots), part.unused, part.warnings)


def same_options(host, now, then):
    """Whether the host is planned now with the options it was deployed with
    (excluded GPUs aside), compared as typed values."""
    if not isinstance(then, dict):
        return False  # a plan kept before options were recorded
    ours, theirs = [
        typed_options(host, dict((k, v) for k, v in options.items() if k != "exclude_gpus"))
        for options in (now, then)]
    for key in SLOT_OPTIONS + ("device_class",):  # a plan from before device classes: auto
        ours.setdefault(key, FLEET_OPTIONS[key])
        theirs.setdefault(key, FLEET_OPTIONS[key])
    return ours == theirs


def usable_cpus(facts):
    """Every CPU services may use on the host (the nodes' usable_cpus, else their cpus)."""
    cpus = set()
    for node in facts.get("numa_nodes") or ():
        text = node.get("usable_cpus")
        cpus.update(parse_cpulist(node.get("cpus") or "" if text is None else text))
    return cpus


def survivors_of(old, facts, exclude):
    """The deployed instances whose GPUs all sit on the host at the same
    index, none excluded now (a CPU instance: whose NUMA nodes all have
    CPUs still, each rank's recorded memory_mb the same as its node's today
    by same_memory), and whose CPUs are all still usable."""
    gpus = dict((gpu.get("id"), gpu) for gpu in facts.get("gpus") or ())
    excluded = set(exclude)
    usable = usable_cpus(facts)
    cpu_nodes = set(node.get("id") for node in facts.get("numa_nodes") or () if node.get("cpus"))
    memory = dict((node.get("id"), node.get("memory_mb")) for node in facts.get("numa_nodes") or ())

    def present(member):
        gpu = gpus.get(member.get("id"))
        return (gpu is not None and gpu.get("index") == member.get("index")
                and not excluded & set((gpu.get("id"), gpu.get("pci_bus_id"), gpu.get("uuid"))))

    def placed(instance):
        if contract.device(instance) == "cpu":
            return (bool(instance.get("numa_nodes")) and set(instance["numa_nodes"]) <= cpu_nodes
                    and all(same_memory(rank.get("memory_mb"), memory.get(rank.get("node")))
                            for rank in contract.ranks(instance)))
        return instance.get("gpus") and all(map(present, instance["gpus"]))

    return [instance for instance in old
            if placed(instance) and set(parse_cpulist(instance.get("cpus") or "")) <= usable]


# A rank's memory_mb sizes its KV cache. A node's MemTotal drifts under
# virtio-mem or a balloon (seen between two runs on a VM: a few MB, and
# 256 MB steps, over 5% once, while the machine's memory was being
# plugged): a kept rank keeps its recorded value within this share of
# today's, and is formed again past it (DIMMs added or removed, or a record
# edited by hand).
MEMORY_DRIFT = 0.10


def same_memory(recorded, today):
    """Whether a rank recorded with RECORDED MB still stands on a node of TODAY MB."""
    if recorded is None or today is None:
        return recorded is None and today is None
    return abs(recorded - today) <= MEMORY_DRIFT * today


def _gpu_ids(instances):
    return set(gpu["id"] for instance in instances for gpu in instance["gpus"])


def plan_rest(host, survivors, fresh, facts, options, replan):
    """The HostPart of the host's GPUs and CPUs the survivors do not hold,
    planned through `replan`; None when that plan forms fewer instances
    (with the survivors) than the fresh one, or one without CPUs."""
    held = _gpu_ids(survivors)
    held_cpus = set().union(*(parse_cpulist(s.get("cpus") or "") for s in survivors))
    rest_facts = dict(facts, numa_nodes=[_node_without(node, held_cpus) for node in facts.get("numa_nodes") or ()])
    rest_options = dict(options, exclude_gpus=list(options.get("exclude_gpus") or ()) + sorted(held))
    # A group spans sockets only when tp exceeds the GPUs of every socket of
    # the host, never because the survivors hold a socket's GPUs.
    rest_options["allow_span"] = bool(options.get("allow_span")) and any(
        len(stage["sockets"]) > 1 for instance in fresh.instances for stage in instance["stages"])
    cap = options.get("max_instances_per_host")
    if cap is not None:
        rest_options["max_instances_per_host"] = max(1, cap - len(survivors))
    try:
        plan = replan(host, rest_facts, rest_options)
        new, unused, warnings = plan["instances"], plan["unused"], plan["warnings"]
    except PlacementError:  # nothing left to form an instance from
        new, unused, warnings = [], _left_over(host, facts, held, fresh, options), []
    if cap is not None and len(survivors) >= cap:
        reason = "max_instances_per_host (%d) reached" % cap
        unused = unused + [{"host": host, "id": gpu["id"], "index": gpu["index"], "reason": reason}
                           for instance in new for gpu in instance["gpus"]]
        new = []
    if len(survivors) + len(new) < len(fresh.instances) or not all(instance.get("cpus") for instance in new):
        return None
    _share_nodes(new, survivors)
    unused = sorted((u for u in unused if u["id"] not in held),
                    key=lambda u: (u.get("index") is None, u.get("index") or 0, u["id"]))
    return HostPart(new, unused, _warnings(fresh.warnings, warnings, held))


def cpu_rest(host, survivors, fresh, facts, options):
    """A CPU host's HostPart beside its survivors: the fresh instances on
    NUMA nodes no survivor holds (a CPU instance is a function of its
    nodes, and planning the rest again would move the reserved cores onto
    them); None when they and the survivors are fewer than the fresh plan.
    Its warnings name the nodes left over beside them."""
    held = set(node for survivor in survivors for node in survivor["numa_nodes"])
    new = [instance for instance in fresh.instances if not held & set(instance["numa_nodes"])]
    cap = options.get("max_instances_per_host")
    if cap is not None:
        new = new[: max(0, cap - len(survivors))]
    if len(survivors) + len(new) < len(fresh.instances):
        return None
    used = held | set(node for instance in new for node in instance["numa_nodes"])
    # A warning about NUMA nodes that instances now all use is the fresh
    # plan's "left over" of a node the survivors hold: it no longer holds.
    warnings = [w for w in fresh.warnings if not (w["nodes"] and set(w["nodes"]) <= used)]
    for node in sorted(n.get("id") for n in facts.get("numa_nodes") or () if n.get("cpus")):
        if node not in used and not any(node in w["nodes"] for w in warnings):
            warnings.append(host_warning(host, Note(
                "NUMA node %d left over: too few NUMA nodes beside the instances kept as deployed for another of "
                "tp_size %s" % (node, options.get("tp_size", 1)), nodes=(node,))))
    return HostPart(new, fresh.unused, warnings)


def _share_nodes(new, survivors):
    """The re-plan saw only the CPUs survivors left: a new instance on a node
    a survivor also uses shares it, so it must not bind by node (that would
    take the survivor's CPUs too)."""
    nodes = set(node for s in survivors for node in s.get("numa_nodes") or ())
    for instance in new:
        if nodes & set(instance["numa_nodes"]):
            instance.update(cpus_shared_node=True, cpus_whole_nodes=False)
            instance["binding"] = dict(instance["binding"], by_node=False)


def _node_without(node, held_cpus):
    text = node.get("usable_cpus")
    usable = parse_cpulist(node.get("cpus") or "" if text is None else text)
    return dict(node, usable_cpus=format_cpulist(cpu for cpu in usable if cpu not in held_cpus))


def _left_over(host, facts, held, fresh, options):
    """The unused entries of the GPUs no survivor holds when no instance can
    be formed of them: the fresh plan's reason where it gives one."""
    reasons = dict((u["id"], u["reason"]) for u in fresh.unused)
    default = "no complete group of %d GPUs left beside the instances kept as deployed" % options.get("tp_size", 1)
    return [{"host": host, "id": gpu["id"], "index": gpu.get("index"), "reason": reasons.get(gpu["id"], default)}
            for gpu in facts.get("gpus") or () if gpu["id"] not in held]


def _about(warning, gpus):
    """Whether the warning concerns any of the GPU ids (its gpus field)."""
    return bool(set(warning["gpus"]) & gpus)


def _warnings(fresh, rest, held):
    """The host's warnings: the fresh plan's about the host itself (naming no
    GPU: SMT siblings, reserved cores) or about GPUs the survivors hold (a GPU
    on a memory-only node), in the fresh plan's order, then the re-plan's
    others, none of them about the held GPUs (the re-plan saw those as
    excluded). A rerun that keeps every instance keeps every warning."""
    held = set(held)
    out = [w for w in fresh if not w["gpus"] or _about(w, held) or w in rest]
    out += [w for w in rest if not _about(w, held) and w not in out]
    return out


def _without_models(instance):
    """A kept instance as a proposal holds it: today's model fields are set
    later, and what it runs is recorded again once its host converged."""
    kept = dict(instance)
    for field in MODEL_FIELDS + ("deployed",):
        kept.pop(field, None)
    return kept


def number(host, kept, others, old, slots):
    """kept (with their ordinals) and the other instances, numbered: an
    instance on exactly the GPUs of a deployed one takes its ordinal, the
    rest the lowest free ordinals in plan order; sorted by ordinal."""
    taken = set(instance["ordinal"] for instance in kept)
    by_place = dict((_place_of(d), d["ordinal"]) for d in old)
    ordinals = []
    for instance in others:
        ordinal = by_place.get(_place_of(instance))
        if ordinal in taken:
            ordinal = None
        ordinals.append(ordinal)
        taken.add(ordinal)
    free = (n for n in itertools.count() if n not in taken)
    ordinals = [next(free) if ordinal is None else ordinal for ordinal in ordinals]
    if kept or others:
        check_ports(slots, max(ordinals + [i["ordinal"] for i in kept]) + 1, host)
    for instance, ordinal in zip(others, ordinals):
        place(instance, ordinal, slots)
    return sorted(kept + list(others), key=lambda instance: instance["ordinal"])


def _place_of(instance):
    """What an instance sits on: its GPUs, or a CPU instance's NUMA nodes."""
    if contract.device(instance) == "cpu":
        return frozenset(("node", n) for n in instance.get("numa_nodes") or ())
    return frozenset(g["id"] for g in instance["gpus"])


def place(instance, ordinal, slots):
    """Give an instance the name and ports of its ordinal (slot_of)."""
    slot = slot_of(slots, ordinal)
    instance.update(name=slot.name, ordinal=ordinal, port=slot.port, dist_port=slot.dist_port,
                    dist_port_range=[slot.dist_port, slot.dist_port + slots["dist_port_stride"] - 1])
