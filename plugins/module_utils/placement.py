# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement: socket-local tensor-parallel GPU groups and fleet plans.

Pure functions over the topology facts (docs/facts.md, schema 1); the
output is the plan contract of docs/plan.md. The rules and the objective
are documented in docs/placement.md; the group search itself lives in
placement_search.py.

Hosts are planned one by one (adding a host never moves instances on
another), and the search result is memoised on a canonical signature of the
host (per-GPU node/socket pattern, link scores in PCI order, options), so a
fleet of identical machines costs one search.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils import cpulist as _cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils import pci as _pci
from ansible_collections.gpufleet.numa.plugins.module_utils import placement_search as _search

SCHEMA_VERSION = 1

HOST_OPTIONS = {
    "tp_size": None,
    "pp_size": 1,
    "allow_span": False,
    "reserved_cpus_per_socket": 0,
    "exclude_gpus": (),
    "max_instances_per_host": None,
}
FLEET_OPTIONS = dict(
    HOST_OPTIONS,
    base_port=8000,
    port_stride=1,
    dist_port_base=29000,
    dist_port_stride=100,
    hosts=None,
    name_prefix="vllm-",
)

# Score of a GPU pair the facts hold no link for: below SYS, never assumed.
UNKNOWN_LINK_SCORE = -1

_SEARCH_CACHE = {}
_CPU_CACHE = {}
_CACHE_LIMIT = 4096
_SCORE_CACHE = {}


class PlacementError(ValueError):
    """Bad input or an impossible plan; the message names host and problem."""


def clear_cache():
    """Forget memoised searches (benchmarks use it to time a cold search)."""
    _SEARCH_CACHE.clear()
    _CPU_CACHE.clear()


# ---------------------------------------------------------------- options


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(options, name, minimum, allow_none=False):
    value = options[name]
    if value is None and allow_none:
        return
    if not _is_int(value) or value < minimum:
        raise PlacementError("%s must be an integer >= %d, got %r" % (name, minimum, value))


def validate_options(options, allowed=None):
    """Return a full option dict (defaults filled in) or raise PlacementError.

    Unknown names are rejected; tp_size is required.
    """
    allowed = HOST_OPTIONS if allowed is None else allowed
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise PlacementError("unknown option(s): %s (known: %s)" % (", ".join(unknown), ", ".join(sorted(allowed))))
    merged = dict(allowed)
    merged.update(options)
    if merged["tp_size"] is None:
        raise PlacementError("tp_size is required")
    _check_int(merged, "tp_size", 1)
    _check_int(merged, "pp_size", 1)
    _check_int(merged, "reserved_cpus_per_socket", 0)
    _check_int(merged, "max_instances_per_host", 1, allow_none=True)
    if not isinstance(merged["allow_span"], bool):
        raise PlacementError("allow_span must be a boolean, got %r" % (merged["allow_span"],))
    excl = merged["exclude_gpus"]
    if excl is None:
        excl = ()
    if isinstance(excl, dict):
        if "hosts" not in allowed:
            raise PlacementError("exclude_gpus must be a list of bus ids or UUIDs for one host")
        checked = {}
        for host, items in excl.items():
            checked[str(host)] = _check_exclude_list(items, "exclude_gpus[%s]" % host)
        merged["exclude_gpus"] = checked
    else:
        merged["exclude_gpus"] = _check_exclude_list(excl, "exclude_gpus")
    if "base_port" in allowed:
        for name in ("base_port", "dist_port_base"):
            _check_int(merged, name, 1)
        for name in ("port_stride", "dist_port_stride"):
            _check_int(merged, name, 1)
        if not isinstance(merged["name_prefix"], str) or not merged["name_prefix"]:
            raise PlacementError("name_prefix must be a non-empty string, got %r" % (merged["name_prefix"],))
        if merged["hosts"] is not None:
            if isinstance(merged["hosts"], (str, bytes, dict)) or not all(isinstance(h, str) for h in merged["hosts"]):
                raise PlacementError("hosts must be a list of host names, got %r" % (merged["hosts"],))
    return merged


def _check_exclude_list(items, what):
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple, set, frozenset)):
        raise PlacementError("%s must be a list of PCI bus ids or UUIDs, got %r" % (what, items))
    out = set()
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise PlacementError("%s holds %r, not a PCI bus id or UUID" % (what, item))
        item = item.strip()
        out.add(item)
        try:
            out.add(_pci.normalize_bus_id(item))
        except ValueError:
            pass
    return frozenset(out)


