# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Plan every host with its own settings; a host that cannot be planned is set apart.

plan_each() is fleet_plan_by_host's planning step (docs/deploy.md, "A host
that cannot be planned"): a host whose facts are invalid, whose settings
contradict its hardware (a tp_size that fits none of its NUMA nodes or
sockets, an exclude_gpus entry that names none of its GPUs) is reported
with its reason and left out; the others are planned as if it were not
there. Hosts with equal settings are planned together (host_settings.
plan_groups); the failure of one of them never fails the group.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement.exclude import resolve_exclude
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.fleet import plan_fleet
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.host import read_host_view
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.host_settings import plan_groups
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError


def resolve_settings(settings, facts, unplannable):
    """settings with each host's exclude_gpus as its GPU ids; a host whose facts
    cannot be read or whose entries name no GPU of it moves to `unplannable`
    (host -> reason). Returns the settings of the hosts left."""
    out = {}
    for host in sorted(settings):
        try:
            gpus = read_host_view(facts[host], host).gpus
            out[host] = dict(settings[host], exclude_gpus=resolve_exclude(host, settings[host]["exclude_gpus"], gpus))
        except PlacementError as exc:
            unplannable[host] = str(exc)
    return out


def plan_each(settings, facts, unplannable):
    """[fleet_plan result per group of hosts with equal settings], for the hosts
    of `settings` (host -> options, exclude_gpus already resolved) that can be
    planned; the others go to `unplannable` (host -> reason). An error that is
    not one host's (no .host) fails the group: ValueError naming its hosts."""
    plans = []
    for options, group in plan_groups(settings):
        plan = _plan_group(options, list(group), facts, unplannable)
        if plan is not None:
            plans.append(plan)
    return plans


def _plan_group(options, group, facts, unplannable):
    # each retry leaves one host out: at most len(group) + 1 tries
    for dummy_try in range(len(group) + 1):
        if not group:
            return None
        try:
            return plan_fleet(dict((h, facts[h]) for h in group), hosts=group, **options)
        except PlacementError as exc:
            host = exc.host
            if host not in group:
                raise ValueError("%s (hosts %s)" % (exc, ", ".join(group)))
            unplannable[host] = str(exc)
            group.remove(host)
            options = dict(options, exclude_gpus=dict((h, v) for h, v in options["exclude_gpus"].items() if h != host))
    return None
