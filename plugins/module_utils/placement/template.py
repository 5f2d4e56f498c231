# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 2a: the template of one host's plan.

A template is the plan by GPU position, free of identities, a function of
PlanKey alone (the host's Topology as placement/facts.py read it, which
GPUs are excluded, the options); placement/host.py memoises it on that key
and fills in the host's name and GPU identities. Built in named steps:
which GPUs can be placed, whether groups must span sockets, the search,
stages into instances, then each instance's CPUs, binding and reason.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import reasons
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.domains import SINGLE_GPU_SCORE
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import search as _search
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.binding import BindingTemplate, instance_binding
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import SocketKey, assign_cpus, node_sockets
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts import Topology, link_score
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError, PlanOptions

# Score of a GPU pair the facts hold no link for: below SYS, never assumed.
UNKNOWN_LINK_SCORE = -1


class PlanKey(NamedTuple):
    """Everything a host's template depends on: the cache key, and the template's only input."""

    options: PlanOptions
    excluded: tuple  # per GPU position (PCI order): excluded by exclude_gpus
    topology: Topology


class StageTemplate(NamedTuple):
    positions: tuple  # GPU positions (PCI order) of the stage
    numa_nodes: tuple
    socket: Optional[int]  # None when unknown or the stage spans sockets
    sockets: tuple
    worst_link: Optional[str]


class GroupTemplate(NamedTuple):
    stages: tuple  # StageTemplate, pipeline order
    numa_nodes: tuple
    sockets: tuple
    cpus: str
    cpus_shared_node: bool
    cpus_whole_nodes: bool
    memory_policy: str
    worst_link: Optional[str]
    reason: str
    binding: BindingTemplate
    by_node: bool  # the unit binds by node: the instance owns its nodes' CPUs outright


class Unused(NamedTuple):
    position: int
    reason: str


class Rehomed(NamedTuple):
    """A GPU the facts put on a memory-only node, and the node with CPUs it is placed on (None: none known)."""

    position: int
    memory_node: int
    home: Optional[int]


class MissingLinks(NamedTuple):
    count: int  # GPU pairs the facts hold no link class for
    first: tuple  # (position, position) of the first


class HostTemplate(NamedTuple):
    groups: tuple  # GroupTemplate, ordered by first GPU in PCI order
    unused: tuple  # Unused, by position
    unknown_node: tuple  # positions of placeable-but-unknown-node GPUs (one warning each)
    rehomed: tuple  # Rehomed, one warning each
    missing_links: Optional[MissingLinks]
    notes: tuple  # warnings free of identities


class Placeable(NamedTuple):
    """The GPUs the search works on (placeable, in PCI order) and why the others are not."""

    positions: list  # GPU position of each placeable GPU
    nodes: list  # its NUMA node (memory-only nodes replaced by their home)
    sockets: list  # its SocketKey
    unused: list  # Unused
    unknown: list  # positions whose NUMA node is unknown
    rehomed: list  # Rehomed


def build_template(key, host, gpu_ids):
    """The template of a host: a function of key alone (host and gpu_ids only name things in errors)."""
    topo, opts = key.topology, key.options
    node_socket = node_sockets(topo)
    gpus = _placeable(key, node_socket)
    score, missing = _score_matrix(topo, gpus.positions)
    span = _must_span(gpus, topo, opts, host, gpu_ids)
    result = _search.search(gpus.nodes, gpus.sockets, score, opts.tp_size, opts.pp_size, span,
                            opts.max_instances_per_host)
    notes = []
    if not result.exhaustive:
        notes.append(
            "too many distinct GPUs on one socket for the exact search (its work budget ran out); groups "
            "were formed node by node in PCI order, each inside its socket (or the host, when groups span), "
            "and their links are not optimised: the plan may not be optimal"
        )
    if not result.groups:
        raise PlacementError(
            "host %s: pp_size %d x tp_size %d needs %d groups of %d GPUs; only %d fit"
            % (host, opts.pp_size, opts.tp_size, opts.pp_size, opts.tp_size, result.max_groups(opts.tp_size)))
    instances = _instances(result.groups, opts.pp_size, gpus)
    used = set(g for group in result.groups for g in group)
    unused = list(gpus.unused)
    for i, why in reasons.unused_reasons(len(gpus.positions), used, result, opts, span, gpus.sockets, gpus.nodes):
        unused.append(Unused(gpus.positions[i], why))
    unused.sort()
    inst_nodes = []
    for stages in instances:
        weights = {}
        for stage in stages:
            for g in stage:
                weights[gpus.nodes[g]] = weights.get(gpus.nodes[g], 0) + 1
        inst_nodes.append(tuple(sorted(weights.items())))
    cpu_plan, cpu_notes = assign_cpus(topo, node_socket, inst_nodes, opts.reserved_cpus_per_socket, host)
    notes.extend(cpu_notes)
    node_cpus = dict((node.id, set(parse_cpulist(node.cpus))) for node in topo.nodes)
    groups = []
    for idx, stages in enumerate(instances):
        group, note = _group_template(topo, gpus, score, stages, cpu_plan[idx], node_cpus, opts, idx, host, span)
        if note:
            notes.append(note)
        groups.append(group)
    return HostTemplate(tuple(groups), tuple(unused), tuple(gpus.unknown), tuple(gpus.rehomed), missing, tuple(notes))


