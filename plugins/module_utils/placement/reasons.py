# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The words of a plan: why a group sits where it does, why a GPU is left unused."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import fmt_ints


def where(nodes, sockets):
    """"NUMA node 0 (socket 0)", "NUMA nodes 0,1 (sockets 0,1)", "NUMA node 3 (socket unknown)"."""
    node_word = "NUMA node %s" % fmt_ints(nodes) if len(nodes) == 1 else "NUMA nodes %s" % fmt_ints(nodes)
    if not sockets:
        return "%s (socket unknown)" % node_word
    sock_word = "socket %s" % fmt_ints(sockets) if len(sockets) == 1 else "sockets %s" % fmt_ints(sockets)
    return "%s (%s)" % (node_word, sock_word)


def socket_word(node, key):
    """"socket 1", or "NUMA node 3 (socket unknown)" for a node whose socket the facts do not know (it stands as
    its own socket)."""
    return "socket %s" % key.socket if key.known else where([node], [])


def group_reason(stages, span, interleave):
    """The reason of a group from its StageTemplates."""
    parts = []
    for st in stages:
        count = len(st.positions)
        text = "%d GPU%s on %s" % (count, "" if count == 1 else "s", where(st.numa_nodes, st.sockets))
        if st.worst_link:
            text += ", worst link %s" % st.worst_link
        parts.append(text)
    if len(parts) == 1:
        reason = parts[0]
    else:
        reason = "%d pipeline stages: %s" % (len(parts), "; ".join("stage %d: %s" % (i, p) for i, p in enumerate(parts)))
    if span:
        reason += "; tp_size exceeds the GPUs of every socket and gpufleet_allow_span is true, so the group spans sockets"
    elif interleave:
        reason += "; spanning NUMA nodes of one socket gives more groups than staying inside one node"
    if interleave:
        reason += "; memory interleaved over its NUMA nodes"
    return reason


def unused_reasons(n, used, result, opts, span, socket_of, node_of):
    """(placeable index, reason) of each placeable GPU the search left out (result: search.SearchResult)."""
    out = []
    tp, pp, cap = opts.tp_size, opts.pp_size, opts.max_instances_per_host
    max_groups = result.max_groups(tp)
    capped = cap is not None and max_groups // pp > cap
    for pos in range(n):
        if pos in used:
            continue
        key = socket_of[pos]
        place = where([node_of[pos]], [key.socket] if key.known else [])
        domain = next(d for d in result.domains if pos in d)
        if len(domain) < tp:
            why = "only %d placeable GPU%s on %s, fewer than tp_size %d%s" % (
                len(domain), "" if len(domain) == 1 else "s", socket_word(node_of[pos], key), tp,
                " (this GPU is on NUMA node %s)" % node_of[pos] if key.known else "")
        elif capped:
            why = "max_instances_per_host (%d) reached" % cap
        elif pp > 1 and max_groups % pp:
            why = "pp_size %d: the %d possible group(s) leave a group without a full pipeline" % (pp, max_groups)
        else:
            why = "no complete group of %d GPUs left on its %s (%s)" % (tp, "host" if span else "socket", place)
        out.append((pos, why))
    return out
