# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters that plan GPU placement: socket_local_groups (one host), fleet_plan (a fleet).

Thin shells around module_utils/placement/api.py; see docs/placement.md.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain as _plain
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import contract


_INT_OPTIONS = ("tp_size", "pp_size", "reserved_cpus_per_socket", "max_instances_per_host",
                "base_port", "port_stride", "dist_port_base", "dist_port_stride", "nodes_per_instance", "master_port")


def _coerce(options):
    """Numbers and booleans as strings (``-e tp_size=4`` on the command line) become values;
    anything else is left for validate_options to reject with its message."""
    out = dict(options)
    for name in _INT_OPTIONS:
        value = out.get(name)
        if isinstance(value, str):
            try:
                out[name] = checks.integer(name, value)
            except ValueError:
                pass
    value = out.get("allow_span")
    if isinstance(value, str):
        try:
            out["allow_span"] = checks.boolean("allow_span", value)
        except ValueError:
            pass
    return out


def socket_local_groups(topology, tp_size=None, **options):
    """Plan one host's socket-local tensor-parallel groups from its numa_topology facts."""
    try:
        opts = placement.validate_options(_coerce(dict(_plain(options), tp_size=_plain(tp_size))))
        return placement.plan_host_validated(topology, opts)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.socket_local_groups: %s" % exc)
    except Exception as exc:  # pylint: disable=broad-except
        raise _unexpected("socket_local_groups", exc)


def fleet_plan(fleet, tp_size=None, **options):
    """Plan a fleet: hostvars (or host -> facts) in, a flat list of instances out.

    The input is called fleet because `hosts` is an option (which hosts to plan).
    """
    try:
        opts = placement.validate_options(_coerce(dict(_plain(options), tp_size=_plain(tp_size))),
                                          placement.FLEET_OPTIONS)
        return placement.plan_fleet_validated(_host_facts(fleet, opts["hosts"]), opts)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.fleet_plan: %s" % exc)
    except AnsibleFilterError:
        raise
    except Exception as exc:  # pylint: disable=broad-except
        raise _unexpected("fleet_plan", exc)


def _unexpected(name, exc):
    """A filter error for a failure the planner did not foresee (it names the host itself where it knows it)."""
    return AnsibleFilterError("gpufleet.numa.%s: the planner failed (%s: %s)"
                              % (name, type(exc).__name__, checks.show(str(exc))))


def _host_facts(hosts, wanted=None):
    """host -> {"numa_topology": facts} for the wanted hosts (hostvars holds much more; only these are read).

    Facts are read, never modified; the planner checks them and builds the plan from plain values.
    """
    if not hasattr(hosts, "keys"):
        raise AnsibleFilterError(
            "gpufleet.numa.fleet_plan: input must be a mapping host -> vars or facts (e.g. hostvars), got %s"
            % type(hosts).__name__
        )
    out = {}
    names = list(hosts.keys()) if wanted is None else [h for h in wanted if h in hosts]
    for host in names:
        facts = contract.facts_view(host, hosts[host], missing=None)
        out[str(host)] = None if facts is None else {"numa_topology": facts}
    return out


class FilterModule(object):
    def filters(self):
        return {"socket_local_groups": socket_local_groups, "fleet_plan": fleet_plan}
