# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The plan contract: how every consumer reads a fleet plan (docs/plan.md).

The planner writes a plan; the kept-plan checks, the vLLM units, the
gateway, the text table and the audit read it. Each decision they share
is made here once: the field names of a plan and of an instance, the
rules of an instance's own fields (check_instance_fields, for the kept
plan's check and role vllm's), which entry of a multi-node instance is
its head (the one that serves the API),
the HAProxy server name of an instance, what one host of a multi-node
instance runs (its share), the name an instance serves its model under,
the plan's totals, an instance's device class (an entry of a plan from
before device classes is nvidia), and where a host's topology facts sit in its
variables (the facts view). Pure functions over plain dicts, standard
library only.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping
from operator import itemgetter

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common import record_values
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist

# The fields of fleet_plan's result, and the kept plan's own around them.
PLAN_FIELDS = ("instances", "unused", "warnings", "totals")
ARTIFACT_FIELDS = ("artifact_version", "hosts") + PLAN_FIELDS
# Fields every instance carries (docs/plan.md, "Instances").
INSTANCE_FIELDS = ("host", "name", "tp_size", "pp_size", "gpus", "gpu_indices", "binding", "port", "dist_port")
# What a vLLM unit is made of: all role vllm requires of an entry (its
# README: other plan fields are accepted and ignored).
UNIT_FIELDS = ("name", "tp_size", "pp_size", "gpu_indices", "binding", "port", "dist_port")
BINDING_FIELDS = ("cpus", "mems", "policy", "by_node")
MULTINODE_FIELDS = ("nnodes", "node_rank", "head", "hosts", "master_port")
# What an instance runs on (its host's gpufleet_device_class as planned);
# a CPU instance's binding.ranks hold RANK_FIELDS per rank, in node order.
DEVICES = ("nvidia", "amd", "cpu")
GPU_DEVICES = ("nvidia", "amd")
RANK_FIELDS = ("node", "cpus", "memory_mb")
# Plans written before device classes hold NVIDIA instances only.
LEGACY_DEVICE = "nvidia"
TOTALS_FIELDS = ("hosts", "instances", "gpus", "gpus_used", "gpus_unused")
# Bounds on an instance's fields: far above any instance, low enough to stop damage early.
MAX_PARALLEL = 1024               # tp_size, pp_size
MAX_NODES = 1024                  # hosts of one multi-node instance
MAX_MEMORY_MB = 10 ** 12          # a NUMA node's memory (1 EB)

# What one host of an instance runs: its pipeline stages and its GPUs
# (the whole instance on a one-host instance).
Share = namedtuple("Share", ("nnodes", "pp_size", "gpus"))


def instances(plan, what):
    """The plan's instance entries; ValueError naming `what` for a non-plan."""
    if not isinstance(plan, dict) or not isinstance(plan.get("instances"), list):
        raise ValueError("%s expects the dict returned by fleet_plan (with 'instances')" % what)
    return plan["instances"]


def multinode(instance):
    """The instance's multinode field (a dict), or None for a one-host instance."""
    value = instance.get("multinode") if isinstance(instance, dict) else None
    return value if isinstance(value, dict) else None


def binding(instance):
    """The instance's binding {cpus, mems, policy, by_node, mode?, workers?}, or None."""
    value = instance.get("binding") if isinstance(instance, dict) else None
    return value if isinstance(value, dict) else None


def check_binding(where, value, mems):
    """A plan instance's binding, checked the one way for the kept plan
    (plan/check.py) and the role (deploy/vllm/instance.py): a mapping with
    BINDING_FIELDS, cpus a cpulist, mems as MEMS(name, value) checks them
    (check_instance_fields: nodes Linux can have), policy bind or interleave, by_node a
    boolean, mode process or per_worker (none: a plan kept from before
    per-worker binding, bound by process). Errors name WHERE and the field.
    Returns {cpus (the text), cpu_set, mems, policy, mode}."""
    value = record_values.mapping(where, value)
    for field in BINDING_FIELDS:
        if field not in value:
            checks.fail(where, "lacks %s (needs %s)" % (field, ", ".join(BINDING_FIELDS)), value)
    cpu_set = record_values.cpus(where + ".cpus", value["cpus"])
    nodes = mems(where + ".mems", value["mems"])
    policy = checks.choice(where + ".policy", value["policy"], ("bind", "interleave"))
    if not isinstance(value["by_node"], bool):
        checks.fail(where + ".by_node", "must be a boolean", value["by_node"])
    mode = checks.choice(where + ".mode", value.get("mode", "process"), ("process", "per_worker"))
    return {"cpus": value["cpus"], "cpu_set": cpu_set, "mems": nodes, "policy": policy, "mode": mode}