def _placeable(key, node_socket):
    """Placeable of a host: excluded GPUs, GPUs of unknown nodes and of memory-only nodes without a home left out."""
    topo = key.topology
    homes = home_nodes(topo, node_socket)
    gpus = Placeable([], [], [], [], [], [])
    for pos, node in enumerate(topo.gpu_nodes):
        rehomed = node in homes
        if rehomed:
            gpus.rehomed.append(Rehomed(pos, node, homes[node]))
            node = homes[node]
        if key.excluded[pos]:
            gpus.unused.append(Unused(pos, "excluded by exclude_gpus"))
        elif node is None and rehomed:
            gpus.unused.append(Unused(pos, "NUMA node %d has no CPUs (memory only) and no node with CPUs is known to "
                                           "be nearest: cannot be placed socket-locally" % gpus.rehomed[-1].memory_node))
        elif node is None:
            gpus.unused.append(Unused(pos, "NUMA node unknown (numa_node is null): cannot be placed socket-locally"))
            gpus.unknown.append(pos)
        else:
            gpus.positions.append(pos)
            gpus.nodes.append(node)
            # a node without a known socket is its own socket (rule 7)
            gpus.sockets.append(SocketKey.of(node, node_socket))
    return gpus


def _must_span(gpus, topo, opts, host, gpu_ids):
    """Whether groups span sockets: tp_size exceeds the placeable GPUs of every socket and allow_span says so."""
    tp = opts.tp_size
    per_socket = {}
    for s in gpus.sockets:
        per_socket[s] = per_socket.get(s, 0) + 1
    most_on_socket = max(per_socket.values()) if per_socket else 0
    if tp <= most_on_socket:
        return False
    n = len(gpus.positions)
    if not topo.gpu_nodes:
        raise PlacementError("host %s: the topology facts list no GPUs" % host)
    if not n:
        raise PlacementError("host %s: none of its %d GPUs can be placed (%s)" % (
            host, len(gpu_ids), "; ".join("%s: %s" % (gpu_ids[u.position], u.reason) for u in gpus.unused)))
    if not opts.allow_span:
        # a node whose socket is unknown stands as its own socket (rule 7): say what the facts know
        known = set(s.known for s in gpus.sockets)
        where = ("socket" if known == {True} else "NUMA node" if known == {False}
                 else "socket (or NUMA node, where its socket is unknown)")
        raise PlacementError(
            "host %s: tp_size %d does not fit on any %s (at most %d placeable GPUs share one); "
            "set gpufleet_allow_span: true (allow_span=true for the fleet_plan filter) to let a group span them" % (host, tp, where, most_on_socket)
        )
    if tp > n:
        raise PlacementError("host %s: tp_size %d exceeds the %d placeable GPUs" % (host, tp, n))
    return True


def _instances(groups, pp, gpus):
    """Stages into instances: same node, then same socket, then PCI order; instances by first GPU."""
    def stage_key(group):
        return (gpus.sockets[group[0]].order(), gpus.nodes[group[0]], group[0])

    ordered = sorted(groups, key=stage_key)
    instances = [sorted(ordered[i : i + pp], key=lambda g: g[0]) for i in range(0, len(ordered), pp)]
    instances.sort(key=lambda stages: stages[0][0])
    return instances


