# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the controller keeps of a module result that came from a host.

A module result from a host is data: a compromised host can return any
JSON it likes. Every top-level key of a result and every key under
ansible_facts can become a variable on the controller (facts beat the
inventory), so only the fields the collection defines are kept and each
is checked to have its type; the rest is dropped with a warning that
names the keys (cut and escaped), never their values.

Pure functions over plain dicts, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show

# Keys Ansible itself puts in any module result (errors, warnings, the
# module's echo of its arguments). None of them becomes a variable.
GENERIC_FIELDS = {
    "changed": bool,
    "failed": bool,
    "skipped": bool,
    "msg": str,
    "warnings": list,
    "deprecations": list,
    "exception": object,  # text, or ansible-core 2.19's error summary
    "module_stdout": str,
    "module_stderr": str,
    "rc": int,
    "invocation": dict,
    "_ansible_parsed": bool,
}

# numa_facts: its RETURN (ansible_facts.numa_topology, summary, capture).
NUMA_FACTS_FIELDS = dict(GENERIC_FIELDS, ansible_facts=dict, summary=list, capture=dict)
NUMA_FACTS_FACTS = {"numa_topology": dict}

SHOW_KEYS = 5


def _type_name(types):
    types = types if isinstance(types, tuple) else (types,)
    names = {bool: "a boolean", str: "a string", list: "a list", dict: "a mapping", int: "an integer"}
    return " or ".join(names.get(kind, kind.__name__) for kind in types)


def _has_type(value, types):
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) and bool not in types:
        return False  # True is an int to Python, not to this check
    return isinstance(value, types)


def _dropped_message(module, where, keys):
    names = sorted(show(key, 40) for key in keys)
    more = "" if len(names) <= SHOW_KEYS else " and %d more" % (len(names) - SHOW_KEYS)
    return ("%s: the host's result holds %s the collection does not define; dropped (a result from a host "
            "is data, never a variable): %s%s" % (module, where, ", ".join(names[:SHOW_KEYS]), more))


def _pick(mapping, fields, prefix, problems):
    """(the defined fields of mapping that have their type, the other keys);
    a defined field of the wrong type is added to problems."""
    kept, unknown = {}, []
    for key, value in mapping.items():
        if not isinstance(key, str) or key not in fields:
            unknown.append(key)
        elif _has_type(value, fields[key]):
            kept[key] = value
        else:
            problems.append("%s%s must be %s (got %s)" % (prefix, key, _type_name(fields[key]), show(value)))
    return kept, unknown


def keep_defined(result, module, fields, facts, controller_facts=None):
    """(kept result, warnings) from a host's module result.

    fields: top-level key -> type(s); facts: key under ansible_facts ->
    type(s). A defined field of the wrong type fails the result (the
    module never sends one); unknown keys are dropped with a warning. A
    failed result keeps no facts. controller_facts: facts the controller
    itself added (interpreter discovery), kept as they are.
    """
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
