# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement, part 2: the plan of one host (docs/plan.md, socket_local_groups).

A host's plan is built in two steps:

- a template: the plan by GPU position, free of identities, a function of
  PlanKey alone (the host's Topology as placement_facts.py read it, which
  GPUs are excluded, the options). Templates are memoised on that key, so
  a fleet of identical machines costs one search and one template;
- the plan: the template with this host's name and GPU identities.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import search as _search
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import assign_cpus, fmt_ints, node_sockets
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts import link_score, read_host_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts import Topology
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError, PlanOptions

# Score of a GPU pair the facts hold no link for: below SYS, never assumed.
UNKNOWN_LINK_SCORE = -1

_CACHE_LIMIT = 4096
_TEMPLATES = {}


def clear_cache():
    """Forget memoised templates (benchmarks use it to time a cold plan)."""
    _TEMPLATES.clear()


def cache_size():
    return len(_TEMPLATES)


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
    binding: "BindingTemplate"


class BindingTemplate(NamedTuple):
    """How the unit binds (docs/plan.md, binding): the whole process tree
    (mode process), or each GPU worker on its own node (mode per_worker,
    vLLM's --numa-bind) with the API server on the first stage's nodes."""

    mode: str  # process | per_worker
    cpus: str  # the (API server) process's CPUs
    mems: tuple
    policy: str  # bind | interleave
    workers: tuple  # per GPU in worker order: (node, cpulist of the instance's CPUs on it)


class HostTemplate(NamedTuple):
    groups: tuple  # GroupTemplate, ordered by first GPU in PCI order
    unused: tuple  # (position, reason), by position
    unknown_node: tuple  # positions of placeable-but-unknown-node GPUs (one warning each)
    rehomed: tuple  # (position, memory-only node, node with CPUs it is placed on or None), one warning each
    missing_links: tuple  # (count, (position, position) of the first) or ()
    notes: tuple  # warnings free of identities


class FleetSlots(NamedTuple):
    """What turns a group into a fleet instance: per ordinal (name, API port, VLLM_PORT base)."""

    tp_size: int
    pp_size: int
    slots: list
    range_last: int  # dist_port_range is [dist_port, dist_port + range_last]


def plan_host_validated(facts, opts, host=None, fleet_slots=None):
    """Plan one host for options already checked by validate_options.

    fleet_slots(count, host) -> FleetSlots, when planning for a fleet: the
    groups are then built directly as fleet instances (name, ordinal, ports).
    """
    return plan_host_view(read_host_facts(facts, host), opts, fleet_slots)


def plan_host_view(view, opts, fleet_slots=None):
    """plan_host_validated for facts already read (HostFacts from read_host_facts)."""
    key = plan_key(view, opts)
    template = _TEMPLATES.get(key)
    if template is None:
        try:
            template = build_template(key, view.host, [g.id for g in view.gpus])
        except PlacementError as exc:
            exc.host = view.host
            raise
        except RecursionError:
            # never expected (the search runs on explicit stacks); a host is named, never a traceback
            exc = PlacementError("host %s: the plan is too deep to compute" % view.host)
            exc.host = view.host
            raise exc from None
        if len(_TEMPLATES) >= _CACHE_LIMIT:
            _TEMPLATES.clear()
        _TEMPLATES[key] = template
    slots = fleet_slots(len(template.groups), view.host) if fleet_slots is not None else None
    return instantiate(template, view, slots)


def plan_key(view, opts):
    """The PlanKey of a host (HostFacts from read_host_facts) under checked options."""
    exclude = opts["exclude_gpus"]
    if exclude:
        excluded = tuple(g.id in exclude or g.pci_bus_id in exclude or g.uuid in exclude for g in view.gpus)
    else:
        excluded = (False,) * len(view.gpus)
    return PlanKey(PlanOptions.of(opts), excluded, view.topology)


# ---------------------------------------------------------------- template


def _where(nodes, sockets):
    node_word = "NUMA node %s" % fmt_ints(nodes) if len(nodes) == 1 else "NUMA nodes %s" % fmt_ints(nodes)
    if not sockets:
        return "%s (socket unknown)" % node_word
    sock_word = "socket %s" % fmt_ints(sockets) if len(sockets) == 1 else "sockets %s" % fmt_ints(sockets)
    return "%s (%s)" % (node_word, sock_word)