def _group_template(topo, gpus, score, stages, cpus, node_cpus, opts, idx, host, span):
    """(GroupTemplate, note or None) of one instance (its stages as placeable GPU indices)."""
    node_of, socket_of = gpus.nodes, gpus.sockets
    stage_entries = []
    for stage in stages:
        keys = set(socket_of[g] for g in stage)
        s_sockets = tuple(sorted(k.socket for k in keys if k.known))
        stage_entries.append(StageTemplate(
            positions=tuple(gpus.positions[g] for g in stage),
            numa_nodes=tuple(sorted(set(node_of[g] for g in stage))),
            socket=s_sockets[0] if len(keys) == 1 and s_sockets else None,
            sockets=s_sockets,
            worst_link=_worst_link(stage, score, topo, gpus.positions),
        ))
    members = [g for stage in stages for g in stage]
    interleave = any(len(st.numa_nodes) > 1 for st in stage_entries)
    worst_stage = stage_entries[min(range(len(stages)), key=lambda k: _group_worst(stages[k], score))]
    binding, note = instance_binding(node_cpus, opts, idx, host, stages, stage_entries, node_of, cpus, interleave)
    return GroupTemplate(
        stages=tuple(stage_entries),
        numa_nodes=tuple(sorted(set(node_of[g] for g in members))),
        sockets=tuple(sorted(set(socket_of[g].socket for g in members if socket_of[g].known))),
        cpus=cpus.cpus,
        cpus_shared_node=cpus.shared_node,
        cpus_whole_nodes=cpus.whole_nodes,
        memory_policy="interleave" if interleave else "bind",
        worst_link=worst_stage.worst_link,
        reason=reasons.group_reason(stage_entries, span, interleave),
        binding=binding,
        by_node=bool(cpus.whole_nodes and not cpus.shared_node),
    ), note


def _score_matrix(topo, placeable_pos):
    """(link scores between placeable GPUs, MissingLinks or None).

    One pass over the pairs, each link class scored once: a host may have a thousand GPUs.
    """
    n = len(placeable_pos)
    score = [[0] * n for _row in range(n)]
    score_of = {}
    missing = 0
    first_missing = None
    for i in range(n):
        row = topo.links[placeable_pos[i]]
        score_i = score[i]
        for j in range(i + 1, n):
            link = row[placeable_pos[j]]
            s = score_of.get(link)
            if s is None:
                s = score_of[link] = UNKNOWN_LINK_SCORE if link is None else link_score(link)
            if link is None:
                missing += 1
                if first_missing is None:
                    first_missing = (placeable_pos[i], placeable_pos[j])
            score_i[j] = s
            score[j][i] = s
    return score, (MissingLinks(missing, first_missing) if missing else None)


def home_nodes(topo, node_socket):
    """memory-only node -> the node with CPUs its GPUs are placed on (None: none known).

    A node without CPUs (HBM, CXL, a GPU's own memory) is never a home: a
    GPU the facts put there is placed on the nearest node with CPUs - of
    the same socket when the socket is known, nearest by SLIT distance;
    without distances the lowest of that socket, or the one node with CPUs
    the host has. Its memory is then bound there too, never to the
    memory-only node.
    """
    cpu_nodes = [n for n in topo.nodes if not n.memory_only and n.cpus]
    homes = {}
    for node in topo.nodes:
        if not node.memory_only:
            continue
        sock = node_socket.get(node.id)
        candidates = [n.id for n in cpu_nodes if sock is None or node_socket.get(n.id) == sock]
        distances = dict(node.distances)
        if distances and all(c in distances for c in candidates):
            homes[node.id] = min(candidates, key=lambda c: (distances[c], c)) if candidates else None
        elif sock is not None or len(candidates) == 1:
            homes[node.id] = min(candidates) if candidates else None
        else:
            homes[node.id] = None
    return homes


def _group_worst(group, score):
    worst = SINGLE_GPU_SCORE
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            worst = min(worst, score[a][b])
    return worst


def _worst_link(group, score, topo, positions):
    """The link class of a group's worst pair (None: a one-GPU group, or the facts hold no link for it)."""
    worst = None
    name = None
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            if worst is None or score[a][b] < worst:
                worst = score[a][b]
                low, high = min(a, b), max(a, b)
                name = topo.links[positions[low]][positions[high]]
    return name
