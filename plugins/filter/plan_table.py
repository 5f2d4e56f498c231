# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filter: fleet plan -> lines of a readable table."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils.plan_table import plan_table as _plan_table


def plan_table(plan):
    try:
        return _plan_table(plan)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.plan_table: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"plan_table": plan_table}
