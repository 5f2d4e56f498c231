# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The placement search against an exhaustive reference.

The reference below tries every set of disjoint GPU groups (fine for small
hosts) and scores each with the documented objective; the engine must find
the same best objective on the recorded fixtures, on hand-built real hosts
and on 1,000 seeded random topologies; on those, among equally good plans,
the one the documented tie rule picks (tie_rule_choice).
"""

from __future__ import annotations

import glob
import itertools
import math
import os
import random

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import link_score
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import HOSTS, make_facts

FIXTURES = os.path.join(fixture_paths.FIXTURES, "machines")
NO_LINK = 1000  # a one-GPU group has no internal link


# ---------------------------------------------------------------- reference


def _sockets_of(facts):
    node_socket = {}
    for sock in facts.get("sockets") or []:
        for n in sock["numa_nodes"]:
            node_socket[n] = sock["id"]
    for node in facts.get("numa_nodes") or []:
        if node.get("socket") is not None:
            node_socket[node["id"]] = node["socket"]
    return node_socket


def homes(facts):
    """Where GPUs the facts put on a memory-only node (cpus "") are placed (docs/placement.md rule 7):
    the nearest node with CPUs - of the same socket when known - by SLIT distance; without distances
    the lowest of that socket, or the host's only node with CPUs; else nowhere (None)."""
    node_socket = _sockets_of(facts)
    with_cpus = [n["id"] for n in facts.get("numa_nodes") or [] if n.get("cpus")]
    out = {}
    for node in facts.get("numa_nodes") or []:
        if node.get("cpus") != "":
            continue
        sock = node_socket.get(node["id"])
        candidates = [n for n in with_cpus if sock is None or node_socket.get(n) == sock]
        distance = dict((int(k), v) for k, v in (node.get("distances") or {}).items())
        if distance and all(c in distance for c in candidates):
            out[node["id"]] = min(candidates, key=lambda c: (distance[c], c)) if candidates else None
        elif sock is not None or len(candidates) == 1:
            out[node["id"]] = min(candidates) if candidates else None
        else:
            out[node["id"]] = None
    return out


def home_of(facts, gpu, home=None):
    node = gpu["numa_node"]
    home = homes(facts) if home is None else home
    return home.get(node, node) if node != -1 else None


def _host_view(facts, exclude):
    """Placeable GPUs (PCI order) with node, socket label and pair scores."""
    gpus = sorted(facts["gpus"], key=lambda g: (g.get("pci_bus_id") is None, g.get("pci_bus_id") or "", g.get("index") or 0))
    node_socket = _sockets_of(facts)
    home = homes(facts)
    usable = [
        g for g in gpus
        if home_of(facts, g, home) is not None and not ({g["id"], g.get("pci_bus_id"), g.get("uuid")} & set(exclude))
    ]
    nodes = [home_of(facts, g, home) for g in usable]
    sockets = [node_socket.get(n, ("own", n)) if node_socket.get(n) is not None else ("own", n) for n in nodes]

    def pair(a, b):
        cls = (facts["links"].get(usable[a]["id"]) or {}).get(usable[b]["id"])
        return -1 if cls is None else link_score(cls)

    return usable, nodes, sockets, pair


def group_stats(group, nodes, sockets, pair):
    """(inside one node, extra sockets, extra nodes, worst link, pair sum) of one group."""
    g_nodes = set(nodes[g] for g in group)
    g_sockets = set(sockets[g] for g in group)
    scores = [pair(a, b) for a, b in itertools.combinations(group, 2)]
    return (int(len(g_nodes) == 1), len(g_sockets) - 1, len(g_nodes) - 1, min(scores) if scores else NO_LINK, sum(scores))


def objective(stats, pp, cap):
    """The documented objective of a set of groups, from their group_stats."""
    instances = len(stats) // pp
    if cap is not None:
        instances = min(instances, cap)
    worsts = [s[3] for s in stats]
    return (
        instances,
        sum(s[0] for s in stats),
        -sum(s[1] for s in stats),
        -sum(s[2] for s in stats),
        min(worsts) if worsts else 0,
        sum(worsts),
        sum(s[4] for s in stats),
    )


def reference_best(facts, tp, pp=1, allow_span=False, cap=None, exclude=()):
    """Best objective over every set of disjoint allowed groups; None when no instance fits."""
    found = reference_optima(facts, tp, pp, allow_span, cap, exclude)
    return None if found is None else found[0]


