# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The kept plan's device fields, checked (docs/plan.md, "CPU instances").

Every instance's `device` (nvidia, amd or cpu; absent in a plan from
before device classes: nvidia), and a CPU instance's shape: no GPUs, one
pipeline stage, one host, and binding.ranks holding one rank per node of
binding.mems in node order, each with CPUs of binding.cpus (the unit binds
each rank's threads to them). Errors are ValueError("FIELD: RULE (got VALUE)").
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract
from ansible_collections.gpufleet.numa.plugins.module_utils.common import record_values

# A NUMA node's memory in MB: far above any machine (1 EiB), a bound on damage.
MAX_MEMORY_MB = 1 << 40


def device(where, entry):
    """The entry's device class (contract.device), checked."""
    if "device" in entry:
        checks.choice(where + ".device", entry["device"], contract.DEVICES)
    return contract.device(entry)


def check_ranks(where, entry, device_class, tp_size, pp_size, multinode):
    """A CPU instance's shape (its ranks' nodes, in order), or [] for a GPU instance (which has no ranks)."""
    binding = record_values.mapping(where + ".binding", entry["binding"])
    if device_class != "cpu":
        if "ranks" in binding:
            checks.fail(where + ".binding.ranks", "is a CPU instance's field (this instance's device is %s)"
                        % device_class, binding["ranks"])
        return []
    if pp_size != 1:
        checks.fail(where + ".pp_size", "must be 1 on a CPU instance (device cpu)", pp_size)
    if multinode is not None:
        checks.fail(where + ".multinode", "must be absent on a CPU instance (device cpu never spans hosts)", multinode)
    if entry["gpus"]:
        checks.fail(where + ".gpus", "must be [] on a CPU instance (device cpu)", entry["gpus"])
    if binding.get("mode", "process") != "process" or binding.get("workers"):
        checks.fail(where + ".binding.mode", "must be process, without workers, on a CPU instance", binding.get("mode"))
    mems = record_values.nodes(where + ".binding.mems", binding["mems"], minimum=1)
    cpus = record_values.cpus(where + ".binding.cpus", binding["cpus"])
    ranks = record_values.a_list(where + ".binding.ranks", binding.get("ranks"), record_values.MAX_NUMA_NODE + 1, minimum=1)
    if len(ranks) != tp_size:
        checks.fail(where + ".binding.ranks", "must hold tp_size (%d) ranks" % tp_size, "%d ranks" % len(ranks))
    nodes, taken = [], set()
    for i, rank in enumerate(ranks):
        at = "%s.binding.ranks[%d]" % (where, i)
        rank = record_values.mapping(at, rank)
        unknown = sorted(str(k) for k in rank if k not in contract.RANK_FIELDS)
        if unknown or "node" not in rank or "cpus" not in rank:
            checks.fail(at, "must be a mapping {%s}" % ", ".join(contract.RANK_FIELDS), sorted(str(k) for k in rank))
        node = record_values.integer(at + ".node", rank["node"], 0, record_values.MAX_NUMA_NODE)
        if node not in mems:
            checks.fail(at + ".node", "must be a node of binding.mems (%s)" % ",".join(map(str, mems)), node)
        mine = record_values.cpus(at + ".cpus", rank["cpus"])
        if not mine <= cpus:
            checks.fail(at + ".cpus", "must be CPUs of binding.cpus (%s)" % binding["cpus"], format_cpulist(mine - cpus))
        if mine & taken:
            checks.fail(at + ".cpus", "must not share CPUs with another rank", format_cpulist(mine & taken))
        taken |= mine
        if rank.get("memory_mb") is not None:
            record_values.integer(at + ".memory_mb", rank["memory_mb"], 1, MAX_MEMORY_MB)  # 0: the planner holds no rank there
        nodes.append(node)
    if "numa_nodes" in entry and entry["numa_nodes"] != mems:
        checks.fail(where + ".numa_nodes", "must be binding.mems %s on a CPU instance" % ",".join(map(str, mems)),
                    entry["numa_nodes"])
    if nodes != mems:
        checks.fail(where + ".binding.ranks", "must hold one rank per node of binding.mems %s, in node order"
                    % ",".join(map(str, mems)), nodes)
    return nodes
