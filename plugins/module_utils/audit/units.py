# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The systemd state of the planned units, read on the target.

The action plugin knows the plan and sends only unit names (checked by
UNIT_NAME here as well, before they reach a command line). One call:

    systemctl show --property=Id,LoadState,ActiveState,SubState,MainPID,ExecMainStartTimestampMonotonic UNIT...

only where systemd manages the machine (/run/systemd/system exists, as
sd_booted(3) checks) and systemctl is found; anywhere else nothing runs
and `missing` says why. systemctl prints one block of NAME=value lines
per unit, in the order asked, blocks separated by an empty line, the
properties in its own order. Never raises; standard library only (runs
on targets).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show

UNIT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,240}\.service")  # fullmatch: no trailing newline
UNIT_NAME_RULE = "must be a systemd service name of [A-Za-z0-9_.:@-] ending in .service, not starting with - or ."
MAX_UNITS = 256
MAX_SHOW_CHARS = 64 * 1024  # about 200 characters a unit
SHOW_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "MainPID", "ExecMainStartTimestampMonotonic")
SYSTEMD_RUNTIME = "/run/systemd/system"
_STATE_WORD = re.compile(r"[a-z][a-z-]{0,31}")
_NUMBER = re.compile(r"[0-9]{1,20}")


def check_unit_names(units):
    """The unit names, each matching UNIT_NAME; ValueError names the first
    that does not (the value cut and escaped)."""
    if not isinstance(units, list) or len(units) > MAX_UNITS:
        raise ValueError("units: must be a list of at most %d unit names (got %s)" % (
            MAX_UNITS, "%d names" % len(units) if isinstance(units, list) else type(units).__name__))
    for position, unit in enumerate(units):
        if not isinstance(unit, str) or not UNIT_NAME.fullmatch(unit):
            raise ValueError("units[%d]: %s (got %s)" % (position, UNIT_NAME_RULE, show(unit)))
    return list(units)


def show_command(units):
    """The one systemctl command line for the (checked) unit names."""
    return "systemctl show --property=%s %s" % (",".join(SHOW_PROPERTIES), " ".join(check_unit_names(units)))


def _block_state(fields):
    """One unit's record from its NAME=value fields; None when it has no Id."""
    if "Id" not in fields or not UNIT_NAME.fullmatch(fields["Id"]):
        return None
    state = {"id": fields["Id"]}
    for key, name in (("LoadState", "load_state"), ("ActiveState", "active_state"), ("SubState", "sub_state")):
        value = fields.get(key)
        state[name] = value if value is not None and _STATE_WORD.fullmatch(value) else None
    for key, name in (("MainPID", "main_pid"), ("ExecMainStartTimestampMonotonic", "started_monotonic_us")):
        value = fields.get(key)
        state[name] = int(value) if value is not None and _NUMBER.fullmatch(value) else None
    return state


def parse_show(text, units):
    """`systemctl show` output for `units` -> ({unit: state}, warnings).

    state: {id, load_state, active_state, sub_state, main_pid,
    started_monotonic_us}, a field None when absent or not of its form.
    Blocks are matched to the names asked by position when there is one
    block per name (an alias answers with its unit's own Id), else by Id.
    """
    if len(text or "") > MAX_SHOW_CHARS:
        return {}, ["systemctl show printed more than %d characters for %d unit(s); not read" % (MAX_SHOW_CHARS, len(units))]
    blocks = []
    fields = {}
    for line in (text or "").splitlines() + [""]:
        if not line.strip():
            if fields:
                blocks.append(fields)
            fields = {}
            continue
        key, sep, value = line.partition("=")
        if sep and key in SHOW_PROPERTIES:
            fields[key] = value.strip()
    states = [_block_state(b) for b in blocks]
    out = {}
    if len(states) == len(units):
        out = dict((unit, state) for unit, state in zip(units, states) if state is not None)
    else:
        by_id = dict((s["id"], s) for s in states if s is not None)
        out = dict((unit, by_id[unit]) for unit in units if unit in by_id)
    warnings = []
    unread = [unit for unit in units if unit not in out]
    if unread:
        warnings.append("systemctl show gave no state for %d unit(s): %s" % (len(unread), ", ".join(unread[:5])))
    return out, warnings


def read_unit_states(reader, units, root="/"):
    """{source: "systemd" or None, units: {unit: state}, missing: why no
    state was read (None when it was), warnings} for the planned units.
    reader: a LiveReader (not a RecordingReader: a capture holds no unit
    state, a replay is of another moment)."""
    def nothing(why):
        return {"source": None, "units": {}, "missing": why, "warnings": []}

    if not units:
        return nothing("no planned unit to read")
    try:
        command = show_command(units)
    except ValueError as exc:
        return nothing("not read: %s" % exc)
    if root not in (None, "/"):
        return nothing("not read with root=%s (systemctl asks this machine's manager, not the tree)" % root[:200])
    if reader.listdir(SYSTEMD_RUNTIME) is None:
        return nothing("systemd is not the init system here (no %s)" % SYSTEMD_RUNTIME)
    errors = getattr(reader, "errors", None)
    seen = len(errors) if isinstance(errors, list) else 0
    text = reader.run(command)
    if text is None:
        problem = errors[seen:] if isinstance(errors, list) else []
        return nothing("systemctl show failed: %s" % problem[0][:300] if problem else "systemctl not found")
    states, warnings = parse_show(text, units)
    return {"source": "systemd", "units": states, "missing": None, "warnings": warnings}
