# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Is each process where its GPUs are? Findings about the processes that
hold GPUs, from the topology facts and gpu_processes.read_processes():

- process groups (a session's processes: a server and its TP workers) and
  groups whose GPUs span sockets or NUMA nodes;
- per process: its CPUs, cpuset memory nodes, memory policy and resident
  memory against its GPUs' node(s), and its device environment.

Also what the other audit parts share: severities, the finding record and
HostView (the facts as the audit asks them). Severities, lowest first:
info, warning, error, critical. Pure functions over plain dicts; runs on
the controller only (the module on the target just reads).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.processes import policy_nodes
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import devices

SEVERITIES = ("info", "warning", "error", "critical")
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


def comma_list(values):
    return ",".join(str(v) for v in values)


def node_phrase(nodes):
    nodes = sorted(nodes)
    return ("node %s" if len(nodes) == 1 else "nodes %s") % comma_list(nodes)


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


def finding(host, severity, code, subject, message, fix, pids=(), gpus=(), instance=None):
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
    nodes = comma_list(sorted(nodes))
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


def group_subject(group):
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
                return "%s (%s)" % (view.label(by_node[node][:count]), node_phrase([node])), node
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
        "%s on %s" % (view.label([g for g in known if g.get("numa_node") == n]), node_phrase([n])) for n in nodes)
    suggestion, node = _socket_local_choice(view, len(known))
    if len(labels) > 1:
        sockets_known = all(lab[0] == "socket" for lab in labels)
        where = ("sockets %s" % comma_list(sorted(lab[1] for lab in labels))) if sockets_known else (
            "NUMA nodes %s (sockets unknown: taken as separate sockets)" % comma_list(nodes))
        message = ("%s holds %s across %s (%s): every all-reduce and host copy crosses the inter-socket link"
                   % (group_subject(group), view.label(known), where, per_node))
        if suggestion:
            fix = "run it on the GPUs of one socket, e.g. %s%s, or deploy it with gpufleet.numa.fleet_plan" % (
                suggestion, ", bound to that node (%s)" % _bind_command([node]) if node is not None else "")
        else:
            fix = ("no socket has %d GPUs: use fewer GPUs per group (one socket's), bound to their node, or deploy "
                   "it with gpufleet.numa.fleet_plan (gpufleet_allow_span: true interleaves memory when a group must span)" % len(known))
        severity, code = "critical", "gpus_span_sockets"
    else:
        message = "%s holds %s on several NUMA nodes of one socket (%s)" % (group_subject(group), view.label(known), per_node)
        fix = "use the GPUs of one NUMA node%s" % (", e.g. " + suggestion if suggestion else "")
        severity, code = "warning", "gpus_span_nodes"
    group["misplaced"] = True
    return [finding(host, severity, code, group_subject(group), message, fix, group["pids"], group["gpus"])]


# ---------------------------------------------------------------- processes


