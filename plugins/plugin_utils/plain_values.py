# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Plain Python values from what Ansible's templating hands to a filter.

ansible-core 2.19 passes tagged subclasses of dict, list, str and int;
pure logic in module_utils works on (and caches by) plain values.
"""

from __future__ import annotations


def plain(value):
    """Plain dicts/lists/scalars, recursively; mapping keys too."""
    if isinstance(value, dict):
        return dict((plain(k), plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def host_list(name, value):
    """VALUE as a list of inventory host names (plain text); ValueError
    naming NAME when it is not a list (a string is not a list of hosts)."""
    value = plain(value)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError("%s must be a list of inventory hosts" % name)
    return [str(h) for h in value]
