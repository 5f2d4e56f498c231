# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The plan contract: how every consumer reads a fleet plan (docs/plan.md).

The planner writes a plan; the kept-plan checks, the vLLM units, the
gateway, the text table and the audit read it. Each decision they share
is made here once: the field names of a plan and of an instance, which
entry of a multi-node instance is its head (the one that serves the API),
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

# The fields of fleet_plan's result, and the kept plan's own around them.
PLAN_FIELDS = ("instances", "unused", "warnings", "totals")
ARTIFACT_FIELDS = ("artifact_version", "hosts") + PLAN_FIELDS
# Fields every instance carries (docs/plan.md, "Instances").
INSTANCE_FIELDS = ("host", "name", "tp_size", "pp_size", "gpus", "gpu_indices", "binding", "port", "dist_port")
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
    (the callers differ in bounds), policy bind or interleave, by_node a
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
