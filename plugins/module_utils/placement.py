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

import gc

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
_PLAN_CACHE = {}
_CACHE_LIMIT = 4096
_SCORE_CACHE = {}


class PlacementError(ValueError):
    """Bad input or an impossible plan; the message names host and problem."""


def clear_cache():
    """Forget memoised searches (benchmarks use it to time a cold search)."""
    _SEARCH_CACHE.clear()
    _PLAN_CACHE.clear()


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
    buses = []
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, dict) or not gpu.get("id"):
            raise PlacementError("host %s: gpus[%d] has no id" % (host, i))
        gid = gpu["id"]
        if gid in seen:
            raise PlacementError("host %s: GPU id %s appears twice" % (host, gid))
        seen.add(gid)
        node = gpu.get("numa_node")
        if node is not None and (node.__class__ is not int and (isinstance(node, bool) or not isinstance(node, int))):
            raise PlacementError("host %s: GPU %s has numa_node %r, not an integer or null" % (host, gid, node))
        buses.append(gpu.get("pci_bus_id"))
    nodes = {}
    for i, entry in enumerate(facts.get("numa_nodes") or ()):
        node_id = entry.get("id") if isinstance(entry, dict) else None
        if node_id is None or isinstance(node_id, bool) or not isinstance(node_id, int):
            raise PlacementError("host %s: numa_nodes[%d] has no integer id" % (host, i))
        nodes[int(node_id)] = entry
    if None not in buses and all(buses[i] < buses[i + 1] for i in range(len(buses) - 1)):
        return gpus, nodes  # facts come sorted by bus id; checking is cheaper than sorting
    # PCI order; GPUs without a bus id after those with one, by index
    keys = [
        (g.get("pci_bus_id") is None, g.get("pci_bus_id") or "", g.get("index") is None, g.get("index") or 0, str(g["id"]))
        for g in gpus
    ]
    order = sorted(range(len(gpus)), key=keys.__getitem__)
    return [gpus[i] for i in order], nodes


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


def _int(value):
    return None if value is None else int(value)


def _plan_host(facts, host, opts, fleet=None):
    """Plan one host: read the facts, reuse or build the plan template, fill in identities."""
    host = host or (facts.get("hostname") if isinstance(facts, dict) else None) or "(unnamed host)"
    gpus, nodes = _read_facts(facts, host)
    exclude = opts["exclude_gpus"]
    warnings = []
    status = []  # per GPU (PCI order): its NUMA node, EXCLUDED, or None (unknown)
    placeable = []
    for pos, gpu in enumerate(gpus):
        if exclude and (gpu["id"] in exclude or gpu.get("pci_bus_id") in exclude or gpu.get("uuid") in exclude):
            status.append(_EXCLUDED)
        elif gpu.get("numa_node") is None:
            status.append(None)
            warnings.append("GPU %s (index %s) has no known NUMA node; left unused" % (gpu["id"], gpu.get("index")))
        else:
            status.append(int(gpu["numa_node"]))
            placeable.append(pos)
    links = facts.get("links") or {}
    ids = [gpus[pos]["id"] for pos in placeable]
    raw = []
    empty = {}
    for a in ids:
        raw.append(tuple(map((links.get(a) or empty).get, ids)))
    if sum(r.count(None) for r in raw) > len(ids):
        missing = [(ids[i], ids[j]) for i in range(len(ids)) for j in range(i + 1, len(ids))
                   if raw[i][j] is None and raw[j][i] is None]
        if missing:
            warnings.append(
                "%d GPU pair(s) have no link class in the facts (first: %s - %s); ranked below SYS"
                % (len(missing), missing[0][0], missing[0][1])
            )
    key = (
        opts["tp_size"], opts["pp_size"], opts["allow_span"], opts["reserved_cpus_per_socket"],
        opts["max_instances_per_host"], tuple(status), tuple(raw), _host_shape(facts, nodes, status),
    )
    template = _PLAN_CACHE.get(key)
    if template is None:
        template = _build_template(facts, host, opts, gpus, nodes, status, placeable, raw)
        if len(_PLAN_CACHE) >= _CACHE_LIMIT:
            _PLAN_CACHE.clear()
        _PLAN_CACHE[key] = template
    if fleet is not None:
        fleet = fleet(len(template["groups"]), host)
    return _instantiate(template, host, gpus, warnings, fleet)


_EXCLUDED = "excluded"


def _host_shape(facts, nodes, status):
    """Everything besides GPUs and links that the plan depends on (CPUs, sockets, SMT)."""
    node_rows = tuple(
        (n, e.get("cpus"), e.get("socket")) for n, e in sorted(nodes.items())
    )
    sockets = tuple((s.get("id"), tuple(s.get("numa_nodes") or ())) for s in facts.get("sockets") or ())
    smt = tuple(map(tuple, facts.get("smt_siblings") or ()))
    extra = None
    if any(not e.get("cpus") for e in nodes.values()):
        # nearest-node fallback reads distances
        extra = tuple((n, tuple(sorted((str(k), v) for k, v in (e.get("distances") or {}).items())))
                      for n, e in sorted(nodes.items()))
    if any(isinstance(s, int) and s not in nodes for s in status):
        # nodes missing from numa_nodes fall back to their GPUs' local_cpus
        extra = (extra, tuple((g.get("numa_node"), g.get("local_cpus")) for g in facts["gpus"]))
    return node_rows, sockets, smt, extra