# ---------------------------------------------------------------- facts


def _score(link):
    try:
        return _SCORE_CACHE[link]
    except KeyError:
        pass
    score = _pci.link_score(link)
    _SCORE_CACHE[link] = score
    return score


def _gpu_order(gpu):
    bus = gpu.get("pci_bus_id")
    index = gpu.get("index")
    return (bus is None, bus or "", index is None, index if index is not None else 0, str(gpu.get("id")))


def _read_facts(facts, host):
    """Check the facts this module relies on; return (gpus in PCI order, nodes by id)."""
    if not isinstance(facts, dict):
        raise PlacementError("host %s: topology facts must be a dict, got %s" % (host, type(facts).__name__))
    if facts.get("schema_version") != SCHEMA_VERSION:
        raise PlacementError(
            "host %s: topology facts schema_version is %r, this collection reads %d"
            % (host, facts.get("schema_version"), SCHEMA_VERSION)
        )
    gpus = facts.get("gpus")
    if not isinstance(gpus, list):
        raise PlacementError("host %s: topology facts have no gpus list" % host)
    seen = set()
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, dict) or not gpu.get("id"):
            raise PlacementError("host %s: gpus[%d] has no id" % (host, i))
        if gpu["id"] in seen:
            raise PlacementError("host %s: GPU id %s appears twice" % (host, gpu["id"]))
        seen.add(gpu["id"])
        node = gpu.get("numa_node")
        if node is not None and not _is_int(node):
            raise PlacementError("host %s: GPU %s has numa_node %r, not an integer or null" % (host, gpu["id"], node))
    nodes = {}
    for i, entry in enumerate(facts.get("numa_nodes") or []):
        if not isinstance(entry, dict) or not _is_int(entry.get("id")):
            raise PlacementError("host %s: numa_nodes[%d] has no integer id" % (host, i))
        nodes[int(entry["id"])] = entry
    return sorted(gpus, key=_gpu_order), nodes


def _node_sockets(facts, nodes):
    """NUMA node -> socket id from either side of the facts; missing = unknown."""
    result = {}
    for entry in facts.get("sockets") or []:
        if entry.get("id") is not None:
            for n in entry.get("numa_nodes") or []:
                result[int(n)] = int(entry["id"])
    for n, entry in nodes.items():
        if entry.get("socket") is not None:
            result[n] = int(entry["socket"])
    return result


# ---------------------------------------------------------------- one host


def _gpu_ref(gpu):
    return {
        "id": _text(gpu["id"]),
        "pci_bus_id": _text(gpu.get("pci_bus_id")),
        "index": _int(gpu.get("index")),
        "uuid": _text(gpu.get("uuid")),
        "name": _text(gpu.get("name")),
    }


def _fmt_ints(values):
    return ",".join(str(v) for v in values)


def _where(nodes, sockets):
    node_word = "NUMA node %s" % _fmt_ints(nodes) if len(nodes) == 1 else "NUMA nodes %s" % _fmt_ints(nodes)
    if not sockets:
        return "%s (socket unknown)" % node_word
    sock_word = "socket %s" % _fmt_ints(sockets) if len(sockets) == 1 else "sockets %s" % _fmt_ints(sockets)
    return "%s (%s)" % (node_word, sock_word)


def plan_host(facts, host=None, **options):
    """Plan one host: the socket_local_groups result (docs/plan.md)."""
    opts = validate_options(options)
    return _plan_host(facts, host, opts)


def plan_host_validated(facts, opts, host=None):
    """plan_host for options already checked by validate_options."""
    return _plan_host(facts, host, opts)


def _text(value):
    # plain str out, whatever str subclass came in (templating tags values)
    return None if value is None else str(value)


def _int(value):
    return None if value is None else int(value)