def reference_optima(facts, tp, pp=1, allow_span=False, cap=None, exclude=()):
    """(best objective, every set of groups (sorted position tuples) that reaches it); None when no instance fits."""
    usable, nodes, sockets, pair = _host_view(facts, exclude)
    n = len(usable)
    per_socket = [sockets.count(s) for s in set(sockets)]
    span = bool(per_socket) and tp > max(per_socket)
    if not per_socket or (span and (not allow_span or tp > n)):
        return None
    candidates = [c for c in itertools.combinations(range(n), tp) if span or len(set(sockets[g] for g in c)) == 1]
    stats = [group_stats(c, nodes, sockets, pair) for c in candidates]
    masks = [sum(1 << g for g in c) for c in candidates]
    best = None
    sets = []

    def walk(start, chosen, taken):
        nonlocal best, sets
        count = len(chosen)
        instances = count // pp if cap is None else min(count // pp, cap)
        if count == instances * pp:
            score = objective([stats[i] for i in chosen], pp, cap)
            if best is None or score > best:
                best, sets = score, [chosen]
            elif score == best:
                sets.append(chosen)
        for i in range(start, len(candidates)):
            if not taken & masks[i]:
                walk(i + 1, chosen + [i], taken | masks[i])

    walk(0, [], 0)
    if best[0] == 0:
        return None
    return best, [sorted(candidates[i] for i in chosen) for chosen in sets]


def tie_rule_choice(facts, tp, optima, allow_span, exclude):
    """The set of groups the documented tie rule (docs/placement.md, "Ties") picks among the optima.

    Domains (sockets; the host when groups span) by lowest GPU: the last
    domain gets as few groups as it can, then the one before, and so on.
    Within a domain, twins (same node and socket, the same link to every
    other GPU) form classes by lowest GPU, and a set of groups is read as
    the choices a walk from the lowest GPUs makes: at the lowest class
    with GPUs left, the group (as counts per class) that takes the most
    GPUs of the lowest classes, or, when no group takes one, that GPU left
    unused. The earliest walk wins (a group before "unused"); each group
    then takes the lowest GPUs of its classes, groups in walk order.
    """
    usable, nodes, sockets, pair = _host_view(facts, exclude)
    n = len(usable)
    by_socket = {}
    for g in range(n):
        by_socket.setdefault(sockets[g], []).append(g)
    span = tp > max(len(m) for m in by_socket.values())
    domains = [list(range(n))] if span else sorted(by_socket.values())
    domain_of = dict((g, d) for d, members in enumerate(domains) for g in members)

    def twins(a, b):
        return nodes[a] == nodes[b] and sockets[a] == sockets[b] and all(
            pair(a, x) == pair(b, x) for x in range(n) if x not in (a, b))

    classes = []  # per domain: [[positions], ...] by lowest
    for members in domains:
        mine = []
        for g in members:
            home = next((c for c in mine if twins(c[0], g)), None)
            if home is None:
                mine.append([g])
            else:
                home.append(g)
        classes.append(mine)
    class_of = dict((g, (d, k)) for d, mine in enumerate(classes) for k, c in enumerate(mine) for g in c)

    def walk(d, groups):
        """The choices of domain d's walk: ((0, -counts...) per group, (1,) per unused GPU), in order."""
        width = len(classes[d])
        left = [len(c) for c in classes[d]]
        pending = [tuple(sum(1 for g in grp if class_of[g][1] == k) for k in range(width)) for grp in groups]
        steps = []
        while pending:
            low = next(k for k in range(width) if left[k])
            taking = [v for v in pending if v[low]]
            if taking:
                vec = max(taking)
                pending.remove(vec)
                steps.append((0,) + tuple(-x for x in vec))
                left = [a - b for a, b in zip(left, vec)]
            else:
                steps.append((1,))
                left[low] -= 1
        return steps

    def key(groups):
        per_domain = [[g for g in groups if domain_of[g[0]] == d] for d in range(len(domains))]
        return ([len(p) for p in per_domain][::-1], [walk(d, p) for d, p in enumerate(per_domain)])

    chosen = min(optima, key=key)
    out = []
    for d, steps in enumerate(key(chosen)[1]):
        queues = [list(c) for c in classes[d]]
        for step in steps:
            if step[0] == 0:
                group = []
                for k, take in enumerate(-x for x in step[1:]):
                    group.extend(queues[k][:take])
                    del queues[k][:take]
                out.append(tuple(sorted(group)))
    return sorted(out)