def build_template(key, host, gpu_ids):
    """The template of a host: a function of key alone (host and gpu_ids only name things in errors)."""
    topo = key.topology
    opts = key.options
    tp, pp = opts.tp_size, opts.pp_size
    unused = []
    unknown = []
    placeable_pos = []
    node_socket = node_sockets(topo)
    homes = home_nodes(topo, node_socket)
    rehomed = []
    gpu_nodes = []
    for pos, node in enumerate(topo.gpu_nodes):
        if node in homes:
            rehomed.append((pos, node, homes[node]))
            node = homes[node]
        gpu_nodes.append(node)
        if key.excluded[pos]:
            unused.append((pos, "excluded by exclude_gpus"))
        elif node is None and rehomed and rehomed[-1][0] == pos:
            unused.append((pos, "NUMA node %d has no CPUs (memory only) and no node with CPUs is known to be "
                                "nearest: cannot be placed socket-locally" % rehomed[-1][1]))
        elif node is None:
            unused.append((pos, "NUMA node unknown (numa_node is null): cannot be placed socket-locally"))
            unknown.append(pos)
        else:
            placeable_pos.append(pos)

    # Labels: a node without a known socket is its own socket (rule 7).
    node_of = [gpu_nodes[pos] for pos in placeable_pos]
    socket_of = [node_socket[n] if node_socket.get(n) is not None else ("node", n) for n in node_of]
    n = len(placeable_pos)
    score, missing = _score_matrix(topo, placeable_pos)

    def link_name(a, b):
        """The link class between placeable GPUs a and b (None: the facts hold none)."""
        low, high = min(a, b), max(a, b)
        return topo.links[placeable_pos[low]][placeable_pos[high]]

    per_socket = {}
    for s in socket_of:
        per_socket[s] = per_socket.get(s, 0) + 1
    most_on_socket = max(per_socket.values()) if per_socket else 0
    span = False
    if tp > most_on_socket:
        if not topo.gpu_nodes:
            raise PlacementError("host %s: the topology facts list no GPUs" % host)
        if not n:
            raise PlacementError(
                "host %s: none of its %d GPUs can be placed (%s)"
                % (host, len(gpu_ids), "; ".join("%s: %s" % (gpu_ids[p], why) for p, why in unused))
            )
        if not opts.allow_span:
            raise PlacementError(
                "host %s: tp_size %d does not fit on any socket (at most %d placeable GPUs share a socket); "
                "set allow_span: true to let a group span sockets" % (host, tp, most_on_socket)
            )
        if tp > n:
            raise PlacementError("host %s: tp_size %d exceeds the %d placeable GPUs" % (host, tp, n))
        span = True

    result = _search.search(node_of, socket_of, score, tp, pp, span, opts.max_instances_per_host)
    groups = result["groups"]
    notes = []
    if not result.get("exhaustive", True):
        notes.append(
            "too many distinct GPUs on one socket for the exact search (its work budget ran out); groups "
            "were formed node by node in PCI order, each inside its socket (or the host, when groups span), "
            "and their links are not optimised: the plan may not be optimal"
        )
    if not groups:
        raise PlacementError(
            "host %s: pp_size %d x tp_size %d needs %d groups of %d GPUs; only %d fit"
            % (host, pp, tp, pp, tp, sum(len(d) // tp for d in result["domains"] if len(d) >= tp))
        )

    # Stages -> instances: same node, then same socket, then PCI order.
    def stage_key(group):
        return (_sort_label(socket_of[group[0]]), node_of[group[0]], group[0])

    ordered = sorted(groups, key=stage_key)
    instances = [sorted(ordered[i : i + pp], key=lambda g: g[0]) for i in range(0, len(ordered), pp)]
    instances.sort(key=lambda stages: stages[0][0])

    used = set(g for group in groups for g in group)
    for i, why in _unused_reasons(n, used, result, opts, span, socket_of, node_of):
        unused.append((placeable_pos[i], why))
    unused.sort()

    inst_nodes = []
    for stages in instances:
        weights = {}
        for stage in stages:
            for g in stage:
                weights[node_of[g]] = weights.get(node_of[g], 0) + 1
        inst_nodes.append(tuple(sorted(weights.items())))
    cpu_plan, cpu_notes = assign_cpus(topo, node_socket, inst_nodes, opts.reserved_cpus_per_socket, host)
    notes.extend(cpu_notes)

    node_cpus = dict((node.id, set(parse_cpulist(node.cpus))) for node in topo.nodes)
    out_groups = []
    for idx, stages in enumerate(instances):
        stage_entries = []
        for stage in stages:
            labels = set(socket_of[g] for g in stage)
            s_sockets = tuple(sorted(x for x in labels if not isinstance(x, tuple)))
            stage_entries.append(StageTemplate(
                positions=tuple(placeable_pos[g] for g in stage),
                numa_nodes=tuple(sorted(set(node_of[g] for g in stage))),
                socket=s_sockets[0] if len(labels) == 1 and s_sockets else None,
                sockets=s_sockets,
                worst_link=_worst_link(stage, score, link_name),
            ))
        members = [g for stage in stages for g in stage]
        interleave = any(len(st.numa_nodes) > 1 for st in stage_entries)
        worst_stage = stage_entries[min(range(len(stages)), key=lambda k: _group_worst(stages[k], score))]
        cpus = cpu_plan[idx]
        binding, note = _binding(node_cpus, opts, idx, host, stages, stage_entries, node_of, cpus, interleave)
        if note:
            notes.append(note)
        out_groups.append(GroupTemplate(
            stages=tuple(stage_entries),
            numa_nodes=tuple(sorted(set(node_of[g] for g in members))),
            sockets=tuple(sorted(set(socket_of[g] for g in members if not isinstance(socket_of[g], tuple)))),
            cpus=cpus.cpus,
            cpus_shared_node=cpus.shared_node,
            cpus_whole_nodes=cpus.whole_nodes,
            memory_policy="interleave" if interleave else "bind",
            worst_link=worst_stage.worst_link,
            reason=_group_reason(stage_entries, span, interleave),
            binding=binding,
        ))
    return HostTemplate(
        groups=tuple(out_groups),
        unused=tuple(unused),
        unknown_node=tuple(unknown),
        rehomed=tuple(rehomed),
        missing_links=missing,
        notes=tuple(notes),
    )


def _score_matrix(topo, placeable_pos):
    """(link scores between placeable GPUs, (count, first pair) of pairs without a link or ()).

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
    return score, ((missing, first_missing) if missing else ())


def _binding(node_cpus, opts, idx, host, stages, stage_entries, node_of, cpus, interleave):
    """(BindingTemplate, note or None) of one instance under opts.worker_binding.

    per_worker: each worker gets its GPU's node and the instance's CPUs on
    that node; the API server process the first stage's nodes. Its CPUs
    are those nodes' when binding by node, and all the instance's CPUs
    when binding by CPU list: vLLM starts each worker under `numactl
    --physcpubind`, which refuses CPUs outside its parent's set, and the
    parent is the API server itself when vLLM runs its engine in-process
    (docs/plan.md, binding modes).
    """
    mine = set(parse_cpulist(cpus.cpus)) if cpus.cpus else set()
    worker_nodes = [node_of[g] for stage in stages for g in stage]
    workers = tuple((node, format_cpulist(mine & node_cpus.get(node, set()))) for node in worker_nodes)
    process = BindingTemplate("process", cpus.cpus, tuple(sorted(set(worker_nodes))),
                              "interleave" if interleave else "bind", workers)
    mode = opts.worker_binding
    if mode == "auto":
        mode = "per_worker" if opts.pp_size > 1 else "process"
    if mode == "process":
        return process, None
    bare = sorted(set(node for node, worker_cpus in workers if not worker_cpus))
    if bare:
        why = ("instance %d: NUMA node(s) %s of its GPUs hold none of its CPUs (%s), so vLLM cannot bind a "
               "worker there" % (idx, fmt_ints(bare), cpus.cpus or "none"))
        if opts.worker_binding == "per_worker":
            raise PlacementError("host %s: worker_binding per_worker: %s" % (host, why))
        return process, why + "; bound process-wide instead"
    first = stage_entries[0].numa_nodes
    by_node = cpus.whole_nodes and not cpus.shared_node
    api_cpus = format_cpulist(mine & set().union(*(node_cpus[n] for n in first))) if by_node else cpus.cpus
    return BindingTemplate("per_worker", api_cpus, first, "interleave" if len(first) > 1 else "bind", workers), None


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


def _sort_label(label):
    # real socket ids (int) before pseudo sockets ("node", n)
    return (1, label[1]) if isinstance(label, tuple) else (0, label)


def _group_worst(group, score):
    worst = _search.SINGLE_GPU_SCORE
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            worst = min(worst, score[a][b])
    return worst


def _worst_link(group, score, link_name):
    worst = None
    name = None
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            if worst is None or score[a][b] < worst:
                worst = score[a][b]
                name = link_name(a, b)
    return name


def _group_reason(stages, span, interleave):
    parts = []
    for st in stages:
        count = len(st.positions)
        text = "%d GPU%s on %s" % (count, "" if count == 1 else "s", _where(st.numa_nodes, st.sockets))
        if st.worst_link:
            text += ", worst link %s" % st.worst_link
        parts.append(text)
    if len(parts) == 1:
        reason = parts[0]
    else:
        reason = "%d pipeline stages: %s" % (len(parts), "; ".join("stage %d: %s" % (i, p) for i, p in enumerate(parts)))
    if span:
        reason += "; tp_size exceeds the GPUs of every socket and allow_span is true, so the group spans sockets"
    elif interleave:
        reason += "; spanning NUMA nodes of one socket gives more groups than staying inside one node"
    if interleave:
        reason += "; memory interleaved over its NUMA nodes"
    return reason


def _unused_reasons(n, used, result, opts, span, socket_of, node_of):
    out = []
    tp, pp, cap = opts.tp_size, opts.pp_size, opts.max_instances_per_host
    max_groups = sum(len(d) // tp for d in result["domains"] if len(d) >= tp)
    capped = cap is not None and max_groups // pp > cap
    for pos in range(n):
        if pos in used:
            continue
        where = _where([node_of[pos]], [] if isinstance(socket_of[pos], tuple) else [socket_of[pos]])
        domain = next(d for d in result["domains"] if pos in d)
        if len(domain) < tp:
            why = "only %d placeable GPU%s on %s's socket, fewer than tp_size %d" % (
                len(domain), "" if len(domain) == 1 else "s", where, tp)
        elif capped:
            why = "max_instances_per_host (%d) reached" % cap
        elif pp > 1 and max_groups % pp:
            why = "pp_size %d: the %d possible group(s) leave a group without a full pipeline" % (pp, max_groups)
        else:
            why = "no complete group of %d GPUs left on its %s (%s)" % (tp, "host" if span else "socket", where)
        out.append((pos, why))
    return out


# ---------------------------------------------------------------- plan


def _ref(gpu):
    """A GPU as plans name it."""
    return {"id": gpu.id, "pci_bus_id": gpu.pci_bus_id, "index": gpu.index, "uuid": gpu.uuid, "name": gpu.name}


def instantiate(template, view, fleet=None):
    """The plan of one host from its template; with fleet (FleetSlots) the groups are fleet instances."""
    gpus = view.gpus
    host = view.host
    warnings = list(view.warnings)
    for p in template.unknown_node:
        warnings.append("GPU %s (index %s) has no known NUMA node; left unused" % (gpus[p].id, gpus[p].index))
    for p, memory_node, home in template.rehomed:
        warnings.append("GPU %s (index %s) is on NUMA node %d, which has no CPUs (memory only): %s"
                        % (gpus[p].id, gpus[p].index, memory_node,
                           "left unused, no node with CPUs is known to be nearest" if home is None
                           else "placed on node %d, the nearest with CPUs; memory bound there, not to node %d"
                           % (home, memory_node)))
    if template.missing_links:
        count, (a, b) = template.missing_links
        warnings.append("%d GPU pair(s) have no link class in the facts (first: %s - %s); ranked below SYS"
                        % (count, gpus[a].id, gpus[b].id))
    warnings.extend(template.notes)
    out_groups = []
    for ordinal, grp in enumerate(template.groups):
        stage_out = []
        members = []
        for st in grp.stages:
            refs = [_ref(gpus[p]) for p in st.positions]
            stage_out.append({
                "gpus": [r["id"] for r in refs],
                "gpu_indices": [r["index"] for r in refs],
                "numa_nodes": list(st.numa_nodes),
                "socket": st.socket,
                "sockets": list(st.sockets),
                "worst_link": st.worst_link,
            })
            members.extend(refs)
        group = {
            "gpus": members,
            "gpu_indices": [r["index"] for r in members],
            "stages": stage_out,
            "numa_nodes": list(grp.numa_nodes),
            "sockets": list(grp.sockets),
            "cpus": grp.cpus,
            "cpus_shared_node": grp.cpus_shared_node,
            "cpus_whole_nodes": grp.cpus_whole_nodes,
            "memory_policy": grp.memory_policy,
            # How the unit binds (docs/plan.md): by node only when the
            # instance owns its nodes' CPUs outright.
            "binding": {"mode": grp.binding.mode, "cpus": grp.binding.cpus, "mems": list(grp.binding.mems),
                        "policy": grp.binding.policy,
                        "by_node": bool(grp.cpus_whole_nodes and not grp.cpus_shared_node),
                        "workers": [{"gpu_index": ref["index"], "node": node, "cpus": worker_cpus}
                                    for ref, (node, worker_cpus) in zip(members, grp.binding.workers)]},
            "worst_link": grp.worst_link,
            "reason": grp.reason,
        }
        if fleet is not None:
            name, port, dist = fleet.slots[ordinal]
            group.update(host=host, name=name, ordinal=ordinal, tp_size=fleet.tp_size, pp_size=fleet.pp_size,
                         port=port, dist_port=dist, dist_port_range=[dist, dist + fleet.range_last])
        out_groups.append(group)
    unused = [{"id": gpus[p].id, "index": gpus[p].index, "reason": why} for p, why in template.unused]
    return {"host": host, "groups": out_groups, "unused": unused, "warnings": warnings}