def check_instance_fields(where, entry, required=INSTANCE_FIELDS, hosts=None, unknown_index=False):
    """A plan instance's own fields, checked the one way for the kept plan
    (plan/check.py) and the role (deploy/vllm/instance.py); errors name
    WHERE and the field. required: the fields ENTRY must carry
    (INSTANCE_FIELDS for a kept plan, UNIT_FIELDS for the role); a host is
    checked wherever there is one, against HOSTS when given. unknown_index:
    a GPU index may be None (a kept plan records AMD GPUs no source gave an
    index; a unit names each of its GPUs). Returns {name, host (or None),
    device, tp_size, pp_size, gpu_indices, multinode (None or {nnodes,
    node_rank, head, hosts, master_port}), binding (check_binding's, and
    by_node), ranks ([] on a GPU instance, else [{node, cpus, memory_mb}]),
    port, dist_port}."""
    if not isinstance(entry, dict):
        checks.fail(where, "must be a plan instance (a mapping)", entry)
    missing = [field for field in required if field not in entry]
    if missing:
        checks.fail(where, "lacks %s (fleet_plan instances carry them; docs/plan.md)" % ", ".join(missing),
                    sorted(str(k) for k in entry))
    host = record_values.host(where + ".host", entry["host"], hosts) if "host" in entry else None
    name = checks.text(where + ".name", entry["name"], record_values.NAME, record_values.NAME_RULE)
    kind = checks.choice(where + ".device", entry["device"], DEVICES) if "device" in entry else LEGACY_DEVICE
    tp_size = record_values.integer(where + ".tp_size", entry["tp_size"], 1, MAX_PARALLEL)
    pp_size = record_values.integer(where + ".pp_size", entry["pp_size"], 1, MAX_PARALLEL)
    read = record_values.index if unknown_index else _known_index
    indices = [read("%s.gpu_indices[%d]" % (where, i), g) for i, g in enumerate(
        record_values.a_list(where + ".gpu_indices", entry["gpu_indices"], record_values.MAX_GPUS_PER_HOST))]
    if kind == "cpu":  # before the multinode field: the shape says more than that field's own rules
        _check_cpu_shape(where, pp_size, entry.get("multinode"), indices)
    spread = _check_multinode_field(where + ".multinode", entry.get("multinode"), host, pp_size)
    local = 0 if kind == "cpu" else share(tp_size, pp_size, spread["nnodes"] if spread else 1).gpus
    _check_count(where + ".gpu_indices", indices, local, tp_size, pp_size, spread)
    bound = check_binding(where + ".binding", entry["binding"], _check_mems)
    bound["by_node"] = entry["binding"]["by_node"]
    return {"name": name, "host": host, "device": kind, "tp_size": tp_size, "pp_size": pp_size,
            "gpu_indices": indices, "multinode": spread, "binding": bound,
            "ranks": _check_ranks(where + ".binding", entry["binding"], kind, tp_size, bound),
            "port": record_values.port(where + ".port", entry["port"]),
            "dist_port": record_values.port(where + ".dist_port", entry["dist_port"])}


def _known_index(name, value):
    return record_values.integer(name, value, 0, record_values.MAX_GPUS_PER_HOST - 1)


def _check_mems(name, value):
    """binding.mems: a non-empty sorted list of distinct NUMA nodes Linux can have."""
    return record_values.nodes(name, value, minimum=1)


def _check_count(where, indices, local, tp_size, pp_size, multinode):
    """This host's share of the instance's GPUs, each once (an unknown index
    is told apart by its GPU id, plan/check.py)."""
    known = [i for i in indices if i is not None]
    distinct = len(set(known)) + len(indices) - len(known)
    if len(indices) != local or distinct != len(indices):
        checks.fail(where, "must list tp_size * pp_size%s = %d distinct GPUs (got %d for tp %d, pp %d)"
                    % (" / multinode.nnodes" if multinode else "", local,
                       distinct if len(indices) == local else len(indices), tp_size, pp_size), indices)


def _check_cpu_shape(where, pp_size, multinode, indices):
    """A CPU instance runs tensor parallel over ranks on its host alone."""
    if pp_size != 1:
        checks.fail(where + ".pp_size", "must be 1 on a CPU instance (device cpu: tensor parallel over ranks only)",
                    pp_size)
    if multinode is not None:
        checks.fail(where + ".multinode", "must be absent on a CPU instance (device cpu never spans hosts)", multinode)
    if indices:
        checks.fail(where + ".gpu_indices", "must be [] on a CPU instance (device cpu)", indices)