def engine_groups(plan, facts, exclude):
    """The plan's groups (every stage) as sorted position tuples of _host_view, sorted."""
    usable = _host_view(facts, exclude)[0]
    position = dict((g["id"], i) for i, g in enumerate(usable))
    return sorted(tuple(sorted(position[gid] for gid in stage["gpus"])) for grp in plan["groups"]
                  for stage in grp["stages"])


def engine_objective(plan, facts, pp, cap, exclude):
    usable, nodes, sockets, pair = _host_view(facts, exclude)
    position = dict((g["id"], i) for i, g in enumerate(usable))
    groups = [tuple(position[gid] for gid in stage["gpus"]) for grp in plan["groups"] for stage in grp["stages"]]
    return objective([group_stats(g, nodes, sockets, pair) for g in groups], pp, cap)


def check_plan_shape(plan, facts, tp, pp, allow_span):
    """Invariants every plan keeps, whatever the search found."""
    usable = {}
    node_socket = _sockets_of(facts)
    for g in facts["gpus"]:
        usable[g["id"]] = g
    seen = set()
    for grp in plan["groups"]:
        assert len(grp["stages"]) == pp
        for stage in grp["stages"]:
            assert len(stage["gpus"]) == tp
            assert not seen & set(stage["gpus"])
            seen |= set(stage["gpus"])
            socks = set(node_socket.get(home_of(facts, usable[i]), ("own", home_of(facts, usable[i])))
                        for i in stage["gpus"])
            if len(socks) > 1:
                assert allow_span
                assert grp["memory_policy"] == "interleave"
        assert [g["id"] for g in grp["gpus"]] == [i for st in grp["stages"] for i in st["gpus"]]
    unused = set(u["id"] for u in plan["unused"])
    assert not unused & seen
    assert unused | seen == set(usable)


# ---------------------------------------------------------------- hand-built real hosts


BRUTE_FORCE_LIMIT = 100000


