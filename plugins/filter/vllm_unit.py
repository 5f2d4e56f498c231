# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters of role gpufleet.numa.vllm: what each vLLM unit of a host runs
(vllm_units), which files are stale (vllm_stale), which instances restart
(vllm_restarting), what each host of a batch rolls in which ordinal (vllm_rollout),
what the host runs once the role succeeded (vllm_deployed), whether the
service manager is gathered first (vllm_wants_service_mgr) and which hosts'
units were written but not started (vllm_not_started).

Thin shells around module_utils/deploy/vllm/host_state.py and rollout.py; see docs/plan.md and the role's README.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.plugin_utils import vllm_results
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain as _plain
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state, rollout


def vllm_units(instances, variables):
    """This host's plan instances and the role's variables -> every unit's argv, environment and files."""
    if not hasattr(variables, "keys"):
        raise AnsibleFilterError("gpufleet.numa.vllm_units: variables must be a mapping of role variable -> value")
    try:
        return host_state.host_units(_plain(instances), _plain(dict(variables)))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_units: %s" % exc)


def vllm_stale(found, files):
    """find's results for the role's marked files and vllm_units' files -> paths no longer planned."""
    try:
        return rollout.stale_files(_plain(found), _plain(files))
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_stale: found and files must be lists of {path} (%s)" % exc)


def vllm_restarting(units, written):
    """vllm_units' units and the template task's loop results -> names of the instances that restart."""
    try:
        return rollout.restarting_instances(_plain(units), _plain(written))
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_restarting: written must be the results of the role's "
                                 "template loop (%s)" % exc)


def _role_state(hostvars, host):
    """What role vllm left in HOST's variables: {units, written, install_changed, agents}, or None where it did not run.
    The install's result counts only where this run installs (__vllm.install): an earlier run's stays behind."""
    look = vllm_results.role_look(hostvars, host)
    if look is None or "__vllm_written" not in hostvars[host]:
        return None
    variables = hostvars[host]
    written = variables["__vllm_written"]
    installed = variables["__vllm_installed"] if "__vllm_installed" in variables else None
    install_changed = bool(look.get("install") and installed and installed.get("changed"))
    return {"units": look["units"], "written": written.get("results", []) if written else [],
            "install_changed": install_changed, "agents": look.get("agent_services", [])}


def _role_states(hostvars, names):
    """{name: role state} of each of NAMES where role vllm ran (_role_state), read once."""
    states = {}
    for name in names:
        found = _role_state(hostvars, name)
        if found is not None:
            states[name] = _plain(found)
    return states


def vllm_rollout(hostvars, batch, check_mode=False):
    """hostvars and the play batch -> [{host, rollout: {agents, ordinals,
    steps}}] for every host of the batch (rollout.batch_rollout), each
    host's role state read once."""
    if not isinstance(_plain(check_mode), bool):
        raise AnsibleFilterError("gpufleet.numa.vllm_rollout: check_mode must be a boolean (ansible_check_mode; "
                                 "got %r)" % (check_mode,))
    try:
        batch = [str(name) for name in _plain(list(batch))]
        states = _role_states(hostvars, batch)
        # The other hosts of the batch's multi-node instances (a partner's
        # restart restarts the instance everywhere).
        partners = set()
        for state in states.values():
            for unit in state["units"]:
                partners.update((unit.get("multinode") or {}).get("hosts") or [])
        states.update(_role_states(hostvars, sorted(partners - set(states))))
        rolled = rollout.batch_rollout(states, batch, check_mode)
        return [{"host": name, "rollout": rolled[name]} for name in batch]
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_rollout: hostvars must hold role vllm's __vllm and "
                                 "__vllm_written for the hosts of the batch (%s)" % exc)


def vllm_deployed(units, written):
    """vllm_units' result and the write loop's registered result -> {engine, instances, files} (vllm_results.deployed)."""
    try:
        return vllm_results.deployed(units, written)
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_deployed: the input must be vllm_units' result and written "
                                 "the registered result of the role's write loop (%s)" % exc)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_deployed: %s" % exc)


def vllm_not_started(hostvars, hosts):
    """hostvars and hosts -> 'host: why' for each of HOSTS whose units role vllm wrote but does not start
    (its __vllm's not_started; a host where the role did not run, or was skipped, has none)."""
    lines = []
    try:
        for host in _plain(list(hosts)):
            look = vllm_results.role_look(hostvars, host)
            if look is not None and look.get("not_started"):
                lines.append("%s: %s" % (host, _plain(look["not_started"])))
    except (TypeError, AttributeError) as exc:
        raise AnsibleFilterError("gpufleet.numa.vllm_not_started: hostvars must map each host to its variables, "
                                 "hosts must be a list of host names (%s)" % exc)
    return lines


def vllm_wants_service_mgr(manage_service, service_mgr=""):
    """vllm_manage_service and the service manager known so far -> whether to gather it first."""
    return rollout.wants_service_manager(_plain(manage_service), _plain(service_mgr or ""))


class FilterModule(object):
    def filters(self):
        return {"vllm_units": vllm_units, "vllm_stale": vllm_stale, "vllm_restarting": vllm_restarting,
                "vllm_rollout": vllm_rollout, "vllm_deployed": vllm_deployed,
                "vllm_not_started": vllm_not_started,
                "vllm_wants_service_mgr": vllm_wants_service_mgr}
