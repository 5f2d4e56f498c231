# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Audit a running host: are the processes that hold GPUs where their GPUs
are, and does the host still match the plan it was deployed with?

audit_host(facts, processes, host=None, deployed=None, ...) takes
- facts: the topology facts (docs/facts.md, schema 1),
- processes: gpu_processes.read_processes() output,
- deployed: the deployed fleet plan (docs/audit.md, "Deployed plan"), or None,
and returns plain dicts: findings (severity, code, subject, message, fix),
the process groups (a session's processes: a server and its TP workers),
and, with a plan, each planned instance's state and today's plan.

Severities, lowest first: info, warning, error, critical. Pure functions,
standard library only (the module runs this on targets).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.processes import policy_nodes
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show

SEVERITIES = ("info", "warning", "error", "critical")
PLAN_OPTION_KEYS = ("tp_size", "pp_size", "allow_span", "reserved_cpus_per_socket", "exclude_gpus",
                    "max_instances_per_host", "worker_binding")
DEFAULT_MEMORY_THRESHOLD = 20  # percent of a process's memory on other nodes before it is a finding


def severity_rank(severity, variable="severity"):
    """Position of a severity in SEVERITIES; ValueError names the variable
    and the choices: "VARIABLE: must be one of ... (got VALUE)"."""
    if isinstance(severity, str) and severity in SEVERITIES:
        return SEVERITIES.index(severity)
    raise ValueError("%s: must be one of %s (got %s)" % (variable, ", ".join(SEVERITIES), show(severity)))


def at_or_above(findings, severity, variable="severity"):
    """The findings whose severity is at or above `severity` (named
    `variable` in the error when it is none of SEVERITIES)."""
    rank = severity_rank(severity, variable)
    return [f for f in findings if severity_rank(f["severity"]) >= rank]


def _ints(values):
    return ",".join(str(v) for v in values)


def _node_word(nodes):
    nodes = sorted(nodes)
    return ("node %s" if len(nodes) == 1 else "nodes %s") % _ints(nodes)


def _percent(part, whole):
    return int(round(100.0 * part / whole)) if whole else 0


class HostView(object):
    """The facts as the audit asks them: CPUs per node, node -> socket,
    GPUs by bus id."""

    def __init__(self, facts, host):
        if not isinstance(facts, dict) or not isinstance(facts.get("gpus"), list):
            raise ValueError("host %s: topology facts must be a dict with a gpus list" % host)
        self.facts = facts
        self.host = host
        self.node_cpus = {}
        self.node_socket = {}
        for node in facts.get("numa_nodes") or []:
            nid = int(node["id"])
            try:
                self.node_cpus[nid] = set(parse_cpulist(node.get("cpus") or ""))
            except ValueError:
                self.node_cpus[nid] = set()
            self.node_socket[nid] = node.get("socket")
        for sock in facts.get("sockets") or []:
            for nid in sock.get("numa_nodes") or []:
                if self.node_socket.get(int(nid)) is None:
                    self.node_socket[int(nid)] = sock.get("id")
        self.gpus = list(facts["gpus"])
        for gpu in self.gpus:
            # A node the facts do not list gets its CPUs from its GPUs.
            node = gpu.get("numa_node")
            if node is not None and not self.node_cpus.get(node) and gpu.get("local_cpus"):
                try:
                    self.node_cpus[node] = set(parse_cpulist(gpu["local_cpus"]))
                except ValueError:
                    pass
                self.node_socket.setdefault(node, None)
        self.by_bus = dict((g["pci_bus_id"], g) for g in self.gpus if g.get("pci_bus_id"))
        self.by_id = dict((g["id"], g) for g in self.gpus)
        self.all_cpus = set()
        for cpus in self.node_cpus.values():
            self.all_cpus |= cpus
        self.cpu_node = {}
        for nid, cpus in self.node_cpus.items():
            for cpu in cpus:
                self.cpu_node[cpu] = nid

    def cpu_nodes(self):
        return sorted(n for n, cpus in self.node_cpus.items() if cpus)

    def socket_label(self, node):
        sock = self.node_socket.get(node)
        return ("socket", sock) if sock is not None else ("node", node)

    def gpu(self, key):
        return self.by_bus.get(key) or self.by_id.get(key)

    def label(self, gpus):
        """"GPUs 1,2,3" by index (bus ids where a GPU has no index)."""
        words = [str(g["index"]) if g.get("index") is not None else g["id"] for g in gpus]
        return ("GPU %s" if len(words) == 1 else "GPUs %s") % ",".join(words)

    def nodes_of(self, cpus):
        return sorted(set(self.cpu_node[c] for c in cpus if c in self.cpu_node))


def _finding(host, severity, code, subject, message, fix, pids=(), gpus=(), instance=None):
    return {
        "host": host,
        "severity": severity,
        "code": code,
        "subject": subject,
        "message": message,
        "fix": fix,
        "pids": list(pids),
        "gpus": list(gpus),
        "instance": instance,
    }


def _subject(proc):
    return "%s (pid %d)" % (proc.get("name") or "process", proc["pid"])


def _bind_command(nodes):
    nodes = _ints(sorted(nodes))
    memory = "--membind=%s" % nodes if "," not in nodes else "--interleave=%s" % nodes
    return "numactl --cpunodebind=%s %s" % (nodes, memory)


# ---------------------------------------------------------------- groups


def process_groups(view, processes):
    """Processes grouped by session (a server and the workers it started);
    each group with its GPUs (facts records), nodes and sockets."""
    groups = {}
    order = []
    for proc in processes:
        key = proc.get("session") or proc["pid"]
        if key not in groups:
            groups[key] = {"key": key, "processes": []}
            order.append(key)
        groups[key]["processes"].append(proc)
    out = []
    for key in order:
        members = sorted(groups[key]["processes"], key=lambda p: p["pid"])
        leader = next((p for p in members if p["pid"] == key), members[0])
        buses = sorted(set(b for p in members for b in p["gpus"]))
        known = [view.gpu(b) for b in buses if view.gpu(b)]
        nodes = sorted(set(g["numa_node"] for g in known if g.get("numa_node") is not None))
        out.append({
            "key": key,
            "name": leader.get("name") or "process",
            "leader": leader["pid"],
            "pids": [p["pid"] for p in members],
            "gpus": buses,
            "gpu_ids": [g["id"] for g in known],
            "unknown_gpus": [b for b in buses if not view.gpu(b)],
            "numa_nodes": nodes,
            "sockets": sorted(set(str(view.socket_label(n)[1]) for n in nodes if view.node_socket.get(n) is not None)),
            "instance": None,
            "misplaced": False,
        })
    return out


def _group_subject(group):
    extra = len(group["pids"]) - 1
    more = "" if not extra else " and %d more process%s" % (extra, "es" if extra > 1 else "")
    return "%s (pid %d%s)" % (group["name"], group["leader"], more)


def _socket_local_choice(view, count):
    """(text, node or None): `count` GPUs of one NUMA node, else of one
    socket, as a suggestion; (None, None) when no socket has that many."""
    by_socket = {}
    for gpu in view.gpus:
        if gpu.get("numa_node") is None:
            continue
        by_socket.setdefault(view.socket_label(gpu["numa_node"]), []).append(gpu)
    for label in sorted(by_socket, key=lambda lab: (lab[0] != "socket", lab[1])):
        gpus = by_socket[label]
        by_node = {}
        for gpu in gpus:
            by_node.setdefault(gpu["numa_node"], []).append(gpu)
        for node in sorted(by_node):
            if len(by_node[node]) >= count:
                return "%s (%s)" % (view.label(by_node[node][:count]), _node_word([node])), node
        if len(gpus) >= count:
            return "%s (socket %s)" % (view.label(gpus[:count]), label[1]), None
    return None, None


def check_group(view, group):
    """A group whose GPUs span sockets (critical) or NUMA nodes of one socket (warning)."""
    host = view.host
    known = [view.gpu(g) for g in group["gpus"] if view.gpu(g)]
    nodes = group["numa_nodes"]
    if len(nodes) < 2:
        return []
    labels = set(view.socket_label(n) for n in nodes)
    per_node = "; ".join(
        "%s on %s" % (view.label([g for g in known if g.get("numa_node") == n]), _node_word([n])) for n in nodes)
    suggestion, node = _socket_local_choice(view, len(known))
    if len(labels) > 1:
        sockets_known = all(lab[0] == "socket" for lab in labels)
        where = ("sockets %s" % _ints(sorted(lab[1] for lab in labels))) if sockets_known else (
            "NUMA nodes %s (sockets unknown: taken as separate sockets)" % _ints(nodes))
        message = ("%s holds %s across %s (%s): every all-reduce and host copy crosses the inter-socket link"
                   % (_group_subject(group), view.label(known), where, per_node))
        if suggestion:
            fix = "run it on the GPUs of one socket, e.g. %s%s, or deploy it with gpufleet.numa.fleet_plan" % (
                suggestion, ", bound to that node (%s)" % _bind_command([node]) if node is not None else "")
        else:
            fix = ("no socket has %d GPUs: use fewer GPUs per group (one socket's), bound to their node, or deploy "
                   "it with gpufleet.numa.fleet_plan (allow_span interleaves memory when a group must span)" % len(known))
        severity, code = "critical", "gpus_span_sockets"
    else:
        message = "%s holds %s on several NUMA nodes of one socket (%s)" % (_group_subject(group), view.label(known), per_node)
        fix = "use the GPUs of one NUMA node%s" % (", e.g. " + suggestion if suggestion else "")
        severity, code = "warning", "gpus_span_nodes"
    group["misplaced"] = True
    return [_finding(host, severity, code, _group_subject(group), message, fix, group["pids"], group["gpus"])]


# ---------------------------------------------------------------- processes


def check_process(view, proc, memory_threshold=DEFAULT_MEMORY_THRESHOLD, instance=None):
    """Findings for one process: CPU and memory locality against its GPUs,
    and its device environment. Returns (findings, placed) where placed says
    where the process actually is: {cpu_nodes, memory_node, misplaced}."""
    host = view.host
    subject = _subject(proc)
    findings = []
    placed = {"cpu_nodes": None, "memory_node": None, "misplaced": False}
    held = [view.gpu(b) for b in proc["gpus"] if view.gpu(b)]
    unknown = [b for b in proc["gpus"] if not view.gpu(b)]
    if unknown:
        findings.append(_finding(
            host, "warning", "gpu_not_in_topology", subject,
            "%s holds GPU(s) %s that the topology facts do not list (no bus ids in the facts, or a GPU "
            "hidden from the topology sources)" % (subject, ", ".join(unknown)),
            "gather facts with NVML or nvidia-smi --query-gpu available so GPUs are known by bus id",
            [proc["pid"]], proc["gpus"], instance))
    findings.extend(_check_environment(view, proc, held, instance))
    if not proc.get("readable", True):
        findings.append(_finding(
            host, "info", "process_unreadable", subject,
            "%s holds %s but its /proc files could not be read" % (subject, view.label(held) if held else "GPUs"),
            "run the audit with become: true", [proc["pid"]], proc["gpus"], instance))
        return findings, placed
    cpus = None
    if proc.get("cpus_allowed") is not None:
        cpus = set(parse_cpulist(proc["cpus_allowed"])) & (view.all_cpus or set(parse_cpulist(proc["cpus_allowed"])))
        placed["cpu_nodes"] = view.nodes_of(cpus)
    memory = dict((int(k), int(v)) for k, v in (proc.get("memory_kb") or {}).items())
    total = sum(memory.values())
    if total:
        placed["memory_node"] = sorted(memory, key=lambda n: (-memory[n], n))[0]
    if not held:
        return findings, placed
    nodes = set(g["numa_node"] for g in held if g.get("numa_node") is not None)
    if len(nodes) < len(set(id(g) for g in held)) and any(g.get("numa_node") is None for g in held):
        findings.append(_finding(
            host, "info", "gpu_node_unknown", subject,
            "%s holds %s whose NUMA node is unknown: its locality cannot be checked" % (
                subject, view.label([g for g in held if g.get("numa_node") is None])),
            "see the topology warnings (numa_facts)", [proc["pid"]], proc["gpus"], instance))
    if not nodes or len(view.cpu_nodes()) < 2:
        return findings, placed  # one NUMA node: nothing can be on the wrong one
    local = set()
    for node in nodes:
        local |= view.node_cpus.get(node, set())
    problems = []
    severity = "info"

    def worse(level):
        return level if severity_rank(level) > severity_rank(severity) else severity

    if cpus is not None and local and not cpus <= local:
        outside = sorted(cpus - local)
        if not cpus & local:
            problems.append("runs only on CPUs %s (%s)" % (format_cpulist(cpus), _node_word(view.nodes_of(cpus))))
            severity = worse("critical")
        elif view.all_cpus and cpus >= view.all_cpus:
            problems.append("may run on all CPUs")
            severity = worse("error")
        else:
            problems.append("may run on CPUs %s (%s) besides its own" % (
                format_cpulist(outside), _node_word(view.nodes_of(outside))))
            severity = worse("error")
    if proc.get("mems_allowed") is not None:
        mems = set(parse_cpulist(proc["mems_allowed"]))
        if mems and not mems & nodes:
            problems.append("may allocate memory only on %s (cpuset)" % _node_word(mems))
            severity = worse("critical")
    policy = proc.get("memory_policy")
    bound = policy_nodes(policy)
    if bound is not None and not set(bound) <= nodes:
        problems.append("its memory policy is %s" % policy)
        severity = worse("error")
    if total:
        remote = dict((n, kb) for n, kb in memory.items() if n not in nodes and kb)
        share = _percent(sum(remote.values()), total)
        if share >= max(memory_threshold, 1):
            problems.append("%d%% of its memory is on %s" % (share, _node_word(remote)))
            severity = worse("error" if share >= 50 else "warning")
    if not problems:
        return findings, placed
    placed["misplaced"] = True
    unbound = policy in (None, "default", "local") and bound is None
    if unbound and cpus is not None and not cpus <= local:
        problems.append("its memory is not bound (policy %s)" % (policy or "unknown"))
    message = "%s uses %s on %s but %s" % (subject, view.label(held), _node_word(nodes),
                                           ", ".join(problems[:-1]) + (" and " if len(problems) > 1 else "") + problems[-1])
    fix = "bind it to %s (%s)" % (_node_word(nodes), _bind_command(nodes))
    if instance:
        fix += "; it is planned instance %s: redeploy it so its unit binds it" % instance
    findings.append(_finding(host, severity, "process_locality", subject, message, fix,
                             [proc["pid"]], proc["gpus"], instance))
    return findings, placed


def _check_environment(view, proc, held, instance):
    env = proc.get("environment")
    if not env:
        return []
    host = view.host
    subject = _subject(proc)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return []
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    out = []
    if entries and all(e.isdigit() for e in entries):
        if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            out.append(_finding(
                host, "warning", "cuda_device_order", subject,
                "%s has CUDA_VISIBLE_DEVICES=%s without CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA counts GPUs fastest "
                "first, not in the PCI order of nvidia-smi, NVML and the topology, so the indices may name "
                "other GPUs than intended" % (subject, visible),
                "set CUDA_DEVICE_ORDER=PCI_BUS_ID where CUDA_VISIBLE_DEVICES is set (the vllm role's units do)",
                [proc["pid"]], proc["gpus"], instance))
        else:
            named = set(int(e) for e in entries)
            stray = [g for g in held if g.get("index") is not None and g["index"] not in named]
            if stray:
                out.append(_finding(
                    host, "warning", "cuda_visible_mismatch", subject,
                    "%s holds %s, which its CUDA_VISIBLE_DEVICES=%s does not name (in PCI order)"
                    % (subject, view.label(stray), visible),
                    "check the unit's environment; GPU indices in CUDA_VISIBLE_DEVICES are PCI order with "
                    "CUDA_DEVICE_ORDER=PCI_BUS_ID", [proc["pid"]], proc["gpus"], instance))
    elif entries and all(e.startswith("GPU-") for e in entries):
        named = set(entries)
        stray = [g for g in held if g.get("uuid") and g["uuid"] not in named]
        if stray:
            out.append(_finding(
                host, "warning", "cuda_visible_mismatch", subject,
                "%s holds %s, whose UUID its CUDA_VISIBLE_DEVICES does not name" % (subject, view.label(stray)),
                "check the process's environment", [proc["pid"]], proc["gpus"], instance))
    return out


# ---------------------------------------------------------------- the plan


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
            host_opts["pp_size"] //= nodes
            host_opts["max_instances_per_host"] = 1
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


def check_plan(view, deployed, groups, process_source):
    """Drift between the deployed plan and today: GPUs gone or added, NUMA
    layout changed, instances not running where planned, and what a
    redeploy would change. Returns (findings, instances state, today's plan)."""
    host = view.host
    instances, options, unused = deployed_for_host(deployed, host)
    findings = []
    states = []
    planned = set()
    by_gpus = {}
    for group in groups:
        for bus in group["gpus"]:
            by_gpus[bus] = group
    for inst in instances:
        name = inst.get("name") or "instance"
        keys = _instance_gpus(inst)
        planned.update(keys)
        state = {"name": name, "gpus": keys, "numa_nodes": list(inst.get("numa_nodes") or []),
                 "cpus": inst.get("cpus"), "state": "running", "pids": []}
        gone = [k for k in keys if not view.gpu(k)]
        if gone:
            findings.append(_finding(
                host, "critical", "gpu_missing", name,
                "instance %s is planned on GPU(s) %s, which this host no longer has" % (name, ", ".join(gone)),
                "find out why the GPU is gone (nvidia-smi, dmesg); redeploy to plan without it", gpus=gone, instance=name))
            state["state"] = "gpu missing"
        moved = []
        for k in keys:
            gpu = view.gpu(k)
            if gpu and gpu.get("numa_node") is not None and gpu["numa_node"] not in (inst.get("numa_nodes") or []):
                moved.append("%s now on %s" % (view.label([gpu]), _node_word([gpu["numa_node"]])))
        cpu_note = None
        if inst.get("cpus"):
            try:
                want = set(parse_cpulist(inst["cpus"]))
            except ValueError:
                want = set()
            have = set()
            for node in inst.get("numa_nodes") or []:
                have |= view.node_cpus.get(int(node), set())
            if want and not want <= have:
                cpu_note = "its CPUs %s are no longer all on %s (today: %s)" % (
                    inst["cpus"], _node_word(inst.get("numa_nodes") or []), format_cpulist(have) or "no CPUs")
        if moved or cpu_note:
            parts = moved + ([cpu_note] if cpu_note else [])
            findings.append(_finding(
                host, "error", "numa_layout_changed", name,
                "instance %s was planned on %s, but %s (NPS/SNC or BIOS change?)" % (
                    name, _node_word(inst.get("numa_nodes") or []), "; ".join(parts)),
                "redeploy: the plan and the unit's binding are computed from today's layout", gpus=keys, instance=name))
            if state["state"] == "running":
                state["state"] = "layout changed"
        if process_source is not None and not gone:
            holders = []
            for k in keys:
                gpu = view.gpu(k)
                group = by_gpus.get(gpu.get("pci_bus_id")) if gpu else None
                if group is not None and group not in holders:
                    holders.append(group)
            exact = [g for g in holders if set(g["gpu_ids"]) == set(view.gpu(k)["id"] for k in keys)]
            if exact:
                exact[0]["instance"] = name
                state["pids"] = exact[0]["pids"]
            elif not holders:
                findings.append(_finding(
                    host, "error", "instance_not_running", name,
                    "instance %s (planned on %s) is not running: no process holds its GPUs" % (name, _describe(view, keys)),
                    "look at its unit: systemctl status gpufleet-%s (the vllm role's default unit prefix); "
                    "journalctl -u gpufleet-%s" % (name, name), gpus=keys, instance=name))
                state["state"] = "not running"
            else:
                other = "; ".join("%s holds %s" % (_group_subject(g), _describe(view, g["gpus"])) for g in holders)
                findings.append(_finding(
                    host, "error", "instance_misplaced", name,
                    "instance %s is planned on %s, but %s" % (name, _describe(view, keys), other),
                    "stop what runs on the instance's GPUs and restart the instance's unit",
                    [p for g in holders for p in g["pids"]], keys, name))
                state["state"] = "elsewhere"
        states.append(state)
    if process_source is not None:
        for group in groups:
            if group["instance"] is None and instances:
                findings.append(_finding(
                    host, "warning", "unplanned_process", _group_subject(group),
                    "%s holds %s, which no planned instance explains" % (_group_subject(group), _describe(view, group["gpus"])),
                    "stop it, or add its work to the plan", group["pids"], group["gpus"]))
    known_unused = set(_gpu_key(u) for u in unused) | set(u.get("id") for u in unused)
    if instances:
        added = [g for g in view.gpus if (g.get("pci_bus_id") or g["id"]) not in planned
                 and g["id"] not in planned and g["id"] not in known_unused and g.get("pci_bus_id") not in known_unused]
        if added:
            findings.append(_finding(
                host, "warning", "gpu_added", host,
                "%s %s not in the deployed plan" % (view.label(added), "is" if len(added) == 1 else "are"),
                "redeploy to put it to use", gpus=[g["id"] for g in added]))
    today = None
    if instances and options.get("tp_size"):
        try:
            today = placement.plan_host(view.facts, host=host, **options)
        except ValueError as exc:
            findings.append(_finding(
                host, "error", "replan_failed", host,
                "today's topology cannot be planned with the deployed options (%s): %s" % (
                    ", ".join("%s=%s" % kv for kv in sorted(options.items())), exc),
                "fix the host (or the options) before the next deploy"))
        if today is not None:
            findings.extend(_replan_findings(view, instances, today))
    return findings, states, today


def _replan_findings(view, instances, today):
    host = view.host
    out = []
    groups = today["groups"]
    for ordinal in range(max(len(instances), len(groups))):
        inst = instances[ordinal] if ordinal < len(instances) else None
        group = groups[ordinal] if ordinal < len(groups) else None
        name = inst.get("name") if inst else "new instance %d" % ordinal
        if inst is None:
            out.append(_finding(
                host, "warning", "replan_differs", name,
                "a redeploy would add an instance on %s (%s, CPUs %s)" % (
                    _describe(view, [_gpu_key(g) for g in group["gpus"]]), _node_word(group["numa_nodes"]), group["cpus"]),
                "redeploy to use it", gpus=[_gpu_key(g) for g in group["gpus"]]))
            continue
        if group is None:
            out.append(_finding(
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
            changes.append("NUMA nodes %s -> %s" % (_ints(inst.get("numa_nodes") or []), _ints(group["numa_nodes"])))
        if inst.get("cpus") != group["cpus"]:
            changes.append("CPUs %s -> %s" % (inst.get("cpus"), group["cpus"]))
        if inst.get("memory_policy") != group["memory_policy"]:
            changes.append("memory policy %s -> %s" % (inst.get("memory_policy"), group["memory_policy"]))
        out.append(_finding(
            host, "warning", "replan_differs", name,
            "a redeploy would change instance %s: %s" % (name, "; ".join(changes)),
            "redeploy (playbooks/deploy_inference.yml) to apply today's plan", gpus=old_gpus, instance=name))
    return out


# ---------------------------------------------------------------- the host


def audit_host(facts, processes, host=None, deployed=None, memory_threshold=DEFAULT_MEMORY_THRESHOLD):
    """Audit one host; see the module docstring. ValueError on bad input."""
    host = host or facts.get("hostname") or "host"
    if not isinstance(memory_threshold, int) or isinstance(memory_threshold, bool) or not 0 <= memory_threshold <= 100:
        raise ValueError("memory_threshold: must be a percentage 0-100 (got %s)" % show(memory_threshold))
    view = HostView(facts, host)
    processes = processes or {"source": None, "processes": [], "warnings": []}
    procs = processes.get("processes") or []
    findings = []
    if processes.get("source") is None and any(g.get("vendor") == "nvidia" for g in view.gpus):
        findings.append(_finding(
            host, "info", "processes_unknown", host,
            "which processes hold the GPUs is unknown (neither NVML nor nvidia-smi answered, or a capture "
            "recorded without a process list)",
            "install nvidia-ml-py or nvidia-smi on the host; record captures with playbooks/record_topology.yml"))
    groups = process_groups(view, procs)
    states = []
    today = None
    if deployed is not None:
        plan_findings, states, today = check_plan(view, deployed, groups, processes.get("source"))
    else:
        plan_findings = []
    instance_of = {}
    for group in groups:
        for pid in group["pids"]:
            instance_of[pid] = group["instance"]
    placed = {}
    for proc in procs:
        proc_findings, where = check_process(view, proc, memory_threshold, instance_of.get(proc["pid"]))
        findings.extend(proc_findings)
        placed[proc["pid"]] = where
    for group in groups:
        findings.extend(check_group(view, group))
        where = [placed[p] for p in group["pids"] if p in placed]
        group["misplaced"] = group["misplaced"] or any(w["misplaced"] for w in where)
        group["cpu_nodes"] = sorted(set(n for w in where for n in (w["cpu_nodes"] or [])))
        memory_nodes = [w["memory_node"] for w in where if w["memory_node"] is not None]
        group["memory_node"] = memory_nodes[0] if memory_nodes else None
    findings.extend(plan_findings)
    findings.sort(key=lambda f: (-severity_rank(f["severity"]), f["code"], f["subject"]))
    counts = dict((s, 0) for s in SEVERITIES)
    for f in findings:
        counts[f["severity"]] += 1
    worst = max((f["severity"] for f in findings), key=severity_rank) if findings else None
    return {
        "host": host,
        "findings": findings,
        "groups": groups,
        "instances": states,
        "today_plan": today,
        "counts": counts,
        "worst": worst,
        "process_source": processes.get("source"),
        "warnings": list(processes.get("warnings") or []),
    }
