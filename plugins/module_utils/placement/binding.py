# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""How an instance's unit binds (docs/plan.md, binding): the whole process
tree (mode process), or each GPU worker on its own node (mode per_worker,
vLLM's --numa-bind) with the API server on the first stage's nodes.
"""

from __future__ import annotations

from typing import NamedTuple

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import fmt_ints
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError


class Worker(NamedTuple):
    """One GPU worker of an instance: its GPU's node and the instance's CPUs on it."""

    node: int
    cpus: str


class BindingTemplate(NamedTuple):
    mode: str  # process | per_worker
    cpus: str  # the (API server) process's CPUs
    mems: tuple
    policy: str  # bind | interleave
    workers: tuple  # Worker per GPU in worker order


def instance_binding(node_cpus, opts, idx, host, stages, stage_entries, node_of, cpus, interleave):
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
    workers = tuple(Worker(node, format_cpulist(mine & node_cpus.get(node, set()))) for node in worker_nodes)
    process = BindingTemplate("process", cpus.cpus, tuple(sorted(set(worker_nodes))),
                              "interleave" if interleave else "bind", workers)
    mode = opts.worker_binding
    if mode == "auto":
        mode = "per_worker" if opts.pp_size > 1 else "process"
    if mode == "process":
        return process, None
    bare = sorted(set(worker.node for worker in workers if not worker.cpus))
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
