# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What a run of role vllm changes on a host, decided over plain dicts:
which files it wrote before and no longer plans (stale_files) and which
instances restart because their files changed (restarting_instances).
The role's tasks call these through the vllm_stale and vllm_restarting
filters. Pure functions, standard library only.
"""

from __future__ import annotations


def stale_files(found, planned):
    """Paths of the role's files on the host (find results whose first line
    is the role's marker) that the plan no longer has, sorted."""
    planned_paths = set(entry["path"] for entry in planned)
    return sorted(set(entry["path"] for entry in found if entry["path"] not in planned_paths))


def restarting_instances(units, written):
    """Names of the instances that restart: every one when the secrets
    changed (all units read secrets.env), else those whose unit or option
    file changed (written: the template task's loop results, each with its
    __vllm_file item)."""
    changed = [result["__vllm_file"] for result in written if result.get("changed")]
    if any(entry.get("secret") for entry in changed):
        return [unit["name"] for unit in units]
    names = []
    for entry in changed:
        name = (entry.get("unit") or {}).get("name")
        if name is not None and name not in names:
            names.append(name)
    return names
