# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The measurement's settings from a host's variables
(playbooks/measure_bandwidth.yml, docs/bandwidth.md "Variables"): each
gpufleet_bandwidth_* variable checked whole, with an error naming it, and
the interpreter the children run: gpufleet_bandwidth_python, else the
engine's own (the Python beside vllm_executable, then vllm_venv's), so the
figures come from the torch the engine runs. Pure functions, standard
library only.
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth import measure
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks

# module option -> the variable that sets it
VARIABLES = {
    "python": "gpufleet_bandwidth_python",
    "kernel": "gpufleet_bandwidth_kernel",
    "size_mib": "gpufleet_bandwidth_size_mib",
    "seconds": "gpufleet_bandwidth_seconds",
    "timeout": "gpufleet_bandwidth_timeout",
    "gpus": "gpufleet_bandwidth_gpus",
}
DEFAULTS = {"kernel": "auto", "size_mib": 256, "seconds": 0.5, "timeout": 120, "gpus": True}
_NUMBER = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6})?")


def _seconds(name, value):
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        checks.fail(name, "must be a number of seconds", value)
    return float(value)


def _python(variables):
    """The candidate interpreters, in order."""
    name = VARIABLES["python"]
    if variables.get(name) not in (None, ""):
        value = variables[name]
        values = value if isinstance(value, list) else [value]
        return [checks.absolute_path("%s[%d]" % (name, i) if isinstance(value, list) else name, v)
                for i, v in enumerate(values)]
    candidates = []
    executable = variables.get("vllm_executable") or ""
    if executable:
        checks.absolute_path("vllm_executable", executable)
        candidates.append(posixpath.join(posixpath.dirname(executable), "python"))
    venv = variables.get("vllm_venv")
    if venv:
        candidates.append(checks.absolute_path("vllm_venv", venv) + "/bin/python")
    return candidates


def from_variables(variables):
    """numa_bandwidth's arguments from a host's variables (each unset one
    takes its default). ValueError names the variable."""
    get = dict((option, variables.get(name)) for option, name in VARIABLES.items())
    out = {"python": _python(variables)}
    for option, default in DEFAULTS.items():
        out[option] = default if get[option] is None else get[option]
    out["size_mib"] = checks.integer(VARIABLES["size_mib"], out["size_mib"])
    out["timeout"] = checks.integer(VARIABLES["timeout"], out["timeout"])
    out["seconds"] = _seconds(VARIABLES["seconds"], out["seconds"])
    out["gpus"] = checks.boolean(VARIABLES["gpus"], out["gpus"])
    return measure.check_settings(out, VARIABLES)