@pytest.mark.parametrize("name", sorted(HOSTS))
@pytest.mark.parametrize("tp, pp", [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2), (4, 2)])
def test_plan_host_matches_reference_on_real_hosts(name, tp, pp):
    facts = HOSTS[name]()
    for allow_span in (False, True):
        if _brute_force_size(facts, tp, allow_span, ()) > BRUTE_FORCE_LIMIT:
            # DGX-2 in pairs: 764 x 764 pairings per socket is too many to try;
            # every NV6 pair is node-local, so the best is plain to write down.
            assert name == "dgx2_like" and tp == 2
            groups = 16 // tp
            expected = (groups // pp, groups, 0, 0, link_score("NV6"), groups * link_score("NV6"), groups * link_score("NV6"))
            optima = None
        else:
            optima = reference_optima(facts, tp, pp, allow_span)
            expected = None if optima is None else optima[0]
        if expected is None:
            with pytest.raises(placement.PlacementError, match=facts["hostname"]):
                placement.plan_host(facts, tp_size=tp, pp_size=pp, allow_span=allow_span)
            continue
        plan = placement.plan_host(facts, tp_size=tp, pp_size=pp, allow_span=allow_span)
        check_plan_shape(plan, facts, tp, pp, allow_span)
        assert engine_objective(plan, facts, pp, None, ()) == expected
        if optima is not None:
            # the groups themselves: among equally good plans, the one the tie rule picks
            assert engine_groups(plan, facts, ()) == tie_rule_choice(facts, tp, optima[1], allow_span, ()), allow_span


# ---------------------------------------------------------------- recorded fixtures


def _captures():
    return sorted(glob.glob(os.path.join(FIXTURES, "*", "capture.yml")))


def _facts_from_capture(path):
    try:
        from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
    except ImportError:
        pytest.skip("plugins/module_utils/topology/capture.py (facts_from_capture) is not in this checkout yet")
    if not hasattr(topology, "facts_from_capture"):
        pytest.skip("topology.facts_from_capture is not in this checkout yet")
    return topology.facts_from_capture(path)


@pytest.mark.parametrize(
    "capture", _captures() or [pytest.param(None, marks=pytest.mark.skip(reason="no recorded fixtures in tests/fixtures/machines yet"))],
    ids=lambda p: os.path.basename(os.path.dirname(p)) if p else "none",
)
def test_plan_host_matches_reference_on_recorded_fixtures(capture):
    facts = _facts_from_capture(capture)
    n = len(facts["gpus"])
    for tp in (1, 2, 4, 8):
        for pp in (1, 2):
            if tp * pp > n or (n > 12 and tp < 4):
                continue  # the exhaustive reference would take too long
            for allow_span in (False, True):
                expected = reference_best(facts, tp, pp, allow_span)
                if expected is None:
                    with pytest.raises(placement.PlacementError):
                        placement.plan_host(facts, tp_size=tp, pp_size=pp, allow_span=allow_span)
                    continue
                plan = placement.plan_host(facts, tp_size=tp, pp_size=pp, allow_span=allow_span)
                check_plan_shape(plan, facts, tp, pp, allow_span)
                assert engine_objective(plan, facts, pp, None, ()) == expected, (tp, pp, allow_span)


# ---------------------------------------------------------------- random topologies

LINKS = ["NV18", "NV12", "NV4", "XGMI2", "PIX", "PXB", "PHB", "NODE", "SYS"]
RANDOM_CASES = 1000
MAX_SETS = 5000  # keep each exhaustive search small


def _partial_partitions(m, t):
    """How many sets of disjoint t-groups m GPUs allow (incl. the empty set)."""
    return sum(
        math.factorial(m) // (math.factorial(k) * math.factorial(t) ** k * math.factorial(m - k * t))
        for k in range(m // t + 1)
    )


def random_host(rng, case):
    n_sockets = rng.randint(1, 4)
    per_socket = rng.randint(1, 4)
    smt = rng.random() < 0.5
    known_sockets = rng.random() < 0.8
    nodes = {}
    cpu = 0
    cores = []
    for s in range(n_sockets):
        for k in range(per_socket):
            width = rng.randint(2, 6)
            ids = list(range(cpu, cpu + width))
            cpu += width
            if smt:
                threads = ids + [c + 1000 for c in ids]
                cores.extend([c, c + 1000] for c in ids)
            else:
                threads = ids
            if rng.random() < 0.05:
                threads = []  # a memory-only node
            nodes[s * per_socket + k] = (s, format_cpulist(threads))
    restricted = rng.random() < 0.2  # a container's cpuset, isolcpus: some CPUs of each node unusable
    hide_smt = rng.random() < 0.4  # SMT threads numbered n, n + 1000, but the facts do not say (topo -m only)
    n_gpus = rng.randint(0, 16)
    palette = rng.sample(LINKS, rng.randint(1, 4))
    # unknown NUMA nodes: null, or -1 as sysfs reads it
    gpu_nodes = [rng.choice([None, -1]) if rng.random() < 0.04 else rng.choice(sorted(nodes)) for _gpu in range(n_gpus)]
    table = {}
    for i in range(n_gpus):
        for j in range(i + 1, n_gpus):
            table[(i, j)] = rng.choice(palette)
    facts = make_facts(
        "rand-%d" % case,
        nodes,
        gpu_nodes,
        lambda i, j: table[(min(i, j), max(i, j))],
        smt=cores if smt and not hide_smt else None,
        sockets=known_sockets,
    )
    if restricted:
        for node in facts["numa_nodes"]:
            cpus = parse_cpulist(node["cpus"])
            node["usable_cpus"] = format_cpulist(c for c in cpus if rng.random() < 0.6)
    return facts


def _brute_force_size(facts, tp, allow_span, exclude):
    usable, _nodes, sockets, _pair = _host_view(facts, exclude)
    sizes = [sockets.count(s) for s in set(sockets)]
    if sizes and tp > max(sizes) and allow_span:
        sizes = [len(usable)]
    total = 1
    for m in sizes:
        total *= _partial_partitions(m, tp)
    return total


def _random_cases():
    rng = random.Random(20261130)
    cases = []
    while len(cases) < RANDOM_CASES:
        facts = random_host(rng, len(cases))
        tp = rng.randint(1, 4)
        pp = rng.randint(1, 2)
        allow_span = rng.random() < 0.4
        cap = rng.choice([None, None, None, 1, 2, 3])
        ids = [g["id"] for g in facts["gpus"]]
        exclude = []
        if ids and rng.random() < 0.2:
            victim = rng.choice(facts["gpus"])
            exclude = [victim["uuid"] if rng.random() < 0.5 else victim["pci_bus_id"]]
        if _brute_force_size(facts, tp, allow_span, exclude) > MAX_SETS:
            continue
        cases.append((facts, tp, pp, allow_span, cap, exclude))
    return cases


def test_plan_host_matches_reference_on_random_topologies():
    placeable_max = 0
    planned = 0
    tied = 0
    seen = dict.fromkeys(SEEN, 0)
    for facts, tp, pp, allow_span, cap, exclude in _random_cases():
        placeable_max = max(placeable_max, len(facts["gpus"]))
        optima = reference_optima(facts, tp, pp, allow_span, cap, exclude)
        expected = None if optima is None else optima[0]
        options = dict(tp_size=tp, pp_size=pp, allow_span=allow_span, max_instances_per_host=cap, exclude_gpus=exclude)
        if expected is None:
            with pytest.raises(placement.PlacementError, match=facts["hostname"]):
                placement.plan_host(facts, **options)
            continue
        plan = placement.plan_host(facts, **options)
        planned += 1
        check_plan_shape(plan, facts, tp, pp, allow_span)
        got = engine_objective(plan, facts, pp, cap, exclude)
        assert got == expected, (facts["hostname"], tp, pp, allow_span, cap, exclude)
        # and among equally good plans, the one the documented tie rule picks
        tied += len(optima[1]) > 1
        assert engine_groups(plan, facts, exclude) == tie_rule_choice(facts, tp, optima[1], allow_span, exclude), (
            facts["hostname"], tp, pp, allow_span, cap, exclude)
        _check_cpus(plan, facts)
        for name, words in SEEN.items():
            seen[name] += any(words in w for w in plan["warnings"])
    # the generator must reach the interesting sizes and cases, or this test proves little
    assert placeable_max >= 14
    assert planned >= 500
    assert tied >= 200  # hosts with several equally good plans, where only the tie rule decides
    assert min(seen.values()) >= 20, seen


SEEN = {"memory-only home": "which has no CPUs (memory only)", "restricted": "not usable by services",
        "assumed SMT": "SMT siblings unknown"}


def _usable_cpus(node):
    return set(parse_cpulist(node["cpus"] if node.get("usable_cpus") is None else node["usable_cpus"]))


def reference_smt_pairs(facts):
    """Without SMT information, the sibling pairs (n, n+d) assumed of a node of two equal halves
    (docs/placement.md rule 5): halves of the sorted CPUs, the second the first moved by one d, with a gap
    between them or d half of the host's CPUs."""
    if facts["smt_siblings"]:
        return {}
    every = set()
    for node in facts["numa_nodes"]:
        every |= set(parse_cpulist(node["cpus"]))
    pairs = {}
    for node in facts["numa_nodes"]:
        cpus = parse_cpulist(node["cpus"])
        half = len(cpus) // 2
        if not half or len(cpus) % 2:
            continue
        low, high = cpus[:half], cpus[half:]
        d = high[0] - low[0]
        if low[-1] < high[0] and all(b - a == d for a, b in zip(low, high)) and (
                high[0] > low[-1] + 1 or 2 * d == len(every)):
            pairs.update((a, b) for a, b in zip(low, high))
    return pairs


def _check_cpus(plan, facts):
    node_cpus = dict((n["id"], _usable_cpus(n)) for n in facts["numa_nodes"])
    everywhere = set().union(*node_cpus.values()) if node_cpus else set()
    whole = dict((n["id"], n.get("usable_cpus") in (None, n["cpus"])) for n in facts["numa_nodes"])
    owners = {}
    for grp in plan["groups"]:
        cpus = set(parse_cpulist(grp["cpus"]))
        assert cpus <= everywhere  # never a CPU services may not use
        assert not grp["binding"]["by_node"] or all(whole[n] for n in grp["numa_nodes"])
        assert not set(grp["numa_nodes"]) & set(n for n, home in homes(facts).items())  # never a memory-only node
        allowed = set()
        for n in grp["numa_nodes"]:
            allowed |= node_cpus[n]
        if allowed:
            assert cpus <= allowed
        for c in cpus:
            owners.setdefault(c, []).append(grp)
        # one worker per GPU, in order, on a node of the instance, with the instance's CPUs there
        binding = grp["binding"]
        assert [w["gpu_index"] for w in binding["workers"]] == grp["gpu_indices"]
        for worker in binding["workers"]:
            assert worker["node"] in grp["numa_nodes"]
            assert set(parse_cpulist(worker["cpus"])) <= cpus
        if binding["mode"] == "per_worker":
            assert all(w["cpus"] for w in binding["workers"])
            assert binding["mems"] == grp["stages"][0]["numa_nodes"]
            assert set(parse_cpulist(binding["cpus"])) <= cpus
    overlap_warned = any("overlap" in w for w in plan["warnings"])
    if not overlap_warned:
        assert all(len(v) == 1 for v in owners.values())
        # assumed siblings of a shared node stay with one instance (unless the node has fewer cores than instances)
        split = any("fewer physical cores" in w for w in plan["warnings"])
        for a, b in ({} if split else reference_smt_pairs(facts)).items():
            if a in owners and b in owners:
                assert owners[a] == owners[b], (a, b)