def _text(value):
    # plain str out, whatever str subclass came in (templating tags values)
    if value.__class__ is str or value is None:
        return value
    return str(value)


def _ref(gpu):
    """A GPU as plans name it, in plain types."""
    gid = gpu["id"]
    bus = gpu.get("pci_bus_id")
    index = gpu.get("index")
    uuid = gpu.get("uuid")
    name = gpu.get("name")
    if gid.__class__ is not str:
        gid = str(gid)
    if bus is not None and bus.__class__ is not str:
        bus = str(bus)
    if index is not None and index.__class__ is not int:
        index = int(index)
    if uuid is not None and uuid.__class__ is not str:
        uuid = str(uuid)
    if name is not None and name.__class__ is not str:
        name = str(name)
    return {"id": gid, "pci_bus_id": bus, "index": index, "uuid": uuid, "name": name}


def _instantiate(template, host, gpus, warnings, fleet=None):
    """The plan of one host from its template; with fleet=(tp, pp, slots, range_len) the
    groups are built directly as fleet instances (name, ordinal, ports)."""
    out_groups = []
    host = _text(host)
    for ordinal, (stages, (nodes, sockets, cpus, shared, whole, policy, worst, reason)) in enumerate(template["groups"]):
        stage_out = []
        members = []
        for positions, (s_nodes, s_socket, s_sockets, s_worst) in stages:
            refs = [_ref(gpus[p]) for p in positions]
            stage_out.append(
                {
                    "gpus": [r["id"] for r in refs],
                    "gpu_indices": [r["index"] for r in refs],
                    "numa_nodes": list(s_nodes),
                    "socket": s_socket,
                    "sockets": list(s_sockets),
                    "worst_link": s_worst,
                }
            )
            members.extend(refs)
        group = {
            "gpus": members,
            "gpu_indices": [r["index"] for r in members],
            "stages": stage_out,
            "numa_nodes": list(nodes),
            "sockets": list(sockets),
            "cpus": cpus,
            "cpus_shared_node": shared,
            "cpus_whole_nodes": whole,
            "memory_policy": policy,
            # How the unit binds (docs/plan.md): by node only when the
            # instance owns its nodes' CPUs outright.
            "binding": {"cpus": cpus, "mems": list(nodes), "policy": policy,
                        "by_node": bool(whole and not shared)},
            "worst_link": worst,
            "reason": reason,
        }
        if fleet is not None:
            # A fleet instance: the group plus its identity and ports.
            tp, pp, slots, last = fleet
            name, port, dist = slots[ordinal]
            group.update(host=host, name=name, ordinal=ordinal, tp_size=tp, pp_size=pp,
                         port=port, dist_port=dist, dist_port_range=[dist, dist + last])
        out_groups.append(group)
    unused = []
    for p, why in template["unused"]:
        ref = _ref(gpus[p])
        unused.append({"id": ref["id"], "index": ref["index"], "reason": why})
    return {
        "host": host,
        "groups": out_groups,
        "unused": unused,
        "warnings": warnings + template["notes"],
    }


