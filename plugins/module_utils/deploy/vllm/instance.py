# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""This host's plan instances (docs/plan.md), checked: one instance's
fields (check_instance), all of them (check_instances), per-worker
binding (check_per_worker, the workers) and multi-node instances
(check_multinode, the head's --master-addr). Errors are ValueError naming
vllm_instances[i] and the field. Pure functions, standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common import record_values
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.command import join_values
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.engine_checks import release as vllm_release
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.variables import as_list, mapping
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract


# Per-worker binding (binding.mode per_worker): the first vLLM release with
# --numa-bind, --numa-bind-nodes and --numa-bind-cpus.


PER_WORKER_SINCE = (0, 20)


def check_instance(index, instance):
    """One plan instance (docs/plan.md), checked; returns the fields the unit uses.
    Its own fields are checked as the kept plan checks them
    (contract.check_instance_fields); the workers and the reason are the role's."""
    where = "vllm_instances[%d]" % index
    name = instance.get("name") if isinstance(instance, dict) else None
    # Messages name the instance once its name is one (a bad name shows as the value, escaped).
    label = "%s (%s)" % (where, name) if isinstance(name, str) and re.fullmatch(record_values.NAME, name) else where
    fields = contract.check_instance_fields(label, instance, contract.UNIT_FIELDS)
    binding, gpus = fields["binding"], fields["gpu_indices"]
    cpus, mode = binding["cpus"], binding["mode"]
    workers = _workers(label, instance["binding"], gpus, cpus) if mode == "per_worker" else []
    reason = instance.get("reason", "")
    # The plan's own words, shown in a comment: one line, no continuation.
    reason = re.sub(r"[\x00-\x1f\x7f]+", " ", str(reason)).rstrip("\\ ")
    return {"name": fields["name"], "device": fields["device"], "ranks": fields["ranks"], "tp_size": fields["tp_size"],
            "pp_size": fields["pp_size"], "gpu_indices": gpus, "cpus": cpus, "mems": binding["mems"],
            "policy": binding["policy"], "by_node": binding["by_node"], "mode": mode, "workers": workers,
            "port": fields["port"], "dist_port": fields["dist_port"], "reason": reason, "multinode": fields["multinode"]}


def _workers(label, binding, gpus, cpus):
    """binding.workers of a per_worker instance: one {gpu_index, node, cpus}
    per GPU in the order of gpu_indices. Binding by CPU list, each worker's
    CPUs lie inside the process's: vLLM starts the worker under numactl
    --physcpubind, which refuses CPUs outside its parent's set."""
    where = label + ".binding.workers"
    workers = [mapping("%s[%d]" % (where, i), w) for i, w in enumerate(as_list(where, binding.get("workers", [])))]
    if [w.get("gpu_index") for w in workers] != gpus:
        checks.fail(where, "must hold one entry per GPU in the order of gpu_indices %s" % join_values(gpus),
                    workers)
    allowed = set(parse_cpulist(cpus))
    out = []
    for i, worker in enumerate(workers):
        node = checks.integer("%s[%d].node" % (where, i), worker.get("node"), 0, 4095)
        worker_cpus = ""
        if not binding["by_node"]:
            worker_cpus = checks.text("%s[%d].cpus" % (where, i), worker.get("cpus"), record_values.CPULIST,
                                      "must be a cpulist such as 0-47,96-143")
            try:
                outside = set(parse_cpulist(worker_cpus)) - allowed
            except ValueError as exc:
                checks.fail("%s[%d].cpus" % (where, i), str(exc), worker_cpus)
            if outside:
                checks.fail("%s[%d].cpus" % (where, i), "must lie inside binding.cpus %s (numactl refuses a worker's "
                            "CPUs outside its parent's)" % cpus, worker_cpus)
        out.append({"node": node, "cpus": worker_cpus})
    return out


def check_instances(instances):
    checked = [check_instance(i, inst) for i, inst in enumerate(as_list("vllm_instances", instances))]
    devices.host_device(instances)
    seen = {}
    for inst in checked:
        for what, value in (("name", inst["name"]), ("port", inst["port"]), ("port", inst["dist_port"])):
            key = (what, value)
            if key in seen:
                raise ValueError("vllm_instances: %s and %s collide on %s %s (names, API ports and VLLM_PORT "
                                 "bases must be unique on a host)" % (seen[key], inst["name"], what, value))
            seen[key] = inst["name"]
    return checked


def check_per_worker(instances, v):
    """Per-worker binding needs vLLM's --numa-bind (0.20 and newer) and
    spawned workers; say so before a unit fails at start."""
    per_worker = [inst["name"] for inst in instances if inst["mode"] == "per_worker"]
    if not per_worker:
        return
    engine = v["engine"]
    release = vllm_release(engine["version"])
    if not v["vllm_executable"] and release is not None and release < PER_WORKER_SINCE:
        raise ValueError(
            "%s: %s has no per-worker NUMA binding (--numa-bind, vLLM %d.%d and newer), which the "
            "plan gives %s: install a newer vLLM or plan with gpufleet_worker_binding: process"
            % (engine["variable"], engine["version"], PER_WORKER_SINCE[0], PER_WORKER_SINCE[1], ", ".join(per_worker)))
    method = v["vllm_environment"].get("VLLM_WORKER_MULTIPROC_METHOD")
    if method is not None and method != "spawn":
        checks.fail("vllm_environment.VLLM_WORKER_MULTIPROC_METHOD", "must be spawn (or unset) while the plan binds "
                    "workers per node (%s): vLLM binds a worker by spawning it through numactl"
                    % ", ".join(per_worker), method)


def check_multinode(instances, v, host):
    """A multi-node instance needs its head's address, this host among its
    hosts, and all its hosts rolling together (a head restarted without its
    ranks, or a rank without its head, cannot serve)."""
    for inst in instances:
        multinode = inst["multinode"]
        if multinode is None:
            continue
        label = "instance %s (head %s, hosts %s)" % (inst["name"], multinode["head"], ", ".join(multinode["hosts"]))
        if host is not None and multinode["hosts"][multinode["node_rank"]] != host:
            raise ValueError("vllm_instances: %s is rank %d, which is %s, not this host %s"
                             % (label, multinode["node_rank"], multinode["hosts"][multinode["node_rank"]], host))
        address = v["vllm_node_addresses"].get(multinode["head"])
        if address in (None, ""):
            raise ValueError("vllm_node_addresses: lacks the head %s of %s: set gpufleet_node_address (or a "
                             "concrete vllm_listen_host) for it, the address its ranks reach it at"
                             % (multinode["head"], label))
        address = checks.address("vllm_node_addresses.%s" % multinode["head"], address)
        problem = _master_address_problem(address, v["vllm_allow_loopback_master"])
        if problem:
            raise ValueError(
                "vllm_node_addresses.%s: %s, not an address the other hosts of %s can reach as --master-addr: set "
                "gpufleet_node_address (or vllm_listen_host) of %s to its address on the network between them"
                % (multinode["head"], problem, label, multinode["head"])
                + ("" if "wildcard" in problem else
                   ", or vllm_allow_loopback_master: true when all its hosts run on this one machine"))
        v["vllm_node_addresses"][multinode["head"]] = address
        rolling = v["vllm_rollout_hosts"]
        missing = [h for h in multinode["hosts"] if h not in rolling]
        if rolling and missing:
            raise ValueError(
                "vllm_rollout_hosts: %s must roll as one, but %s %s not in this batch (%s): run all its hosts "
                "(no --limit that splits it; a host that is down stops the instance) and let "
                "gpufleet_rollout_hosts_at_once keep them in one batch (the default, 100%%)"
                % (label, ", ".join(missing), "is" if len(missing) == 1 else "are", ", ".join(rolling)))


def _master_address_problem(address, allow_loopback):
    """Why `address` cannot be a multi-node head's --master-addr, or ''.
    Unspecified addresses (checks.address_scope: 0.0.0.0/8, ::,
    ::ffff:0.0.0.0) never can (numeric shorthands such as "0" or "127.1"
    checks.address refuses); loopback (127.0.0.0/8, ::1, localhost and the
    names under it) only where every host of the instance is this machine,
    which the caller says (vllm_allow_loopback_master)."""
    scope = checks.address_scope(address)
    if scope == "unspecified":
        return "%s is a wildcard (unspecified) address" % address
    if scope == "loopback" and not allow_loopback:
        return "%s is a loopback address" % address
    return ""
