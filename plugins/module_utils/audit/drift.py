# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Does the host still match the plan it was deployed with? Drift between
a deployed plan (docs/audit.md, "Deployed plan") and today's facts and
processes: GPUs gone or added, a changed NUMA layout, instances not
running where planned, and what a redeploy would change (the host planned
again with the deployed options).

Pure functions over plain dicts; runs on the controller only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import instance_state
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.locality import comma_list, finding, group_subject, node_phrase
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract

PLAN_OPTION_KEYS = ("tp_size", "pp_size", "allow_span", "reserved_cpus_per_socket", "exclude_gpus",
                    "max_instances_per_host", "worker_binding", "device_class")


def deployed_for_host(deployed, host):
    """(instances of host, placement options, unused of host) from a deployed
    plan (docs/audit.md); ValueError names what is wrong."""
    if not isinstance(deployed, dict):
        raise ValueError("deployed plan must be a mapping (the fleet_plan output), got %s" % type(deployed).__name__)
    plan = deployed.get("plan", deployed)
    if not isinstance(plan, dict) or not isinstance(plan.get("instances"), list):
        raise ValueError("deployed plan has no instances list (expected the fleet_plan output, or {plan: ..., options: ...})")
    options = deployed.get("options") or {}
    # The deploy's kept plan (docs/plan.md) holds the options per host.
    per_host = (deployed.get("hosts") or {}).get(host) if isinstance(deployed.get("hosts"), dict) else None
    if isinstance(per_host, dict) and "options" in per_host:
        options = per_host["options"] or {}
    if not isinstance(options, dict):
        raise ValueError("deployed plan options must be a mapping, got %s" % type(options).__name__)
    unknown = sorted(set(options) - set(placement.FLEET_OPTIONS))
    if unknown:
        raise ValueError("deployed plan options: unknown %s (known: %s)" % (", ".join(unknown), ", ".join(sorted(placement.FLEET_OPTIONS))))
    instances = []
    for i, inst in enumerate(plan["instances"]):
        if not isinstance(inst, dict) or not inst.get("host") or not isinstance(inst.get("gpus"), list):
            raise ValueError("deployed plan instances[%d] has no host or gpus list" % i)
        # The device picks the audit's table row: an unknown one is refused here, by name.
        if inst.get("device") is not None:
            checks.choice("deployed plan instances[%d].device" % i, inst["device"], contract.DEVICES)
        if inst["host"] == host:
            instances.append(inst)
    unused = [u for u in plan.get("unused") or [] if isinstance(u, dict) and u.get("host") == host]
    host_opts = dict((k, options[k]) for k in PLAN_OPTION_KEYS if k in options)
    if isinstance(host_opts.get("exclude_gpus"), dict):
        host_opts["exclude_gpus"] = host_opts["exclude_gpus"].get(host) or []
    if instances:
        host_opts.setdefault("tp_size", instances[0].get("tp_size"))
        host_opts.setdefault("pp_size", instances[0].get("pp_size") or 1)
        # A host of a multi-node instance holds pp_size / nnodes of its stages
        # and one such instance (docs/placement.md): replan it as that.
        multinode = instances[0].get("multinode")
        nodes = multinode.get("nnodes") if isinstance(multinode, dict) else None
        if (isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1
                and isinstance(host_opts["pp_size"], int)):
            host_opts = contract.share_options(host_opts, nodes)
    return instances, host_opts, unused


def _gpu_key(ref):
    if isinstance(ref, dict):
        return ref.get("pci_bus_id") or ref.get("id")
    return ref


def _instance_gpus(inst):
    return [_gpu_key(g) for g in inst["gpus"]]


def _describe(view, keys):
    gpus = [view.gpu(k) for k in keys]
    if all(gpus):
        return view.label(gpus)
    return "GPUs %s" % ",".join(keys)


def _plan_signature(group):
    return (tuple(_gpu_key(g) for g in group["gpus"]), tuple(group.get("numa_nodes") or ()),
            group.get("cpus"), group.get("memory_policy"))


