# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The collection's own role files, read on the controller: every option
name of the roles' meta/argument_specs.yml, and each role's defaults; and
a host's inventory variables with the collection's prefixes, as the roles
would take them over those defaults."""

from __future__ import annotations

import copy
import functools
import os

import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks
from ansible_collections.gpufleet.numa.plugins.module_utils.common.secret_mask import is_secret_name
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import variable_check
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain

ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")
ROLES = ("vllm", "gateway")


# The files _load reads; preload() parses them before Ansible forks its workers.
ROLE_FILES = (("defaults", "main.yml"), ("meta", "argument_specs.yml"))


@functools.lru_cache(maxsize=None)
def _parsed(path):
    # Parsed once per process (a worker inherits the controller's): every
    # per-host filter that reads a role's defaults parsed them again.
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def _load(role, *parts):
    """The role file as parsed, a copy of its own (the caller may change it)."""
    return copy.deepcopy(_parsed(os.path.join(ROLES_DIR, role, *parts)))


def preload():
    """Parse every role file _load reads (the preload callback calls this
    in the controller's main process)."""
    for role in ROLES:
        for parts in ROLE_FILES:
            _load(role, *parts)


def spec_names():
    """Every option name of every entry point of the collection's roles."""
    names = set()
    for role in ROLES:
        for entry in (_load(role, "meta", "argument_specs.yml").get("argument_specs") or {}).values():
            names.update((entry or {}).get("options") or {})
    return names


def defaults(role):
    """The role's defaults/main.yml as written (Jinja values unrendered)."""
    return _load(role, "defaults", "main.yml")


def extra_var_names():
    """The names given with -e on this ansible-playbook's command line."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.utils.vars import load_extra_vars
    return set(load_extra_vars(DataLoader()))


def inventory_variables(hostvars, host, errors, prefixes=None):
    """HOST's variables with the collection's prefixes (or only PREFIXES:
    each variable read is templated, and a per-host filter that read all of
    them paid for every path and lookup of the inventory), as plain values;
    one that cannot be evaluated is an error (its text cut, never a value)."""
    out = {}
    variables = hostvars[host]
    for name in variable_check.inventory_names(list(variables.keys())):
        if prefixes is not None and not name.startswith(prefixes):
            continue
        try:
            out[name] = plain(variables[name])
        except Exception as exc:  # a template error of the inventory's
            # The template's text may hold the secret it was to give.
            reason = "reason hidden" if is_secret_name(name) else checks.show(str(exc), 200)
            errors.append("%s: %s: cannot be evaluated (%s)" % (host, name, reason))
    return out


def host_role_variables(hostvars, host, role, errors, from_playbook=None, prefixes=None):
    """HOST's variables of ROLE as the role takes them: its defaults
    (templated ones derived), the host's own over them, the playbook's last
    (plan/variable_check.role_variables); evaluation errors go to ERRORS.
    PREFIXES: only the host's variables the caller reads (each is templated)."""
    return variable_check.role_variables(defaults(role), inventory_variables(hostvars, host, errors, prefixes),
                                         from_playbook or {})


def listen_and_reach(hostvars, hosts):
    """(listen, reach) of HOSTS: host -> its vllm_listen_host as role vllm
    takes it (over the role's defaults), and host -> its ansible_host, else
    its name: what fleet/addresses.py decides where a host's instances are
    reached from. Hosts hostvars lacks are left out; a variable that cannot
    be evaluated is a ValueError naming the host."""
    errors = []
    listen, reach = {}, {}
    for host in hosts:
        if host not in hostvars:
            continue
        # Only vllm_listen_host is read (its default derives from no other variable).
        listen[str(host)] = plain(host_role_variables(hostvars, host, "vllm", errors,
                                                      prefixes=("vllm_listen_host",))["vllm_listen_host"])
        value = hostvars[host].get("ansible_host") if hasattr(hostvars[host], "get") else None
        reach[str(host)] = str(value) if value else str(host)
    if errors:
        raise ValueError("; ".join(errors))
    return listen, reach