def check_process(view, proc, memory_threshold=DEFAULT_MEMORY_THRESHOLD, instance=None, device=None):
    """Findings for one process: CPU and memory locality against its GPUs,
    and its device environment (the visible-device variable of DEVICE, its
    instance's device class; None: the class of the GPUs it holds). Returns
    (findings, placed) where placed says where the process actually is:
    {cpu_nodes, memory_node, misplaced, remote_memory_percent: the share of
    its memory on nodes other than its GPUs', None when unknown}."""
    host = view.host
    subject = _subject(proc)
    findings = []
    placed = {"cpu_nodes": None, "memory_node": None, "misplaced": False, "remote_memory_percent": None}
    held = [view.gpu(b) for b in proc["gpus"] if view.gpu(b)]
    unknown = [b for b in proc["gpus"] if not view.gpu(b)]
    if unknown:
        findings.append(finding(
            host, "warning", "gpu_not_in_topology", subject,
            "%s holds GPU(s) %s that the topology facts do not list (no bus ids in the facts, or a GPU "
            "hidden from the topology sources)" % (subject, ", ".join(unknown)),
            "gather facts with NVML or nvidia-smi --query-gpu available so GPUs are known by bus id",
            [proc["pid"]], proc["gpus"], instance))
    findings.extend(_check_environment(view, proc, held, instance, device or held_device(held)))
    if not proc.get("readable", True):
        findings.append(finding(
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
    if nodes and total:
        placed["remote_memory_percent"] = _percent(sum(kb for n, kb in memory.items() if n not in nodes), total)
    if len(nodes) < len(set(id(g) for g in held)) and any(g.get("numa_node") is None for g in held):
        findings.append(finding(
            host, "info", "gpu_node_unknown", subject,
            "%s holds %s whose NUMA node is unknown: its locality cannot be checked" % (
                subject, view.label([g for g in held if g.get("numa_node") is None])),
            "see the topology warnings (numa_facts)", [proc["pid"]], proc["gpus"], instance))
    if not nodes or len(view.cpu_nodes()) < 2:
        return findings, placed  # one NUMA node: nothing can be on the wrong one
    local = set()
    for node in nodes:
        local |= view.node_cpus.get(node, set())
    reasons = _locality_reasons(view, proc, cpus, local, nodes, memory, memory_threshold)
    problems = [text for text, dummy in reasons]
    severity = max((level for dummy, level in reasons), key=severity_rank, default="info")
    policy = proc.get("memory_policy")
    bound = policy_nodes(policy)
    if not problems:
        return findings, placed
    placed["misplaced"] = True
    unbound = policy in (None, "default", "local") and bound is None
    if unbound and cpus is not None and not cpus <= local:
        problems.append("its memory is not bound (policy %s)" % (policy or "unknown"))
    message = "%s uses %s on %s but %s" % (subject, view.label(held), node_phrase(nodes),
                                           ", ".join(problems[:-1]) + (" and " if len(problems) > 1 else "") + problems[-1])
    fix = "bind it to %s (%s)" % (node_phrase(nodes), _bind_command(nodes))
    if instance:
        fix += "; it is planned instance %s: redeploy it so its unit binds it" % instance
    findings.append(finding(host, severity, "process_locality", subject, message, fix,
                            [proc["pid"]], proc["gpus"], instance))
    return findings, placed


def _locality_reasons(view, proc, cpus, local, nodes, memory, memory_threshold):
    """(reason, severity) pairs: where the process may run or keeps memory
    that is not its GPUs' node(s) (local: those nodes' CPUs)."""
    reasons = []
    if cpus is not None and local and not cpus <= local:
        outside = sorted(cpus - local)
        if not cpus & local:
            reasons.append(("runs only on CPUs %s (%s)" % (format_cpulist(cpus), node_phrase(view.nodes_of(cpus))),
                            "critical"))
        elif view.all_cpus and cpus >= view.all_cpus:
            reasons.append(("may run on all CPUs", "error"))
        else:
            reasons.append(("may run on CPUs %s (%s) besides its own" % (
                format_cpulist(outside), node_phrase(view.nodes_of(outside))), "error"))
    if proc.get("mems_allowed") is not None:
        mems = set(parse_cpulist(proc["mems_allowed"]))
        if mems and not mems & nodes:
            reasons.append(("may allocate memory only on %s (cpuset)" % node_phrase(mems), "critical"))
    policy = proc.get("memory_policy")
    bound = policy_nodes(policy)
    if bound is not None and not set(bound) <= nodes:
        reasons.append(("its memory policy is %s" % policy, "error"))
    total = sum(memory.values())
    if total:
        remote = dict((n, kb) for n, kb in memory.items() if n not in nodes and kb)
        share = _percent(sum(remote.values()), total)
        if share >= max(memory_threshold, 1):
            reasons.append(("%d%% of its memory is on %s" % (share, node_phrase(remote)),
                            "error" if share >= 50 else "warning"))
    return reasons


def held_device(held):
    """The device class of the GPUs a process holds: amd when all are AMD, else nvidia."""
    return "amd" if held and all(g.get("vendor") == "amd" for g in held) else "nvidia"


def _check_environment(view, proc, held, instance, device):
    """The device class's visible-device variable (deploy/vllm/devices.py)
    against the GPUs the process holds; a CPU instance has none to compare.
    NVIDIA indices are PCI order with CUDA_DEVICE_ORDER=PCI_BUS_ID, AMD ones
    (ROCR_VISIBLE_DEVICES) KFD order, the facts' index of both."""
    env = proc.get("environment")
    variables = devices.row(device).visible
    if not env or not variables or not env.get(variables[0]):
        return []
    host = view.host
    subject = _subject(proc)
    name, visible = variables[0], env[variables[0]]
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    out = []
    order = "KFD order" if device == "amd" else "PCI order"
    if entries and all(e.isdigit() for e in entries):
        if device == "nvidia" and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            out.append(finding(
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
                out.append(finding(
                    host, "warning", "%s_mismatch" % name.lower().replace("_devices", ""), subject,
                    "%s holds %s, which its %s=%s does not name (in %s)"
                    % (subject, view.label(stray), name, visible, order),
                    "check the unit's environment; GPU indices in %s are %s%s" % (
                        name, order, " with CUDA_DEVICE_ORDER=PCI_BUS_ID" if device == "nvidia" else ""),
                    [proc["pid"]], proc["gpus"], instance))
    elif device == "nvidia" and entries and all(e.startswith("GPU-") for e in entries):
        named = set(entries)
        stray = [g for g in held if g.get("uuid") and g["uuid"] not in named]
        if stray:
            out.append(finding(
                host, "warning", "cuda_visible_mismatch", subject,
                "%s holds %s, whose UUID its CUDA_VISIBLE_DEVICES does not name" % (subject, view.label(stray)),
                "check the process's environment", [proc["pid"]], proc["gpus"], instance))
    return out