def _plan_host(facts, host, opts):
    host = host or (facts.get("hostname") if isinstance(facts, dict) else None) or "(unnamed host)"
    gpus, nodes = _read_facts(facts, host)
    tp = opts["tp_size"]
    pp = opts["pp_size"]
    exclude = opts["exclude_gpus"]
    node_socket = _node_sockets(facts, nodes)
    warnings = []
    unused = []
    placeable = []
    for gpu in gpus:
        if exclude and (gpu["id"] in exclude or gpu.get("pci_bus_id") in exclude or gpu.get("uuid") in exclude):
            unused.append((gpu, "excluded by exclude_gpus"))
        elif gpu.get("numa_node") is None:
            unused.append((gpu, "NUMA node unknown (numa_node is null): cannot be placed socket-locally"))
            warnings.append("GPU %s (index %s) has no known NUMA node; left unused" % (gpu["id"], gpu.get("index")))
        else:
            placeable.append(gpu)

    # Labels: a node without a known socket is its own socket (rule 7).
    node_of = [int(g["numa_node"]) for g in placeable]
    socket_of = [node_socket[n] if node_socket.get(n) is not None else ("node", n) for n in node_of]
    links = facts.get("links") or {}
    n = len(placeable)
    score = [[0] * n for _ in range(n)]
    unknown_pairs = []
    for i in range(n):
        row = links.get(placeable[i]["id"]) or {}
        for j in range(i + 1, n):
            link = row.get(placeable[j]["id"])
            if link is None:
                link = (links.get(placeable[j]["id"]) or {}).get(placeable[i]["id"])
            if link is None:
                s = UNKNOWN_LINK_SCORE
                unknown_pairs.append((placeable[i]["id"], placeable[j]["id"]))
            else:
                try:
                    s = _score(link)
                except ValueError:
                    raise PlacementError(
                        "host %s: unknown link class %r between GPUs %s and %s"
                        % (host, link, placeable[i]["id"], placeable[j]["id"])
                    )
            score[i][j] = score[j][i] = s
    if unknown_pairs:
        warnings.append(
            "%d GPU pair(s) have no link class in the facts (first: %s - %s); ranked below SYS"
            % (len(unknown_pairs), unknown_pairs[0][0], unknown_pairs[0][1])
        )

    per_socket = {}
    for s in socket_of:
        per_socket[s] = per_socket.get(s, 0) + 1
    most_on_socket = max(per_socket.values()) if per_socket else 0
    span = False
    if tp > most_on_socket:
        if not gpus:
            raise PlacementError("host %s: the topology facts list no GPUs" % host)
        if not n:
            raise PlacementError(
                "host %s: none of its %d GPUs can be placed (%s)"
                % (host, len(gpus), "; ".join("%s: %s" % (g["id"], why) for g, why in unused))
            )
        if not opts["allow_span"]:
            raise PlacementError(
                "host %s: tp_size %d does not fit on any socket (at most %d placeable GPUs share a socket); "
                "set allow_span: true to let a group span sockets" % (host, tp, most_on_socket)
            )
        if tp > n:
            raise PlacementError("host %s: tp_size %d exceeds the %d placeable GPUs" % (host, tp, n))
        span = True

    result = _cached_search(node_of, socket_of, score, tp, pp, span, opts["max_instances_per_host"])
    groups = result["groups"]
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
    unused.extend(_unused_reasons(placeable, used, result, tp, pp, opts, span, socket_of, node_of))

    cpu_plan = _assign_cpus(facts, nodes, node_socket, instances, node_of, opts["reserved_cpus_per_socket"], host, warnings)

    out_groups = []
    for idx, stages in enumerate(instances):
        stage_entries = []
        all_gpus = []
        for stage in stages:
            s_nodes = sorted(set(node_of[g] for g in stage))
            s_sockets = sorted(set(socket_of[g] for g in stage if not isinstance(socket_of[g], tuple)))
            worst = _worst_link(stage, score, links, placeable)
            stage_entries.append(
                {
                    "gpus": [_text(placeable[g]["id"]) for g in stage],
                    "gpu_indices": [_int(placeable[g].get("index")) for g in stage],
                    "numa_nodes": s_nodes,
                    "socket": s_sockets[0] if len(s_sockets) == 1 and len(set(socket_of[g] for g in stage)) == 1 else None,
                    "sockets": s_sockets,
                    "worst_link": worst,
                }
            )
            all_gpus.extend(stage)
        i_nodes = sorted(set(node_of[g] for g in all_gpus))
        i_sockets = sorted(set(socket_of[g] for g in all_gpus if not isinstance(socket_of[g], tuple)))
        interleave = any(len(st["numa_nodes"]) > 1 for st in stage_entries)
        worst_stage = stage_entries[min(range(len(stages)), key=lambda k: _group_worst(stages[k], score))]
        cpus, shared = cpu_plan[idx]
        out_groups.append(
            {
                "gpus": [_gpu_ref(placeable[g]) for g in all_gpus],
                "gpu_indices": [_int(placeable[g].get("index")) for g in all_gpus],
                "stages": stage_entries,
                "numa_nodes": i_nodes,
                "sockets": i_sockets,
                "cpus": cpus,
                "cpus_shared_node": shared,
                "memory_policy": "interleave" if interleave else "bind",
                "worst_link": worst_stage["worst_link"],
                "reason": _group_reason(stage_entries, span, interleave),
            }
        )
    return {
        "host": _text(host),
        "groups": out_groups,
        "unused": [{"id": _text(g["id"]), "index": _int(g.get("index")), "reason": why} for g, why in unused],
        "warnings": warnings,
    }