def _build_template(facts, host, opts, gpus, nodes, status, placeable_pos, raw):
    """The plan of a host by GPU position, free of identities (shared by identical hosts)."""
    tp = opts["tp_size"]
    pp = opts["pp_size"]
    node_socket = _node_sockets(facts, nodes)
    unused = []
    for pos, state in enumerate(status):
        if state is _EXCLUDED:
            unused.append((pos, "excluded by exclude_gpus"))
        elif state is None:
            unused.append((pos, "NUMA node unknown (numa_node is null): cannot be placed socket-locally"))
    placeable = [gpus[pos] for pos in placeable_pos]

    # Labels: a node without a known socket is its own socket (rule 7).
    node_of = [status[pos] for pos in placeable_pos]
    socket_of = [node_socket[n] if node_socket.get(n) is not None else ("node", n) for n in node_of]
    n = len(placeable)
    score = [[0] * n for _row in range(n)]
    link_name = {}
    for i in range(n):
        for j in range(i + 1, n):
            link = raw[i][j] if raw[i][j] is not None else raw[j][i]
            if link is None:
                s = UNKNOWN_LINK_SCORE
            else:
                try:
                    s = _score(link)
                except ValueError:
                    raise PlacementError(
                        "host %s: unknown link class %r between GPUs %s and %s"
                        % (host, link, placeable[i]["id"], placeable[j]["id"])
                    )
                link_name[(i, j)] = _text(link)
            score[i][j] = score[j][i] = s

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
                % (host, len(gpus), "; ".join("%s: %s" % (gpus[p]["id"], why) for p, why in unused))
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
    notes = []
    if not result.get("exhaustive", True):
        notes.append(
            "too many distinct GPUs on one socket for the exact search; groups were formed "
            "node by node in PCI order and their links are not optimised"
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
    for i, why in _unused_reasons(n, used, result, tp, pp, opts, span, socket_of, node_of):
        unused.append((placeable_pos[i], why))
    unused.sort()

    cpu_plan = _assign_cpus(facts, nodes, node_socket, instances, node_of, opts["reserved_cpus_per_socket"], host, notes)

    out_groups = []
    for idx, stages in enumerate(instances):
        stage_entries = []
        members = []
        for stage in stages:
            s_nodes = tuple(sorted(set(node_of[g] for g in stage)))
            labels = set(socket_of[g] for g in stage)
            s_sockets = tuple(sorted(x for x in labels if not isinstance(x, tuple)))
            worst = _worst_link(stage, score, link_name)
            s_socket = s_sockets[0] if len(labels) == 1 and s_sockets else None
            stage_entries.append((tuple(placeable_pos[g] for g in stage), (s_nodes, s_socket, s_sockets, worst)))
            members.extend(stage)
        i_nodes = tuple(sorted(set(node_of[g] for g in members)))
        i_sockets = tuple(sorted(set(socket_of[g] for g in members if not isinstance(socket_of[g], tuple))))
        interleave = any(len(st[1][0]) > 1 for st in stage_entries)
        worst_stage = stage_entries[min(range(len(stages)), key=lambda k: _group_worst(stages[k], score))]
        cpus, shared, whole = cpu_plan[idx]
        out_groups.append(
            (
                stage_entries,
                (
                    i_nodes,
                    i_sockets,
                    cpus,
                    shared,
                    whole,
                    "interleave" if interleave else "bind",
                    worst_stage[1][3],
                    _group_reason(stage_entries, span, interleave),
                ),
            )
        )
    return {"groups": out_groups, "unused": unused, "notes": notes}


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
                name = link_name.get((min(a, b), max(a, b)))
    return name


def _group_reason(stage_entries, span, interleave):
    parts = []
    for positions, (s_nodes, _socket, s_sockets, worst) in stage_entries:
        text = "%d GPU%s on %s" % (len(positions), "" if len(positions) == 1 else "s", _where(s_nodes, s_sockets))
        if worst:
            text += ", worst link %s" % worst
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


def _unused_reasons(n, used, result, tp, pp, opts, span, socket_of, node_of):
    out = []
    cap = opts["max_instances_per_host"]
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
    """Return [(cpulist, cpus_shared_node, cpus_whole_nodes)] per instance (rule 5)."""
    inst_nodes = []
    for stages in instances:
        weights = {}
        for stage in stages:
            for g in stage:
                weights[node_of[g]] = weights.get(node_of[g], 0) + 1
        inst_nodes.append(tuple(sorted(weights.items())))
    smt = facts.get("smt_siblings") or []
    # whole host plans are memoised by _plan_host, so this runs once per distinct host
    hit = _compute_cpus(facts, nodes, node_socket, inst_nodes, smt, reserved)
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
    parts = [set() for _inst in inst_nodes]
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
    plan = []
    for i, part in enumerate(parts):
        # Whole nodes: binding by node (numactl --cpunodebind) means the same
        # CPUs; otherwise (reserved cores, shared or borrowed nodes) bind by CPU list.
        node_set = set()
        for n, _w in inst_nodes[i]:
            node_set.update(node_cpus.get(n) or ())
        plan.append((_cpulist.format_cpulist(part), shared[i], bool(part) and part == node_set))
    return plan, notes, None


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
    # The plan is a tree of small new containers and holds no cycles; cyclic
    # garbage collections while building it would only walk the (large)
    # inventory again and again, so they wait until the plan is done.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _plan_fleet(fleet, options)
    finally:
        if was_enabled:
            gc.enable()


def _plan_fleet(fleet, options):
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
    tp, pp = opts["tp_size"], opts["pp_size"]
    last = opts["dist_port_stride"] - 1

    def fleet_slots(count, host):
        # ports depend only on the per-host ordinal; checked once per instance count
        if count not in checked:
            _check_ports(opts, count, host)
            checked.add(count)
        while len(slots) < count:
            ordinal = len(slots)
            dist = opts["dist_port_base"] + ordinal * opts["dist_port_stride"]
            slots.append(("%s%d" % (opts["name_prefix"], ordinal), opts["base_port"] + ordinal * opts["port_stride"], dist))
        return tp, pp, slots, last

    for host in names:
        facts = host_facts(host, hosts[host])
        if isinstance(exclude, dict):
            host_opts["exclude_gpus"] = exclude.get(host, frozenset())
        plan = _plan_host(facts, host, host_opts, fleet_slots)
        gpu_total += len(facts["gpus"])
        instances.extend(plan["groups"])
        host = plan["host"]
        for entry in plan["unused"]:
            unused.append({"host": host, "id": entry["id"], "index": entry["index"], "reason": entry["reason"]})
        if plan["warnings"]:
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
