# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What role vllm registered on a host, read for the record: its look
(__vllm, the vllm_host_state action's result) and its write
(__vllm_written, the vllm_files action's result) -> what the host runs
(module_utils/deploy/vllm/rollout.py deployed_record).

Both are results the role registered (data, never templates): read raw
(plain_data), and only what the record reads of them. The role's own last
task (the vllm_deployed filter) and the deploy playbook's record of a whole
batch (the run_converged filter) read them here, the same way.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import rollout
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain_data


def deployed(units, written):
    """{engine, instances, files} from the look's result (UNITS) and the
    write's (WRITTEN). KeyError, TypeError or AttributeError where they are
    not those results; ValueError where a unit has no content_sha1."""
    results = [dict((key, plain_data(item[key])) for key in ("__vllm_file", "content_sha1") if key in item)
               for item in (written.get("results", []) if written else [])]
    return rollout.deployed_record(plain_data(units["units"]), results, plain_data(units["engine"]),
                                   plain_data(units["variables"]))


def role_look(hostvars, host):
    """HOST's registered look (__vllm), or None where role vllm did not run
    there: not registered, or skipped (the role skipped on a host registers
    a skipped result). The one test of whether the role ran on a host."""
    variables = hostvars[host] if host in hostvars else {}
    look = variables["__vllm"] if "__vllm" in variables else None
    return None if look is None or look.get("skipped") else look


def deployed_by_role(hostvars, hosts):
    """host -> deployed() for each of HOSTS where role vllm ran (role_look)
    and registered its write."""
    out = {}
    for host in hosts:
        look = role_look(hostvars, host)
        if look is not None and "__vllm_written" in hostvars[host]:
            out[host] = deployed(look, hostvars[host]["__vllm_written"])
    return out