def _check_multinode_field(where, value, host, pp_size):
    """The multinode field (None on a one-host instance): nnodes hosts in rank
    order, the entry's host at node_rank, the head first, pp_size / nnodes
    stages on each host."""
    if value is None:
        return None
    value = record_values.mapping(where, value)
    for field in MULTINODE_FIELDS:
        if field not in value:
            checks.fail(where, "lacks %s (fleet_plan's multi-node instances carry %s)"
                        % (field, ", ".join(MULTINODE_FIELDS)), sorted(str(k) for k in value))
    nnodes = record_values.integer(where + ".nnodes", value["nnodes"], 2, MAX_NODES)
    rank = record_values.integer(where + ".node_rank", value["node_rank"], 0, nnodes - 1)
    hosts = [record_values.host("%s.hosts[%d]" % (where, i), h)
             for i, h in enumerate(record_values.a_list(where + ".hosts", value["hosts"], MAX_NODES))]
    if len(hosts) != nnodes or len(set(hosts)) != nnodes:
        checks.fail(where + ".hosts", "must name nnodes (%d) distinct hosts in rank order" % nnodes, hosts)
    if host is not None and hosts[rank] != host:
        checks.fail(where + ".node_rank", "must be this entry's host's place in hosts (%s is rank %d)"
                    % (host, hosts.index(host) if host in hosts else -1), rank)
    if value["head"] != hosts[0]:
        checks.fail(where + ".head", "must be the first of hosts (%s)" % hosts[0], value["head"])
    if pp_size % nnodes:
        checks.fail(where + ".nnodes", "must divide pp_size %d (each host runs pp_size / nnodes stages)" % pp_size,
                    nnodes)
    master_port = record_values.port(where + ".master_port", value["master_port"])
    for i, nic in enumerate(record_values.a_list(where + ".nics", value.get("nics", []), record_values.MAX_NICS)):
        at = "%s.nics[%d]" % (where, i)
        nic = record_values.mapping(at, nic)
        for j, interface in enumerate(record_values.a_list(at + ".interfaces", nic.get("interfaces", []),
                                                           record_values.MAX_NICS)):
            record_values.short_text("%s.interfaces[%d]" % (at, j), interface)
    return {"nnodes": nnodes, "node_rank": rank, "head": hosts[0], "hosts": hosts, "master_port": master_port}


def _check_ranks(where, value, kind, tp_size, bound):
    """A CPU instance's binding.ranks: tp_size ranks, one per node of
    binding.mems in node order, each on CPUs of binding.cpus no other rank
    has (the unit binds each rank's threads to them, VLLM_CPU_OMP_THREADS_BIND);
    [] for a GPU instance, which has none."""
    if kind != "cpu":
        if "ranks" in value:
            checks.fail(where + ".ranks", "is a CPU instance's field (this instance's device is %s)" % kind,
                        value["ranks"])
        return []
    if bound["mode"] != "process" or value.get("workers"):
        checks.fail(where + ".mode", "must be process, without workers, on a CPU instance (its ranks are bound by "
                    "VLLM_CPU_OMP_THREADS_BIND)", value.get("mode"))
    mems = bound["mems"]
    ranks = record_values.a_list(where + ".ranks", value.get("ranks"), record_values.MAX_NUMA_NODE + 1)
    if len(ranks) != tp_size:
        checks.fail(where + ".ranks", "must hold tp_size (%d) ranks, one per NUMA node" % tp_size,
                    "%d ranks" % len(ranks))
    out, taken = [], set()
    for i, rank in enumerate(ranks):
        at = "%s.ranks[%d]" % (where, i)
        rank = record_values.mapping(at, rank)
        if any(k not in RANK_FIELDS for k in rank):
            checks.fail(at, "must be a mapping {%s}" % ", ".join(RANK_FIELDS), sorted(str(k) for k in rank))
        for field in RANK_FIELDS:
            if field not in rank:
                checks.fail(at, "lacks %s (memory_mb: the node's memory in MB, null when unknown)" % field,
                            sorted(str(k) for k in rank))
        node = record_values.integer(at + ".node", rank["node"], 0, record_values.MAX_NUMA_NODE)
        if node not in mems:
            checks.fail(at + ".node", "must be a node of binding.mems (%s)" % ",".join(map(str, mems)), node)
        mine = record_values.cpus(at + ".cpus", rank["cpus"])
        if not mine <= bound["cpu_set"]:
            checks.fail(at + ".cpus", "must be CPUs of binding.cpus (%s)" % bound["cpus"],
                        format_cpulist(mine - bound["cpu_set"]))
        if mine & taken:
            checks.fail(at + ".cpus", "must not share CPUs with another rank", format_cpulist(mine & taken))
        taken |= mine
        memory = rank["memory_mb"]
        if memory is not None:  # at least 1: the planner puts no rank on a node without memory
            memory = record_values.integer(at + ".memory_mb", memory, 1, MAX_MEMORY_MB)
        out.append({"node": node, "cpus": rank["cpus"], "memory_mb": memory})
    if [rank["node"] for rank in out] != mems:
        checks.fail(where + ".ranks", "must hold one rank per node of binding.mems %s, in node order"
                    % ",".join(map(str, mems)), [rank["node"] for rank in out])
    return out


