# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The value rules of the kept plan, the state of record (plan/check.py,
plan/check_device.py, plan/run_record.py, bandwidth/checks.py):
each field's type, range and pattern, and the bounds on every size.
Errors are ValueError("FIELD: RULE (got VALUE)"). Standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.common import names

# Bounds on a kept plan: far above any fleet this collection serves, low
# enough that a tampered file cannot make a run build millions of units.
MAX_HOSTS = 10000
MAX_ENTRIES = 100000              # instances, unused GPUs, warnings: each
MAX_GPUS_PER_HOST = 4096          # GPU indices 0-4095, as vllm_units takes them
MAX_NUMA_NODE = 1023              # Linux's MAX_NUMNODES is 1024
MAX_TEXT = 4096
MAX_NICS = 64

NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,100}"
NAME_RULE = "must be [A-Za-z0-9_.-], starting with a letter or digit"
GPU_ID = r"[A-Za-z0-9][A-Za-z0-9:._-]{0,99}"
GPU_ID_RULE = "must be a GPU id (a PCI bus id, a UUID or GPU<index>)"
CPULIST = r"[0-9]{1,5}(?:-[0-9]{1,5})?(?:,[0-9]{1,5}(?:-[0-9]{1,5})?)*"


def mapping(name, value):
    if not isinstance(value, dict):
        checks.fail(name, "must be a mapping", value)
    return value


def known_fields(name, value, known, required=()):
    """A mapping of KNOWN fields only, holding every REQUIRED one."""
    value = mapping(name, value)
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        checks.fail(name, "has unknown field(s) %s (known: %s)" % (", ".join(unknown), ", ".join(known)), unknown)
    for field in required:
        if field not in value:
            checks.fail(name, "lacks %s" % field, sorted(str(k) for k in value))
    return value


def a_list(name, value, maximum=MAX_ENTRIES, minimum=0):
    if not isinstance(value, list):
        checks.fail(name, "must be a list", value)
    if len(value) > maximum:
        checks.fail(name, "must hold at most %d entries" % maximum, "%d entries" % len(value))
    if len(value) < minimum:
        checks.fail(name, "must hold at least %d entries" % minimum, value)
    return value


def short_text(name, value, allow_none=False):
    """Free text shown in reports (reasons, warnings, links): a bounded string."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        checks.fail(name, "must be a string", value)
    if len(value) > MAX_TEXT:
        checks.fail(name, "must be at most %d characters" % MAX_TEXT, value)
    return value


def cpus(name, value, allow_empty=False):
    if allow_empty and value == "":
        return set()
    checks.text(name, value, CPULIST, "must be a cpulist such as 0-47,96-143")
    try:
        return set(parse_cpulist(value))
    except ValueError as exc:
        checks.fail(name, str(exc), value)


def nodes(name, value, minimum=0):
    out = [integer("%s[%d]" % (name, i), n, 0, MAX_NUMA_NODE)
           for i, n in enumerate(a_list(name, value, MAX_NUMA_NODE + 1, minimum))]
    if out != sorted(set(out)):
        checks.fail(name, "must be a sorted list of distinct NUMA nodes", out)
    return out


def integer(name, value, minimum, maximum):
    """A JSON integer in range (no string of digits, no boolean, no float)."""
    if isinstance(value, bool) or not isinstance(value, int):
        checks.fail(name, "must be an integer", value)
    return checks.integer(name, value, minimum, maximum)


def index(name, value):
    """A GPU index, or None where no source knows it (AMD GPUs read from sysfs alone)."""
    return None if value is None else integer(name, value, 0, MAX_GPUS_PER_HOST - 1)


def port(name, value):
    return integer(name, value, 1, 65535)


def host(name, value, hosts=None):
    names.recorded_host(name, value)
    if hosts is not None and value not in hosts:
        checks.fail(name, "must be a host of the plan's hosts", value)
    return value