def check_plan(view, deployed, groups, processes, unit_prefix=instance_state.DEFAULT_UNIT_PREFIX):
    """Drift between the deployed plan and today: GPUs gone or added, NUMA
    layout changed, each instance's state (instance_state.py) and engine,
    and what a redeploy would change. processes: the process reader's
    {source, processes, unit_states}. Returns (findings, instances state,
    today's plan)."""
    host = view.host
    instances, options, unused = deployed_for_host(deployed, host)
    findings = []
    states = []
    planned = set()
    seen = {"source": processes.get("source"), "units": processes.get("unit_states") or {}, "prefix": unit_prefix,
            "by_gpus": {}, "engines": {}}
    for group in groups:
        for bus in group["gpus"]:
            seen["by_gpus"][bus] = group
    for proc in processes.get("processes") or []:
        engine = (proc.get("environment") or {}).get(instance_state.ENGINE_KEY)
        if engine:
            seen["engines"][proc["pid"]] = engine
    for inst in instances:
        planned.update(_instance_gpus(inst))
        inst_findings, state = _check_instance(view, inst, seen)
        findings.extend(inst_findings)
        states.append(state)
    process_source = seen["source"]
    if process_source is not None:
        for group in groups:
            if group["instance"] is None and instances:
                findings.append(finding(
                    host, "warning", "unplanned_process", group_subject(group),
                    "%s holds %s, which no planned instance explains" % (group_subject(group), _describe(view, group["gpus"])),
                    "stop it, or add its work to the plan", group["pids"], group["gpus"]))
    known_unused = set(_gpu_key(u) for u in unused) | set(u.get("id") for u in unused)
    if instances:
        added = [g for g in view.gpus if (g.get("pci_bus_id") or g["id"]) not in planned
                 and g["id"] not in planned and g["id"] not in known_unused and g.get("pci_bus_id") not in known_unused]
        if added:
            findings.append(finding(
                host, "warning", "gpu_added", host,
                "%s %s not in the deployed plan" % (view.label(added), "is" if len(added) == 1 else "are"),
                "redeploy to put it to use", gpus=[g["id"] for g in added]))
    today = None
    if instances and options.get("tp_size"):
        try:
            today = placement.plan_host(view.facts, host=host, **options)
        except ValueError as exc:
            findings.append(finding(
                host, "error", "replan_failed", host,
                "today's topology cannot be planned with the deployed options (%s): %s" % (
                    ", ".join("%s=%s" % kv for kv in sorted(options.items())), exc),
                "fix the host (or the options) before the next deploy"))
        if today is not None:
            findings.extend(_replan_findings(view, instances, today))
    return findings, states, today


def _check_instance(view, inst, seen):
    """(findings, state) of one planned instance: its GPUs still here and on
    its nodes, its state (docs/audit.md, "Instance state") and its engine.
    seen: the process source, the unit states, the unit prefix, by_gpus
    (bus id -> the process group holding that GPU; the group that runs the
    instance gets its name) and engines (pid -> GPUFLEET_ENGINE)."""
    host = view.host
    name = inst.get("name") or "instance"
    keys = _instance_gpus(inst)
    unit = instance_state.instance_unit(inst, seen["prefix"])
    unit_said, unit_text = instance_state.unit_kind((seen["units"].get("units") or {}).get(unit))
    findings = []
    state = {"name": name, "gpus": keys, "numa_nodes": list(inst.get("numa_nodes") or []),
             "cpus": inst.get("cpus"), "state": None, "problem": None, "unit": unit, "unit_state": unit_text,
             "pids": [], "engine": None}
    gone = [k for k in keys if not view.gpu(k)]
    if gone:
        findings.append(finding(
            host, "critical", "gpu_missing", name,
            "instance %s is planned on GPU(s) %s, which this host no longer has" % (name, ", ".join(gone)),
            "find out why the GPU is gone (nvidia-smi, dmesg); redeploy to plan without it", gpus=gone, instance=name))
        state["problem"] = "gpu missing"
    layout = _layout_change(view, inst)
    if layout:
        findings.append(finding(
            host, "error", "numa_layout_changed", name,
            "instance %s was planned on %s, but %s (NPS/SNC or BIOS change?)" % (
                name, node_phrase(inst.get("numa_nodes") or []), layout),
            "redeploy: the plan and the unit's binding are computed from today's layout", gpus=keys, instance=name))
        state["problem"] = state["problem"] or "layout changed"
    # A CPU instance (device cpu) holds no GPUs to find its processes by:
    # its unit says how it is.
    if seen["source"] is None or gone or inst.get("device") == "cpu":
        state["state"] = unit_said or "unknown"
    else:
        findings.extend(_match_processes(view, inst, seen, state, unit_said))
    if state["state"] in ("stopped", "failed") and state["problem"] in (None, "layout changed") \
            and not any(f["code"] == "instance_not_running" for f in findings):
        findings.append(_not_running(view, name, keys, unit, unit_text, seen["source"]))
    if state["state"] == "unknown":
        findings.append(instance_state.unknown_finding(host, name, unit, instance_state.unknown_reason(
            seen["source"], state["problem"], unit, unit_text, seen["units"].get("missing"))))
    return findings, state


def _not_running(view, name, keys, unit, unit_text, process_source, holders_exact=None):
    """instance_not_running, saying what was seen: its unit's state, and
    whether processes hold its GPUs."""
    if holders_exact:
        why = "its unit %s is %s, though %s holds exactly its GPUs (not started by its unit?)" % (
            unit, unit_text, group_subject(holders_exact))
    elif process_source is None:
        why = "its unit %s is %s" % (unit, unit_text)
    else:
        why = "no process holds its GPUs" + ("; its unit %s is %s" % (unit, unit_text) if unit_text else "")
    return finding(
        view.host, "error", "instance_not_running", name,
        "instance %s (planned on %s) is not running: %s" % (name, _describe(view, keys), why),
        "look at its unit: systemctl status %s; journalctl -u %s" % (unit, unit), gpus=keys, instance=name)