def device(instance):
    """The instance's device class: its `device` field, "nvidia" for an entry
    kept from a plan written before the field existed."""
    return instance.get("device", LEGACY_DEVICE) if isinstance(instance, dict) else None


def ranks(instance):
    """A CPU instance's ranks [{node, cpus, memory_mb}] (binding.ranks), [] for a GPU instance."""
    value = binding(instance)
    value = value.get("ranks") if value is not None else None
    return value if isinstance(value, list) else []


def is_head(instance):
    """True for the entry that serves the API: a one-host instance, or rank 0
    of a multi-node instance (the other ranks run vLLM's --headless)."""
    value = multinode(instance)
    return value is None or value.get("node_rank") == 0


def nnodes(instance):
    """How many hosts the instance spans (1 for a one-host instance)."""
    value = multinode(instance)
    return 1 if value is None else value.get("nnodes")


def share(tp_size, pp_size, nodes=1):
    """What one of `nodes` hosts runs of an instance of tp_size x pp_size:
    pp_size / nodes consecutive stages, tp_size * pp_size / nodes GPUs
    (vLLM's multi-node ranks, docs/placement.md)."""
    return Share(nodes, pp_size // nodes, tp_size * pp_size // nodes)


def share_options(options, nodes):
    """A host's placement options for its share of a `nodes`-host instance:
    pp_size / nodes stages, and one such share per host."""
    return dict(options, pp_size=options["pp_size"] // nodes, max_instances_per_host=1)


def server_name(host, instance_name):
    """The HAProxy server of an instance: <inventory host>-<instance name>
    (the gateway writes it, the vLLM role drains it by it)."""
    return "%s-%s" % (host, instance_name)


def check_served_name(name, value):
    """The one rule for a served model name, wherever it is read (the vLLM
    unit's --served-model-name, the planner, the kept plan, the gateway):
    checks.served_model_name, one word on a command line and in
    HAProxy's configuration; a leading '-' is refused first with the
    command line's own reason. Raises ValueError("NAME: RULE (got VALUE)")."""
    if isinstance(value, str) and value.startswith("-"):
        checks.command_word(name, value)
    return checks.served_model_name(name, value)


def served_name(model, served=""):
    """The name clients ask for an instance's model by: vllm_served_model_name,
    or vllm_model itself when that is empty, under check_served_name's rule.
    Raises ValueError naming the variable."""
    if served is not None and served != "":
        return check_served_name("vllm_served_model_name", served)
    return check_served_name("vllm_model (served as its own name)", model)


def count_instances(entries):
    """Distinct instances among plan entries: a multi-node instance has an
    entry on each of its hosts and counts once, by its head (is_head,
    written out: this runs over every entry of a 10,000-host plan)."""
    heads = 0
    for entry in entries:
        value = entry.get("multinode") if isinstance(entry, dict) else None
        if not isinstance(value, dict) or value.get("node_rank") == 0:
            heads += 1
    return heads


def plan_totals(hosts, gpus, entries):
    """The totals of a plan of `hosts` hosts holding `gpus` GPUs, with these instance entries."""
    used = sum(map(len, map(_gpus_of, entries)))  # C-level maps: a 10,000-host plan holds 40,000 entries
    return {"hosts": hosts, "instances": count_instances(entries), "gpus": gpus, "gpus_used": used,
            "gpus_unused": gpus - used}


_gpus_of = itemgetter("gpus")


def add_totals(totals):
    """The totals of plans of disjoint host sets, added field by field."""
    out = dict.fromkeys(TOTALS_FIELDS, 0)
    for each in totals:
        for key in TOTALS_FIELDS:
            out[key] += int((each or {}).get(key, 0))
    return out


_RAISE = object()


def facts_view(host, variables, missing=_RAISE):
    """A host's topology facts from what the controller holds for it: its
    hostvars (ansible_facts.numa_topology), a mapping with numa_topology,
    or the facts themselves. None there: `missing` when given, else
    ValueError naming the host."""
    if isinstance(variables, Mapping) or hasattr(variables, "get"):
        if "schema_version" in variables and "gpus" in variables:
            return variables
        ansible_facts = variables.get("ansible_facts")
        facts = ansible_facts.get("numa_topology") if hasattr(ansible_facts, "get") else None
        if facts is None:
            facts = variables.get("numa_topology")
        if facts is not None:
            return facts
    if missing is not _RAISE:
        return missing
    raise ValueError("host %s: no topology facts (run gpufleet.numa.numa_facts on it first)" % host)
