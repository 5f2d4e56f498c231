# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Plain Python values from what Ansible's templating hands to a filter.

ansible-core 2.19 passes tagged subclasses of dict, list, str and int;
pure logic in module_utils works on (and caches by) plain values.
"""

from __future__ import annotations

try:  # ansible-core 2.19 on: a filter reads variables through lazy containers that template each item read
    from ansible._internal._templating._lazy_containers import (
        _AnsibleLazyTemplateDict as _LazyDict, _AnsibleLazyTemplateList as _LazyList, _LazyValue)
except ImportError:  # before 2.19, or should the private names move: plain() alone
    _LazyDict = _LazyList = _LazyValue = None


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


def plain_data(value):
    """plain(VALUE), for data that only the collection's filters made (the
    run, which set_fact keeps as a fact): its text comes from plain() and is
    never a template, so ansible-core 2.19's lazy containers are read raw,
    without templating each item (a quarter of each run step's CPU at 100
    hosts: the run holds every host's record). Anything else goes through
    plain()."""
    if _LazyDict is not None and type(value) is _LazyDict:  # pylint: disable=unidiomatic-typecheck
        return dict((plain(k), plain_data(_raw(v))) for k, v in dict.items(value))
    if _LazyList is not None and type(value) is _LazyList:  # pylint: disable=unidiomatic-typecheck
        return [plain_data(_raw(v)) for v in list.__iter__(value)]
    if type(value) is dict:  # pylint: disable=unidiomatic-typecheck
        return dict((plain(k), plain_data(v)) for k, v in value.items())
    if type(value) is list:  # pylint: disable=unidiomatic-typecheck
        return [plain_data(v) for v in value]
    return plain(value)


def _raw(value):
    return value.value if type(value) is _LazyValue else value  # pylint: disable=unidiomatic-typecheck


def host_list(name, value):
    """VALUE as a list of inventory host names (plain text); ValueError
    naming NAME when it is not a list (a string is not a list of hosts)."""
    value = plain(value)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError("%s must be a list of inventory hosts" % name)
    return [str(h) for h in value]
