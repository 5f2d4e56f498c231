# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the controller keeps of a module result that came from a host.

A module result from a host is data: a compromised host can return any
JSON it likes. Every top-level key of a result and every key under
ansible_facts can become a variable on the controller (facts beat the
inventory), so only the fields the collection defines are kept, each
checked against its spec in MODULE_FIELDS (one table per module), and
the rest is dropped. One checker for every such result:

- keep_defined(): numa_facts. Unknown keys are dropped with a warning that
  names them (cut and escaped), never their values; a defined field of the
  wrong shape fails the result.
- audit_module_result(): numa_audit. A field of the wrong shape fails that
  host with a message naming the field ("host gpu-a: numa_audit
  result.processes[3].pid: must be an integer >= 0 (got 'x')"), never a
  TypeError.
- audit_results(): the host results a playbook hands the report filters;
  one of the wrong shape becomes a result_invalid finding, so every other
  host still renders.

A spec is one of: a type name ("str", "text", "int", "signed", "bool",
"cpulist", "argv", "severity", "source", "unit_source", "capture",
"bandwidth", "any"), that name with "?" (null allowed), ("list", item,
max items), ("map", value, max entries[, "node"]) with string keys (node ids: digits), or ("dict",
{key: spec}, required keys); a container kind with "?" allows null. Dicts
keep only their spec's keys. Pure functions over plain dicts; controller
only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit.locality import SEVERITIES
from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth.checks import check_bandwidth
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import validate_capture

MAX_ITEMS = 4096        # GPUs, NUMA nodes, processes, findings of one host
MAX_TEXT = 4096         # one name, message or cpulist
MAX_ARGV_WORD = 131072  # the kernel's MAX_ARG_STRLEN
MAX_INT = 2 ** 63 - 1

_GPU = ("dict", {
    "id": "str", "index": "int?", "pci_bus_id": "str?", "uuid": "str?", "name": "str?", "vendor": "str?",
    "numa_node": "int?", "local_cpus": "cpulist?", "memory_mb": "int?", "memory_numa_node": "int?",
    # read by no audit code, only passed on (the planner checks what it reads)
    "mig_mode": "any", "pcie": "any",
}, ("id",))
_NODE = ("dict", {"id": "int", "cpus": "cpulist?", "usable_cpus": "cpulist?", "memory_mb": "int?", "socket": "int?",
                  "kind": "str?", "distances": ("map", "int?", MAX_ITEMS)}, ("id",))
_SOCKET = ("dict", {"id": "int", "cpus": "cpulist?", "numa_nodes": ("list", "int", MAX_ITEMS)}, ("id",))
_NIC = ("dict", {"id": "str", "numa_node": "int?", "interfaces": ("list", "str", MAX_ITEMS), "local_cpus": "cpulist?",
                 "pci_bus_id": "str?", "vendor": "str?", "pcie": "any", "gpu_links": "any"}, ("id",))
_TOPOLOGY_FIELDS = {
    "schema_version": "int?", "hostname": "str?", "sources": ("list", "str", 16),
    "sockets": ("list", _SOCKET, MAX_ITEMS), "numa_nodes": ("list", _NODE, MAX_ITEMS),
    "gpus": ("list", _GPU, MAX_ITEMS), "nics": ("list", _NIC, MAX_ITEMS),
    "links": ("map", ("map", "str", MAX_ITEMS), MAX_ITEMS), "warnings": ("list", "str", MAX_ITEMS),
    "smt_siblings": "any",
}
TOPOLOGY = ("dict", _TOPOLOGY_FIELDS, ("gpus",))
PROCESS = ("dict", {
    "pid": "int", "name": "str?", "argv": ("list", "argv", MAX_ITEMS), "ppid": "int?", "session": "int?",
    "readable": "bool", "gpus": ("list", "str", MAX_ITEMS), "cpus_allowed": "cpulist?", "mems_allowed": "cpulist?",
    "memory_kb": ("map?", "int", MAX_ITEMS, "node"), "memory_policies": ("map?", "int", MAX_ITEMS), "memory_policy": "str?",
    "environment": ("map?", "str", 16),
}, ("pid", "gpus"))
_UNIT_STATE = ("dict", {"id": "str", "load_state": "str?", "active_state": "str?", "sub_state": "str?", "main_pid": "int?",
                        "started_monotonic_us": "int?"}, ("id",))
UNIT_STATES = ("dict?", {"source": "unit_source?", "units": ("map", _UNIT_STATE, 256), "missing": "str?"}, ())
_FINDING = ("dict", {
    "host": "str", "severity": "severity", "code": "str", "subject": "str", "message": "str", "fix": "str",
    "pids": ("list", "int", MAX_ITEMS), "gpus": ("list", "str", MAX_ITEMS), "instance": "str?",
}, ("host", "severity", "code", "subject", "message", "fix"))
_GROUP = ("dict", {
    "key": "int", "name": "str", "leader": "int", "pids": ("list", "int", MAX_ITEMS),
    "gpus": ("list", "str", MAX_ITEMS), "gpu_ids": ("list", "str", MAX_ITEMS),
    "unknown_gpus": ("list", "str", MAX_ITEMS), "numa_nodes": ("list", "int", MAX_ITEMS),
    "sockets": ("list", "str", MAX_ITEMS), "instance": "str?", "misplaced": "bool",
    "cpu_nodes": ("list", "int", MAX_ITEMS), "memory_node": "int?",
}, ("key", "name", "leader", "pids"))
_INSTANCE = ("dict", {
    "name": "str", "gpus": ("list", "str", MAX_ITEMS), "numa_nodes": ("list", "int", MAX_ITEMS), "cpus": "str?",
    "state": "str?", "problem": "str?", "unit": "str?", "unit_state": "str?", "engine": "str?",
    "pids": ("list", "int", MAX_ITEMS),
}, ("name",))
HOST_RESULT = ("dict", {
    "host": "str", "topology": ("dict?", _TOPOLOGY_FIELDS, ()), "findings": ("list", _FINDING, MAX_ITEMS),
    "groups": ("list", _GROUP, MAX_ITEMS), "instances": ("list", _INSTANCE, MAX_ITEMS),
    "counts": ("map", "int", 8), "worst": "severity?", "process_source": "source?",
    "warnings": ("list", "str", MAX_ITEMS), "processes": ("list", PROCESS, MAX_ITEMS), "unit_states": UNIT_STATES,
    "today_plan": "any", "summary": ("list", "any", MAX_ITEMS), "capture": "any",
    "plan_file": "str?", "capture_file": "str?", "changed": "bool", "failed": "bool", "msg": "str?",
    "bandwidth": "bandwidth?",
}, ("host", "findings"))


# Keys Ansible itself puts in any module result (errors, warnings, the
# module's echo of its arguments). None of them becomes a variable.
GENERIC_FIELDS = {
    "changed": "bool",
    "failed": "bool",
    "skipped": "bool",
    "msg": "text",
    "warnings": ("list", "any", MAX_ITEMS),
    "deprecations": ("list", "any", MAX_ITEMS),
    "exception": "any",  # text, or ansible-core 2.19's error summary
    "module_stdout": "text",
    "module_stderr": "text",
    "rc": "signed",
    "invocation": ("map", "any", MAX_ITEMS),
    "_ansible_parsed": "bool",
}

# numa_facts: its RETURN (ansible_facts.numa_topology and numa_summary, summary, capture).
NUMA_FACTS_FIELDS = dict(GENERIC_FIELDS, ansible_facts=("map", "any", MAX_ITEMS), summary=("list", "any", MAX_ITEMS),
                         capture=("map", "any", MAX_ITEMS))
NUMA_FACTS_FACTS = {"numa_topology": ("map", "any", MAX_ITEMS), "numa_summary": ("list", "text", MAX_ITEMS)}

# numa_audit: what the module reads on the target (its findings are the
# controller's: module_utils/audit/result.py).
NUMA_AUDIT_FIELDS = {
    "topology": TOPOLOGY, "process_source": "source?", "processes": ("list", PROCESS, MAX_ITEMS),
    "process_warnings": ("list", "str", MAX_ITEMS), "capture": "capture", "unit_states": UNIT_STATES,
    "warnings": GENERIC_FIELDS["warnings"],  # Ansible's own; checked, not kept as the audit's
}
NUMA_AUDIT_REQUIRED = ("topology",)

# numa_preflight: what the module reads (its findings are the controller's: module_utils/preflight/findings.py).
_PROBE = ("dict", {"instance": "str", "command": "text", "output": "str?", "skipped": "str?"}, ("instance",))
PREFLIGHT_READINGS = ("dict", {
    "numactl": "str?", "numa_balancing": "str?", "cpuset": ("dict?", {"path": "str", "mems": "cpulist"}, ("path", "mems")),
    "persistence": ("dict?", {"source": "str", "gpus": ("map", "bool", MAX_ITEMS)}, ("source", "gpus")),
    "nvswitches": ("list?", "str", MAX_ITEMS), "fabric_manager": ("map?", "str", 16), "systemd": "bool?",
    "probes": ("list", _PROBE, MAX_ITEMS), "warnings": ("list", "str", MAX_ITEMS)}, ("probes",))
NUMA_PREFLIGHT_FIELDS = dict(GENERIC_FIELDS, readings=PREFLIGHT_READINGS, topology=("map", "any", MAX_ITEMS), capture=("map", "any", MAX_ITEMS))

# numa_bandwidth: the host's figures (docs/bandwidth.md), checked whole.
NUMA_BANDWIDTH_FIELDS = dict(GENERIC_FIELDS, bandwidth="bandwidth")

# The table: per module, its top-level fields and its facts.
MODULE_FIELDS = {
    "numa_facts": {"fields": NUMA_FACTS_FIELDS, "facts": NUMA_FACTS_FACTS},
    "numa_audit": {"fields": NUMA_AUDIT_FIELDS, "facts": {}},
    "numa_bandwidth": {"fields": NUMA_BANDWIDTH_FIELDS, "facts": {}},
    "numa_preflight": {"fields": NUMA_PREFLIGHT_FIELDS, "facts": {}},
}

SHOW_KEYS = 5


class ShapeError(ValueError):
    """A value of the wrong shape: path, rule and the value shown."""

    def __init__(self, path, rule, got=None):
        # got None: the rule is a whole message that names the path itself
        ValueError.__init__(self, rule if got is None else "%s: %s (got %s)" % (path, rule, got))
        self.path, self.rule, self.got = path, rule, got


def _fail(path, rule, value):
    raise ShapeError(path, rule, show(value))


def _scalar(path, kind, value):
    if kind == "any":
        return value
    if kind in ("str", "text", "argv", "cpulist"):
        limit = MAX_ARGV_WORD if kind == "argv" else MAX_TEXT
        if not isinstance(value, str):
            _fail(path, "must be a string", value)
        if kind != "text" and len(value) > limit:
            _fail(path, "must be at most %d characters" % limit, value)
        if kind == "cpulist" and value:
            try:
                parse_cpulist(value)
            except ValueError:
                _fail(path, "must be a CPU or node list like 0-3,8", value)
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
            _fail(path, "must be an integer >= 0", value)
        return value
    if kind == "signed":
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(path, "must be an integer", value)
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            _fail(path, "must be true or false", value)
        return value
    if kind == "severity":
        if value not in SEVERITIES:
            _fail(path, "must be one of %s" % ", ".join(SEVERITIES), value)
        return value
    if kind == "source":
        if value not in ("nvml", "nvidia-smi"):
            _fail(path, "must be nvml, nvidia-smi or null", value)
        return value
    if kind == "unit_source":
        if value != "systemd":
            _fail(path, "must be systemd or null", value)
        return value
    if kind == "capture":
        try:
            return validate_capture(value, path)
        except ValueError as exc:
            raise ShapeError(path, str(exc))
    if kind == "bandwidth":
        try:
            return check_bandwidth(path, value)
        except ValueError as exc:
            raise ShapeError(path, str(exc))
    raise AssertionError("unknown spec %r" % kind)


def check(path, value, spec):
    """value checked against spec (module docstring); ShapeError names the path."""
    if isinstance(spec, str):
        if spec.endswith("?") or spec == "any":
            return None if value is None else _scalar(path, spec.rstrip("?"), value)
        if value is None:
            _fail(path, "must not be null", value)
        return _scalar(path, spec, value)
    kind = spec[0]
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    if kind == "list":
        if not isinstance(value, list):
            _fail(path, "must be a list", value)
        if len(value) > spec[2]:
            raise ShapeError(path, "must hold at most %d items" % spec[2], "%d items" % len(value))
        return [check("%s[%d]" % (path, i), item, spec[1]) for i, item in enumerate(value)]
    if kind == "map":
        if not isinstance(value, dict):
            _fail(path, "must be a mapping", value)
        if len(value) > spec[2]:
            raise ShapeError(path, "must hold at most %d entries" % spec[2], "%d entries" % len(value))
        out = {}
        for key, item in value.items():
            if not isinstance(key, (str, int)) or isinstance(key, bool) or len(str(key)) > MAX_TEXT:
                _fail(path, "keys must be strings", key)
            if len(spec) > 3 and not str(key).isdigit():
                _fail(path, "keys must be NUMA node ids (digits)", key)
            out[str(key)] = check("%s[%s]" % (path, show(str(key))), item, spec[1])
        return out
    return _check_dict(path, value, spec)


def _check_dict(path, value, spec):
    if not isinstance(value, dict):
        _fail(path, "must be a mapping", value)
    fields, required = spec[1], spec[2]
    for key in required:
        if key not in value:
            _fail(path, "must have the field %s" % key, sorted(str(k) for k in value)[:8])
    return dict((key, check("%s.%s" % (path, key), value[key], fields[key])) for key in fields if key in value)


def _has_type(value, spec):
    """Whether value passes spec."""
    try:
        check("value", value, spec)
    except ShapeError:
        return False
    return True


# ------------------------------------------------------------ numa_facts


def _dropped_message(module, where, keys):
    names = sorted(show(key, 40) for key in keys)
    more = "" if len(names) <= SHOW_KEYS else " and %d more" % (len(names) - SHOW_KEYS)
    return ("%s: the host's result holds %s the collection does not define; dropped (a result from a host "
            "is data, never a variable): %s%s" % (module, where, ", ".join(names[:SHOW_KEYS]), more))


def _pick(mapping, fields, prefix, problems):
    """(the defined fields of mapping that pass their spec, the other keys);
    a defined field of the wrong shape is added to problems."""
    kept, unknown = {}, []
    for key, value in mapping.items():
        if not isinstance(key, str) or key not in fields:
            unknown.append(key)
            continue
        try:
            kept[key] = check(prefix + key, value, fields[key])
        except ShapeError as exc:
            problems.append(str(exc) if exc.got is None else "%s %s (got %s)" % (exc.path, exc.rule, exc.got))
    return kept, unknown


def keep_defined(result, module, fields=None, facts=None, controller_facts=None):
    """(kept result, warnings) from a host's module result.

    fields: top-level key -> spec; facts: key under ansible_facts -> spec
    (both default to the module's MODULE_FIELDS). A defined field of the
    wrong shape fails the result (the module never sends one); unknown keys
    are dropped with a warning. A failed result keeps no facts.
    controller_facts: facts the controller itself added (interpreter
    discovery), kept as they are.
    """
    table = MODULE_FIELDS.get(module, {})
    fields = table.get("fields", {}) if fields is None else fields
    facts = table.get("facts", {}) if facts is None else facts
    if not isinstance(result, dict):
        return {"failed": True, "msg": "%s: the host's result must be a mapping (got %s)" % (module, show(result))}, []
    problems, warnings = [], []
    kept, unknown = _pick(result, fields, "", problems)
    if unknown:
        warnings.append(_dropped_message(module, "top-level keys", unknown))
    kept_facts = {}
    if "ansible_facts" in kept:
        host_facts = dict((key, value) for key, value in kept.pop("ansible_facts").items()
                          if key not in (controller_facts or {}))
        kept_facts, unknown = _pick(host_facts, facts, "ansible_facts.", problems)
        if unknown:
            warnings.append(_dropped_message(module, "ansible_facts", unknown))
    if "warnings" in kept:
        # Text, or what ansible-core 2.19's decoder made of the module's
        # warnings (its own summary objects); no other JSON value.
        kept["warnings"] = [warning for warning in kept["warnings"] if isinstance(warning, str)
                            or not isinstance(warning, (dict, list, int, float, type(None)))]
    if problems:
        kept.update(failed=True, msg="%s: the host's result is not what the module returns: %s"
                    % (module, "; ".join(problems[:SHOW_KEYS])))
    if kept.get("failed"):
        kept_facts = {}
    kept_facts.update(controller_facts or {})
    if kept_facts:
        kept["ansible_facts"] = kept_facts
    return kept, warnings


# ------------------------------------------------------------ numa_audit


def audit_module_result(module, host):
    """(facts, processes, capture or None) from a numa_audit module result,
    only the fields MODULE_FIELDS defines for it; ValueError names the host
    and the field."""
    try:
        kept = check("result", module, ("dict", MODULE_FIELDS["numa_audit"]["fields"], NUMA_AUDIT_REQUIRED))
    except ShapeError as exc:
        raise ValueError("host %s: numa_audit %s" % (host, exc))
    processes = {"source": kept.get("process_source"), "processes": kept.get("processes") or [],
                 "warnings": kept.get("process_warnings") or [], "unit_states": kept.get("unit_states")}
    return kept["topology"], processes, kept.get("capture")


def audit_host_result(result, index):
    """A host result as the report filters read it, or ValueError naming
    the result (by host where it has one) and the field."""
    name = result.get("host") if isinstance(result, dict) and isinstance(result.get("host"), str) else None
    try:
        kept = check("results[%d]" % index, result, HOST_RESULT)
    except ShapeError as exc:
        raise ValueError("%s%s" % ("host %s: " % show(name) if name else "", exc))
    if not kept["host"]:
        raise ValueError("results[%d].host: must not be empty (got '')" % index)
    return kept


def invalid_result(result, index, problem):
    """A host result that cannot be read, as a result that says so: one
    error finding (code result_invalid) and nothing else of it."""
    name = result.get("host") if isinstance(result, dict) else None
    host = name if isinstance(name, str) and name and len(name) <= 255 else "results[%d]" % index
    finding = {"host": host, "severity": "error", "code": "result_invalid", "subject": host,
               "message": "the audit result of %s is not a numa_audit host result: %s" % (host, problem),
               "fix": "rerun the audit on this host; a result of this shape did not come from gpufleet.numa.numa_audit",
               "pids": [], "gpus": [], "instance": None}
    counts = dict((s, 0) for s in SEVERITIES)
    counts["error"] = 1
    return {"host": host, "invalid": problem, "findings": [finding], "counts": counts, "worst": "error",
            "groups": [], "instances": [], "topology": {}, "warnings": [], "process_source": None}


def audit_results(results):
    """Each host result checked (audit_host_result); one that fails becomes
    invalid_result(), so the other hosts still render. ValueError when
    results is not a list."""
    if not isinstance(results, list):
        raise ValueError("audit results must be a list of host results, got %s" % type(results).__name__)
    checked = []
    for i, result in enumerate(results):
        try:
            checked.append(audit_host_result(result, i))
        except ValueError as exc:
            checked.append(invalid_result(result, i, str(exc)))
    return checked
