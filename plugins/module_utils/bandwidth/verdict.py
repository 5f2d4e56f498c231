# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the figures of one host say (docs/bandwidth.md, "The verdict").

verdict(bandwidth) compares, for memory and for each GPU's host-to-device
(H2D) and device-to-host (D2H) copies, the best local figure with the
worst remote one:

- memory: local is a CPU node reading its own memory (C == M), remote a
  CPU node reading another node's memory (C != M);
- a GPU: local is a copy from the GPU's own NUMA node (its `gpu_node`; the
  best node when unknown), remote a copy from any other node.

The ratio best local / worst remote is what binding is worth there. At or
above NOISE it is "binding worth 3.2x here"; below, "no measurable effect"
(repeated runs of one pair differ by a few percent; NOISE leaves room for
that and for a busy host). One NUMA node: "one NUMA node: nothing to
compare". Nothing measured: "not measured: " and why. Pure functions over
a record checks.check_bandwidth() accepted; controller only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import printable

NOISE = 1.15


def _ratio(what, local, remote, subject):
    """One comparison: {what, subject, local, remote, ratio}; None without both sides."""
    if not local or not remote:
        return None
    (local_gbps, local_node), (remote_gbps, remote_node) = max(local), min(remote)
    return {"what": what, "subject": subject, "local_gbps": local_gbps, "local_node": local_node,
            "remote_gbps": remote_gbps, "remote_node": remote_node, "ratio": round(local_gbps / remote_gbps, 2)}


def memory_ratio(memory):
    local = [(p["gbps"], p["cpu_node"]) for p in memory["pairs"] if p["cpu_node"] == p["memory_node"]]
    remote = [(p["gbps"], "%d->%d" % (p["cpu_node"], p["memory_node"])) for p in memory["pairs"]
              if p["cpu_node"] != p["memory_node"]]
    return _ratio("memory", local, remote, "memory")


def gpu_ratios(gpus):
    """Per GPU and direction: [{what: H2D|D2H, subject: the GPU, ...}]."""
    by_gpu = {}
    for copy in gpus["copies"]:
        by_gpu.setdefault(copy["gpu"], []).append(copy)
    out = []
    for gpu in sorted(by_gpu, key=lambda g: (by_gpu[g][0].get("index") is None, by_gpu[g][0].get("index"), g)):
        copies = by_gpu[gpu]
        home = copies[0].get("gpu_node")
        subject = "GPU %s (%s)" % (copies[0]["index"], gpu) if copies[0].get("index") is not None else "GPU %s" % gpu
        for what, field in (("H2D", "h2d_gbps"), ("D2H", "d2h_gbps")):
            figures = [(c[field], c["node"]) for c in copies]
            if home is not None and any(node == home for dummy, node in figures):
                local = [f for f in figures if f[1] == home]
                remote = [f for f in figures if f[1] != home]
            else:
                best = max(figures)
                local, remote = [best], [f for f in figures if f[1] != best[1]]
            found = _ratio(what, local, remote, subject)
            if found:
                out.append(found)
    return out


def _nodes_measured(bandwidth):
    memory = bandwidth["memory"]["pairs"]
    return (set(p["cpu_node"] for p in memory) | set(p["memory_node"] for p in memory)
            | set(c["node"] for c in bandwidth["gpus"]["copies"]))


def _why_not(bandwidth):
    notes = [n for part in ("memory", "gpus") for n in bandwidth[part]["notes"] if "not measured" in n]
    if not notes:
        return "not measured"
    return notes[0] if notes[0].startswith("not measured") else "not measured: " + notes[0]


def _exact(ratio):
    return ratio["local_gbps"] / ratio["remote_gbps"]


def times(value):
    """A ratio as the verdict writes it: 3.2x, 1.15x (two decimals below 2)."""
    return ("%.2fx" if value < 2 else "%.1fx") % value


def describe(ratio, with_ratio=True):
    """'H2D GPU 0 (0000:18:00.0): 12.2 GB/s from node 0, 3.8 GB/s from node 1 (3.2x)'; without the
    ratio where the sentence already says it."""
    ratio_text = " (%s)" % times(_exact(ratio)) if with_ratio else ""
    if ratio["what"] == "memory":
        return "memory: %.1f GB/s on node %s, %.1f GB/s across %s%s" % (
            ratio["local_gbps"], ratio["local_node"], ratio["remote_gbps"], ratio["remote_node"], ratio_text)
    return "%s %s: %.1f GB/s from node %s, %.1f GB/s from node %s%s" % (
        ratio["what"], ratio["subject"], ratio["local_gbps"], ratio["local_node"], ratio["remote_gbps"],
        ratio["remote_node"], ratio_text)


def verdict(bandwidth):
    """{text, worth (the largest ratio, or None), effect (True/False/None), ratios}."""
    ratios = [r for r in [memory_ratio(bandwidth["memory"])] + gpu_ratios(bandwidth["gpus"]) if r]
    if ratios:
        top = max(ratios, key=_exact)
        if _exact(top) >= NOISE:
            text = "binding worth %s here (%s)" % (times(_exact(top)), describe(top, with_ratio=False))
            return {"text": text, "worth": top["ratio"], "effect": True, "ratios": ratios}
        text = "no measurable effect (local within %d%% of remote: largest %s)" % (
            round((NOISE - 1) * 100), describe(top))
        return {"text": text, "worth": top["ratio"], "effect": False, "ratios": ratios}
    if len(_nodes_measured(bandwidth)) == 1:
        return {"text": "one NUMA node: nothing to compare", "worth": None, "effect": None, "ratios": []}
    return {"text": _why_not(bandwidth), "worth": None, "effect": None, "ratios": []}


def lines(bandwidth, host):
    """The console's lines: the verdict, each figure, each note; control
    characters of the host's notes written as \\xNN (checks.printable)."""
    out = ["%s: %s" % (host, verdict(bandwidth)["text"])]
    memory = bandwidth["memory"]
    for pair in memory["pairs"]:
        out.append("  memory (%s) CPU node %d, memory node %d: %.1f GB/s" % (
            memory["method"], pair["cpu_node"], pair["memory_node"], pair["gbps"]))
    for copy in bandwidth["gpus"]["copies"]:
        out.append("  GPU %s %s from node %d: H2D %.1f GB/s, D2H %.1f GB/s" % (
            copy.get("index"), copy["gpu"], copy["node"], copy["h2d_gbps"], copy["d2h_gbps"]))
    out.extend("  note: %s" % n for part in ("memory", "gpus") for n in bandwidth[part]["notes"])
    return [printable(line) for line in out]
