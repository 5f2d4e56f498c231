# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What a kept instance runs (its `deployed` field, docs/plan.md): the
engine, its unit and the unit's sha1, as role vllm reported them when the
host converged; and where the host's units and option files are (its
host entry's `files`). Checked like every field of the kept plan (untrusted
input). Pure functions, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common import names
from ansible_collections.gpufleet.numa.plugins.module_utils.common.record_values import known_fields

RUN_FIELDS = ("engine", "unit", "unit_sha1")
# Where a host's units and option files are (hosts[HOST].files): taking the
# host down looks there, even once it no longer has the variables that said so.
FILE_FIELDS = ("unit_dir", "config_dir", "unit_prefix")
_RULES = {
    "engine": (r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}(==[A-Za-z0-9_.+!-]{1,64})?",
               "must be PACKAGE==VERSION (a Python package and version)"),
    "unit": (r"[A-Za-z0-9][A-Za-z0-9_.@:-]{0,200}\.service", "must be a systemd unit name ending in .service"),
    "unit_sha1": (r"[0-9a-f]{40}", "must be 40 lowercase hex digits (a sha1)"),
}


def check_run(where, value):
    """The `deployed` field of a kept instance: a mapping of RUN_FIELDS only."""
    if not isinstance(value, dict):
        checks.fail(where, "must be a mapping {engine, unit, unit_sha1}", value)
    known_fields(where, value, RUN_FIELDS)
    for field in RUN_FIELDS:
        if field in value:
            pattern, rule = _RULES[field]
            checks.text("%s.%s" % (where, field), value[field], pattern, rule)
    return value


def check_files(where, value):
    """hosts[HOST].files: {unit_dir, config_dir, unit_prefix}, all three."""
    if not isinstance(value, dict) or sorted(value) != sorted(FILE_FIELDS):
        checks.fail(where, "must be a mapping of exactly %s" % ", ".join(FILE_FIELDS), value)
    for field in ("unit_dir", "config_dir"):
        checks.absolute_path("%s.%s" % (where, field), value[field])
    names.unit_prefix(where + ".unit_prefix", value["unit_prefix"])
    return value
