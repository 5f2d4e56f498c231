# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Placement: socket-local tensor-parallel GPU groups and fleet plans.

Pure functions over the topology facts (docs/facts.md, schema 1); the
output is the plan contract of docs/plan.md. The rules and the objective
are documented in docs/placement.md. This module is the public face; the
work is done, one job each, by:

- options.py: the options, checked (PlacementError);
- facts.py (checks in facts_checks.py): one host's facts, checked and read into a frozen view;
- search.py (inside one domain: domains.py): which GPUs form groups;
- cpus.py: the CPUs of each instance; binding.py: how its unit binds;
- template.py (words in reasons.py): a host's plan by GPU position;
- host.py: the plan of one host, its template memoised on what it reads;
- fleet.py (warnings in fleet_warnings.py): the plan of a fleet, ports and names;
- multinode.py: instances over several hosts (nodes_per_instance).
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import facts as _facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host as _host
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.facts import SCHEMA_VERSION
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet import plan_fleet, plan_fleet_validated
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet_warnings import texts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import (
    FLEET_OPTIONS,
    HOST_OPTIONS,
    PlacementError,
    validate_options,
)

__all__ = [
    "FLEET_OPTIONS", "HOST_OPTIONS", "SCHEMA_VERSION", "PlacementError", "cache_size", "clear_cache",
    "plan_fleet", "plan_fleet_validated", "plan_host", "plan_host_validated", "validate_options",
]


def plan_host_validated(facts, opts, host=None):
    """One host's plan for checked options: the socket_local_groups result, its warnings as texts
    (a host's own plan; the fleet's warnings are records naming the host)."""
    plan = _host.plan_host_validated(facts, opts, host)
    return dict(plan, warnings=texts(plan["warnings"]))


def plan_host(facts, host=None, **options):
    """Plan one host: the socket_local_groups result (docs/plan.md)."""
    return plan_host_validated(facts, validate_options(options), host)


def clear_cache():
    """Forget memoised plans and checked facts (benchmarks use it to time a cold run)."""
    _host.clear_cache()
    _facts.clear_cache()


def cache_size():
    """How many distinct host templates (topology, exclusions, options) are memoised."""
    return _host.cache_size()