def _sort_label(label):
    # real socket ids (int) before pseudo sockets ("node", n)
    return (1, label[1]) if isinstance(label, tuple) else (0, label)


def _group_worst(group, score):
    worst = _search.SINGLE_GPU_SCORE
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            worst = min(worst, score[a][b])
    return worst


def _worst_link(group, score, links, placeable):
    worst = None
    name = None
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            if worst is None or score[a][b] < worst:
                worst = score[a][b]
                name = (links.get(placeable[a]["id"]) or {}).get(placeable[b]["id"]) or (
                    links.get(placeable[b]["id"]) or {}
                ).get(placeable[a]["id"])
    return _text(name)


def _group_reason(stage_entries, span, interleave):
    parts = []
    for st in stage_entries:
        text = "%d GPU%s on %s" % (len(st["gpus"]), "" if len(st["gpus"]) == 1 else "s", _where(st["numa_nodes"], st["sockets"]))
        if st["worst_link"]:
            text += ", worst link %s" % st["worst_link"]
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


def _unused_reasons(placeable, used, result, tp, pp, opts, span, socket_of, node_of):
    out = []
    cap = opts["max_instances_per_host"]
    max_groups = sum(len(d) // tp for d in result["domains"] if len(d) >= tp)
    capped = cap is not None and max_groups // pp > cap
    for pos, gpu in enumerate(placeable):
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
        out.append((gpu, why))
    return out


def _cached_search(node_of, socket_of, score, tp, pp, span, cap):
    node_ids = {}
    socket_ids = {}
    canon_nodes = tuple(node_ids.setdefault(x, len(node_ids)) for x in node_of)
    canon_sockets = tuple(socket_ids.setdefault(x, len(socket_ids)) for x in socket_of)
    key = (canon_nodes, canon_sockets, tuple(map(tuple, score)), tp, pp, span, cap)
    hit = _SEARCH_CACHE.get(key)
    if hit is None:
        if len(_SEARCH_CACHE) >= _CACHE_LIMIT:
            _SEARCH_CACHE.clear()
        hit = _search.search(list(canon_nodes), list(canon_sockets), score, tp, pp, span, cap)
        _SEARCH_CACHE[key] = hit
    return hit


# ---------------------------------------------------------------- CPUs


def _assign_cpus(facts, nodes, node_socket, instances, node_of, reserved, host, warnings):
    """Return [(cpulist, cpus_shared_node)] per instance (rule 5)."""
    inst_nodes = []
    for stages in instances:
        weights = {}
        for stage in stages:
            for g in stage:
                weights[node_of[g]] = weights.get(node_of[g], 0) + 1
        inst_nodes.append(tuple(sorted(weights.items())))
    smt = facts.get("smt_siblings") or []
    needed = sorted(set(n for entry in inst_nodes for n, _w in entry))
    key = (
        tuple(inst_nodes),
        reserved,
        tuple((n, (nodes.get(n) or {}).get("cpus")) for n in sorted(nodes)),
        tuple(sorted((n, s) for n, s in node_socket.items() if s is not None)),
        tuple(tuple(core) for core in smt) if (reserved or len(inst_nodes) > len(needed)) else None,
        tuple(_fallback_cpus(facts, n) for n in needed if n not in nodes),
    )
    hit = _CPU_CACHE.get(key)
    if hit is None:
        if len(_CPU_CACHE) >= _CACHE_LIMIT:
            _CPU_CACHE.clear()
        hit = _compute_cpus(facts, nodes, node_socket, inst_nodes, smt, reserved)
        _CPU_CACHE[key] = hit
    plan, notes, error = hit
    if error:
        raise PlacementError("host %s: %s" % (host, error))
    warnings.extend(notes)
    return plan


def _fallback_cpus(facts, node):
    cpus = set()
    for gpu in facts.get("gpus") or []:
        if gpu.get("numa_node") == node and gpu.get("local_cpus"):
            cpus.update(_cpulist.parse_cpulist(gpu["local_cpus"]))
    return _cpulist.format_cpulist(cpus)


def _compute_cpus(facts, nodes, node_socket, inst_nodes, smt, reserved):
    notes = []
    node_cpus = {}
    for n, entry in nodes.items():
        try:
            node_cpus[n] = _cpulist.parse_cpulist(entry.get("cpus") or "")
        except ValueError as exc:
            return [], [], "NUMA node %s: %s" % (n, exc)
    for entry in inst_nodes:
        for n, _w in entry:
            if n not in node_cpus:
                node_cpus[n] = _cpulist.parse_cpulist(_fallback_cpus(facts, n))
                notes.append("NUMA node %d is not in numa_nodes; using its GPUs' local_cpus (%s)" % (
                    n, _cpulist.format_cpulist(node_cpus[n]) or "none"))
    core_of = {}
    for core in smt:
        for cpu in core:
            core_of[cpu] = tuple(sorted(core))

    def cores(cpus):
        """Physical cores (tuples of threads) of a CPU set, by lowest thread."""
        seen = {}
        if smt:
            for cpu in cpus:
                core = core_of.get(cpu, (cpu,))
                seen[core] = tuple(c for c in core if c in cpus)
            return sorted(seen.values())
        return [(c,) for c in sorted(cpus)]

    # Reserved housekeeping CPUs: the first N physical cores of each socket.
    available = dict((n, set(c)) for n, c in node_cpus.items())
    if reserved:
        sockets = {}
        for n in node_cpus:
            label = node_socket.get(n)
            sockets.setdefault(("node", n) if label is None else label, set()).update(node_cpus[n])
        taken = set()
        for label, cpus in sockets.items():
            for core in cores(cpus)[:reserved]:
                taken.update(core)
        for n in available:
            if node_cpus[n] and not (available[n] - taken):
                return [], [], "reserved_cpus_per_socket %d leaves no CPUs on NUMA node %d" % (reserved, n)
            available[n] -= taken

    # Which nodes give each instance its CPUs (never a memory-only node).
    sources = []
    for idx, entry in enumerate(inst_nodes):
        src = [(n, w) for n, w in entry if available.get(n)]
        if not src:
            fallback = _nearest_cpu_node(entry[0][0], nodes, node_socket, available)
            if fallback is None:
                notes.append("instance %d: no CPUs known for NUMA node(s) %s; not CPU-pinned" % (
                    idx, _fmt_ints(n for n, _w in entry)))
            else:
                notes.append("instance %d: NUMA node(s) %s have no CPUs; using CPUs of nearest node %d" % (
                    idx, _fmt_ints(n for n, _w in entry), fallback))
                src = [(fallback, 1)]
        sources.append(src)

    users = {}
    for idx, src in enumerate(sources):
        for n, w in src:
            users.setdefault(n, []).append((idx, w))
    parts = [set() for _ in inst_nodes]
    shared = [False] * len(inst_nodes)
    for n, members in users.items():
        cpus = available[n]
        if len(members) == 1:
            parts[members[0][0]].update(cpus)
            continue
        for idx, _w in members:
            shared[idx] = True
        # by physical core; without SMT information, contiguous runs of the cpulist
        units = cores(cpus)
        if len(units) < len(members):
            units = [(c,) for c in sorted(cpus)]
            if len(units) >= len(members):
                notes.append("NUMA node %d has fewer physical cores than the %d instances sharing it; "
                             "SMT siblings split between them" % (n, len(members)))
        if len(units) < len(members):
            notes.append("NUMA node %d has %d CPUs for %d instances; their CPU sets overlap" % (
                n, len(units), len(members)))
            for k, (idx, _w) in enumerate(members):
                parts[idx].update(units[k % len(units)] if units else ())
            continue
        for (idx, _w), chunk in zip(members, _split(units, [w for _i, w in members])):
            for unit in chunk:
                parts[idx].update(unit)
    return [(_cpulist.format_cpulist(p), shared[i]) for i, p in enumerate(parts)], notes, None


def _split(units, weights):
    """Consecutive chunks of units, sized in proportion to weights, each >= 1."""
    total = sum(weights)
    count = len(units)
    sizes = [max(1, count * w // total) for w in weights]
    # hand out what rounding left, earliest first; take back from the largest if over
    i = 0
    while sum(sizes) < count:
        sizes[i % len(sizes)] += 1
        i += 1
    while sum(sizes) > count:
        biggest = max(range(len(sizes)), key=lambda k: sizes[k])
        sizes[biggest] -= 1
    out = []
    start = 0
    for size in sizes:
        out.append(units[start : start + size])
        start += size
    return out


def _nearest_cpu_node(node, nodes, node_socket, available):
    distances = (nodes.get(node) or {}).get("distances") or {}
    same_socket = node_socket.get(node)
    candidates = [
        n for n in sorted(available)
        if available[n] and same_socket is not None and node_socket.get(n) == same_socket
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda n: (distances.get(n, distances.get(str(n), 1000)), n))


# ---------------------------------------------------------------- fleet


def host_facts(host, value):
    """Topology facts from a hostvars-like entry or the facts themselves."""
    if isinstance(value, dict):
        if "schema_version" in value and "gpus" in value:
            return value
        facts = (value.get("ansible_facts") or {}).get("numa_topology") if isinstance(value.get("ansible_facts"), dict) else None
        if facts is None:
            facts = value.get("numa_topology")
        if facts is not None:
            return facts
    raise PlacementError(
        "host %s: no topology facts (expected ansible_facts.numa_topology, numa_topology or the facts themselves); "
        "run gpufleet.numa.numa_facts on it or leave it out with the hosts option" % host
    )


def plan_fleet(fleet, **options):
    """Plan a fleet: the fleet_plan result (docs/plan.md).

    fleet: mapping host -> vars (hostvars-like) or host -> topology facts.
    """
    opts = validate_options(options, FLEET_OPTIONS)
    hosts = fleet
    if not isinstance(hosts, dict):
        raise PlacementError("fleet_plan input must be a mapping host -> vars or facts, got %s" % type(hosts).__name__)
    names = opts["hosts"]
    if names is None:
        names = sorted(hosts, key=str)
    else:
        missing = [h for h in names if h not in hosts]
        if missing:
            raise PlacementError("hosts not in the input: %s" % ", ".join(missing))
        dupes = sorted(set(h for h in names if names.count(h) > 1))
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
    most = 0
    for host in names:
        facts = host_facts(host, hosts[host])
        if isinstance(exclude, dict):
            host_opts["exclude_gpus"] = exclude.get(host, frozenset())
        plan = _plan_host(facts, host, host_opts)
        gpu_total += len(facts["gpus"])
        most = max(most, len(plan["groups"]))
        _check_ports(opts, len(plan["groups"]), host)
        for ordinal, group in enumerate(plan["groups"]):
            dist = opts["dist_port_base"] + ordinal * opts["dist_port_stride"]
            instance = {
                "host": host,
                "name": "%s%d" % (opts["name_prefix"], ordinal),
                "ordinal": ordinal,
                "tp_size": opts["tp_size"],
                "pp_size": opts["pp_size"],
            }
            instance.update(group)
            instance["port"] = opts["base_port"] + ordinal * opts["port_stride"]
            instance["dist_port"] = dist
            instance["dist_port_range"] = [dist, dist + opts["dist_port_stride"] - 1]
            instances.append(instance)
        for entry in plan["unused"]:
            unused.append(dict(entry, host=host))
        warnings.extend("%s: %s" % (host, w) for w in plan["warnings"])
    used = sum(len(i["gpus"]) for i in instances)
    return {
        "instances": instances,
        "unused": unused,
        "warnings": warnings,
        "totals": {
            "hosts": len(names),
            "instances": len(instances),
            "gpus": gpu_total,
            "gpus_used": used,
            "gpus_unused": gpu_total - used,
        },
    }


def _check_ports(opts, count, host):
    """API ports and VLLM_PORT ranges of `count` instances: in range, never overlapping."""
    if count == 0:
        return
    last_api = opts["base_port"] + (count - 1) * opts["port_stride"]
    last_dist = opts["dist_port_base"] + count * opts["dist_port_stride"] - 1
    if last_api > 65535 or last_dist > 65535:
        raise PlacementError(
            "host %s: %d instances need API ports up to %d and VLLM_PORT ranges up to %d; ports end at 65535"
            % (host, count, last_api, last_dist)
        )
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
