# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the audit may say about a planned instance's state, and only that
(docs/audit.md, "Instance state"): running, stopped, failed or unknown,
from the processes seen holding its GPUs and its unit's systemd state.
An instance nothing was seen of is unknown, a finding of its own, never
counted as running.

Pure functions over plain dicts; controller only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit.locality import finding
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.units import UNIT_NAME, UNIT_NAME_RULE, check_unit_names
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show

DEFAULT_UNIT_PREFIX = "gpufleet-"
STATES = ("running", "stopped", "failed", "unknown")
ENGINE_KEY = "GPUFLEET_ENGINE"


def instance_unit(inst, unit_prefix=DEFAULT_UNIT_PREFIX):
    """The unit of a planned instance: the kept plan's deployed.unit, else
    <unit_prefix><name>.service (the vllm role's naming). ValueError when
    deployed.unit is not a unit name."""
    deployed = inst.get("deployed")
    if isinstance(deployed, dict) and deployed.get("unit") is not None:
        if not isinstance(deployed["unit"], str) or not UNIT_NAME.fullmatch(deployed["unit"]):
            raise ValueError("instance %s: deployed.unit %s (got %s)" % (show(inst.get("name")), UNIT_NAME_RULE,
                                                                         show(deployed["unit"])))
        return deployed["unit"]
    return "%s%s.service" % (unit_prefix, inst.get("name") or "instance")


def planned_units(instances, unit_prefix=DEFAULT_UNIT_PREFIX):
    """The units of the instances, each checked (units.UNIT_NAME) before it
    may reach a command line; ValueError names the instance."""
    out = []
    for inst in instances:
        unit = instance_unit(inst, unit_prefix)
        if not UNIT_NAME.fullmatch(unit):
            raise ValueError("instance %s: unit name %s (got %s)" % (show(inst.get("name")), UNIT_NAME_RULE, show(unit)))
        if unit not in out:
            out.append(unit)
    return check_unit_names(out)


def unit_kind(record):
    """(state the unit alone tells or None, its state as text or None).

    active/reloading with a main PID: running; inactive, deactivating or
    not-found: stopped; failed, or activating (auto-restart) (the role's
    units restart on failure only): failed; anything else (activating
    (start), active without a main PID): None, the unit alone cannot tell.
    """
    if not isinstance(record, dict):
        return None, None
    active, sub, load = record.get("active_state"), record.get("sub_state"), record.get("load_state")
    text = "%s (%s)" % (active, sub) if sub else str(active)
    if load == "not-found":
        return "stopped", "not-found"
    if active in ("active", "reloading"):
        pid = record.get("main_pid")
        if isinstance(pid, int) and pid > 0:
            return "running", "%s, main PID %d" % (text, pid)
        return None, text + ", no main PID"
    if active in ("inactive", "deactivating"):
        return "stopped", text
    if active == "failed" or (active == "activating" and sub == "auto-restart"):
        return "failed", text
    return None, text


def unknown_finding(host, name, unit, why):
    """instance_state_unknown: the state of one instance cannot be told;
    the message says what was missing, the fix how to provide it."""
    return finding(
        host, "warning", "instance_state_unknown", name,
        "the state of instance %s is unknown: %s" % (name, why),
        "give the audit a process source (nvidia-ml-py or nvidia-smi on the host) or the unit's state (audit the "
        "live host, under systemd, with the unit %s; a replayed capture holds no unit state)" % unit,
        instance=name)


def unknown_reason(process_source, problem, unit, unit_text, units_missing):
    """Why neither the processes nor the unit tell the state, in words."""
    if problem == "gpu missing":
        seen = "its GPUs are gone, so no process can be matched to it"
    elif problem == "elsewhere":
        seen = "processes hold some of its GPUs, but none holds exactly them"
    elif process_source is None:
        seen = "no process source (neither NVML nor nvidia-smi answered, or a capture without a process list)"
    else:
        seen = "the processes do not tell"
    if unit_text is not None:
        return "%s, and its unit %s is %s" % (seen, unit, unit_text)
    return "%s, and no state of its unit %s (%s)" % (seen, unit, units_missing or "not read")


def engine_drift(host, inst, name, engines):
    """engine_drift findings: the running processes' GPUFLEET_ENGINE differs
    from the kept plan's deployed.engine (no finding without either)."""
    deployed = inst.get("deployed")
    want = deployed.get("engine") if isinstance(deployed, dict) else None
    if not isinstance(want, str) or not want:
        return []
    other = sorted(e for e in engines if e != want)
    if not other:
        return []
    seen = " and ".join(show(e, 80).strip("'\"") for e in other)
    return [finding(
        host, "error", "engine_drift", name,
        "instance %s runs %s, the kept plan says %s was deployed" % (name, seen, show(want, 80).strip("'\"")),
        "redeploy: the role restarts every instance whose engine changed", instance=name)]
