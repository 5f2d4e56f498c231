# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the deployed plan kept between runs: merge_plan, load_plan, plan_artifact_json.

Thin shells around module_utils/plan_artifact.py; see docs/plan.md.
"""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.module_utils import plan_artifact


def _plain(value):
    """Plain JSON values: what templating hands in may be tagged subclasses."""
    return json.loads(json.dumps(value))


def merge_plan(fresh, previous=None, replanned=None, fleet_hosts=None, previous_name="<plan>", options=None):
    try:
        if previous is not None and not isinstance(previous, (str, dict)):
            raise ValueError("previous must be the plan file's JSON text or a mapping")
        if replanned is None or fleet_hosts is None:
            raise ValueError("replanned and fleet_hosts are required")
        old = plan_artifact.load_artifact(_plain(previous), name=str(previous_name))
        return plan_artifact.merge_plans(_plain(fresh), old, _plain(replanned), _plain(fleet_hosts),
                                         options=_plain(options))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.merge_plan: %s" % exc)


def load_plan(text, name="<plan>"):
    try:
        if text is not None and not isinstance(text, (str, dict)):
            raise ValueError("the plan file's content must be JSON text")
        return plan_artifact.require_artifact(_plain(text), name=str(name))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpufleet.numa.load_plan: %s" % exc)


def plan_artifact_json(plan):
    try:
        return plan_artifact.dump_artifact(_plain(plan))
    except (TypeError, ValueError) as exc:  # TypeError: a value JSON cannot hold
        raise AnsibleFilterError("gpufleet.numa.plan_artifact_json: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"merge_plan": merge_plan, "load_plan": load_plan, "plan_artifact_json": plan_artifact_json}
