# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Names the collection trusts only by their rule: inventory host names
and the names of the units role vllm writes.

The take-down path stops, disables and deletes units as root on the
strength of these rules (docs/deploy.md, "Taking instances and hosts
down"): whatever a kept plan or a variable says, only a `gpufleet-*`
unit can ever be one of the role's, and a group name or the controller
is never a GPU host to take down. Pure functions, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks

INVENTORY_HOST = r"[A-Za-z0-9_.:@-]{1,253}"
INVENTORY_HOST_RULE = "must be an inventory host name of letters, digits, '-', '_', '.', ':' or '@'"
# Ansible's own group names, never hosts; and the controller.
GROUP_NAMES = ("all", "ungrouped")
CONTROLLER = "localhost"

# Every unit of role vllm is named <prefix><instance>.service with a prefix
# that starts with "gpufleet-": nothing else is ever stopped or deleted.
UNIT_PREFIX_START = "gpufleet-"
UNIT_PREFIX = r"gpufleet-[A-Za-z0-9_.-]{0,54}"
UNIT_PREFIX_RULE = ("must start with 'gpufleet-' (only such units are ever stopped or removed), then at most 54 of "
                    "[A-Za-z0-9_.-]")


def inventory_host(name, value):
    """An inventory host name (a string of the rule's characters)."""
    return checks.text(name, value, INVENTORY_HOST, INVENTORY_HOST_RULE)


def recorded_host(name, value):
    """A host a kept plan may hold: an inventory host name, not a group."""
    inventory_host(name, value)
    if value in GROUP_NAMES:
        checks.fail(name, "must be a host, not Ansible's group %r" % value, value)
    return value


def unit_prefix(name, value):
    return checks.text(name, value, UNIT_PREFIX, UNIT_PREFIX_RULE)