def _match_processes(view, inst, seen, state, unit_said):
    """With a process source: the group holding exactly the instance's GPUs
    runs it (unless its unit says it is stopped or failed); nothing on its
    GPUs: stopped (failed when its unit says so); other holders: elsewhere."""
    host = view.host
    name, keys = state["name"], state["gpus"]
    holders = []
    for k in keys:
        group = seen["by_gpus"].get(view.gpu(k).get("pci_bus_id"))
        if group is not None and group not in holders:
            holders.append(group)
    exact = [g for g in holders if set(g["gpu_ids"]) == set(view.gpu(k)["id"] for k in keys)]
    if exact and unit_said in ("stopped", "failed"):
        state["state"] = unit_said
        return [_not_running(view, name, keys, state["unit"], state["unit_state"], seen["source"], exact[0])]
    if exact:
        exact[0]["instance"] = name
        state["state"] = "running"
        state["pids"] = exact[0]["pids"]
        engines = sorted(set(seen["engines"][p] for p in exact[0]["pids"] if p in seen["engines"]))
        state["engine"] = engines[0] if len(engines) == 1 else (", ".join(engines) or None)
        return instance_state.engine_drift(host, inst, name, engines)
    if not holders:
        state["state"] = "failed" if unit_said == "failed" else "stopped"
        return []
    other = "; ".join("%s holds %s" % (group_subject(g), _describe(view, g["gpus"])) for g in holders)
    state["problem"] = "elsewhere"
    state["state"] = unit_said or "unknown"
    return [finding(
        host, "error", "instance_misplaced", name,
        "instance %s is planned on %s, but %s" % (name, _describe(view, keys), other),
        "stop what runs on the instance's GPUs and restart the instance's unit",
        [p for g in holders for p in g["pids"]], keys, name)]


def _layout_change(view, inst):
    """What moved since the instance was planned (its GPUs now on other
    nodes, its CPUs no longer on its nodes), as text; None when nothing."""
    moved = []
    for k in _instance_gpus(inst):
        gpu = view.gpu(k)
        if gpu and gpu.get("numa_node") is not None and gpu["numa_node"] not in (inst.get("numa_nodes") or []):
            moved.append("%s now on %s" % (view.label([gpu]), node_phrase([gpu["numa_node"]])))
    if inst.get("cpus"):
        try:
            want = set(parse_cpulist(inst["cpus"]))
        except ValueError:
            want = set()
        have = set()
        for node in inst.get("numa_nodes") or []:
            have |= view.node_cpus.get(int(node), set())
        if want and not want <= have:
            moved.append("its CPUs %s are no longer all on %s (today: %s)" % (
                inst["cpus"], node_phrase(inst.get("numa_nodes") or []), format_cpulist(have) or "no CPUs"))
    return "; ".join(moved) or None


def _replan_findings(view, instances, today):
    host = view.host
    out = []
    groups = today["groups"]
    for ordinal in range(max(len(instances), len(groups))):
        inst = instances[ordinal] if ordinal < len(instances) else None
        group = groups[ordinal] if ordinal < len(groups) else None
        name = inst.get("name") if inst else "new instance %d" % ordinal
        if inst is None:
            out.append(finding(
                host, "warning", "replan_differs", name,
                "a redeploy would add an instance on %s (%s, CPUs %s)" % (
                    _describe(view, [_gpu_key(g) for g in group["gpus"]]), node_phrase(group["numa_nodes"]), group["cpus"]),
                "redeploy to use it", gpus=[_gpu_key(g) for g in group["gpus"]]))
            continue
        if group is None:
            out.append(finding(
                host, "warning", "replan_differs", name,
                "a redeploy would remove instance %s (today's topology has no room for it)" % name,
                "redeploy, or restore the missing GPUs", gpus=_instance_gpus(inst), instance=name))
            continue
        if _plan_signature(inst) == _plan_signature(group):
            continue
        changes = []
        old_gpus, new_gpus = _instance_gpus(inst), [_gpu_key(g) for g in group["gpus"]]
        if old_gpus != new_gpus:
            changes.append("GPUs %s -> %s" % (",".join(old_gpus), ",".join(new_gpus)))
        if list(inst.get("numa_nodes") or []) != list(group["numa_nodes"]):
            changes.append("NUMA nodes %s -> %s" % (comma_list(inst.get("numa_nodes") or []), comma_list(group["numa_nodes"])))
        if inst.get("cpus") != group["cpus"]:
            changes.append("CPUs %s -> %s" % (inst.get("cpus"), group["cpus"]))
        if inst.get("memory_policy") != group["memory_policy"]:
            changes.append("memory policy %s -> %s" % (inst.get("memory_policy"), group["memory_policy"]))
        out.append(finding(
            host, "warning", "replan_differs", name,
            "a redeploy would change instance %s: %s" % (name, "; ".join(changes)),
            "redeploy (ansible-playbook gpufleet.numa.deploy_inference) to apply today's plan", gpus=old_gpus, instance=name))
    return out
