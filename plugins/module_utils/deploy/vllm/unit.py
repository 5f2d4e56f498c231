# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The old name of the facade: what each vLLM unit of a host runs.

The code lives in variables.py, instance.py, command.py, download.py and
host_state.py (host_units, the facade the vllm_units filter calls); this
name stays for the placement and plan tests that import it.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.host_state import host_units

__all__ = ["host_units"]
