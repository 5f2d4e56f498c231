# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.plan_record: the run's lock on the kept plan,
and its compare-and-swap writes (docs/plan.md, "One run at a time").

Runs on the controller, whatever the task's host: the record is the
controller's file. Thin shell around module_utils/state/lock.py and
state/record.py.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state import record
from ansible_collections.gpufleet.numa.plugins.plugin_utils import paths
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain

STATES = ("locked", "written", "unlocked")


def _revision_or_unreadable(path):
    """The record's revision; one that cannot be read is left to the record's
    reader (the kept_plan lookup) to refuse, naming the reason."""
    try:
        return record.revision(path)
    except ValueError:
        return "unreadable"


class ActionModule(ActionBase):
    _VALID_ARGS = frozenset(("path", "state", "timeout", "record"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        try:
            path = paths.controller_path("path", args.get("path"))
            state = args.get("state")
            if state not in STATES:
                raise ValueError("state: must be one of %s (got %r)" % (", ".join(STATES), state))
            if state == "locked":
                result.update(self._lock(path, lock.check_timeout("gpufleet_lock_timeout", args.get("timeout", 0))))
            elif state == "written":
                record_value = plain(args.get("record"))
                if not isinstance(record_value, dict):
                    raise ValueError("record: must be the record (the kept plan as a mapping)")
                # Serialised here, not by a template: ansible-core before
                # 2.19 turns a templated JSON text back into data.
                result.update(self._write(path, artifact.dump_artifact(record_value)))
            else:
                result.update(changed=False, released=lock.release(path))
        except (TypeError, ValueError, OSError) as exc:  # TypeError: a value JSON cannot hold
            raise AnsibleActionFail("gpufleet.numa.plan_record: %s" % exc)
        return result

    def _lock(self, path, timeout):
        if not os.path.isdir(os.path.dirname(path)):
            # No record yet, and a run that fails before its first write
            # leaves nothing behind: the first write takes the lock (_write).
            return {"changed": False, "locked": False, "msg": "no record yet (%s): the first write locks it" % path}

        def waiting(holder):
            self._display.display("waiting up to %d s for the lock of %s, held by %s"
                                  % (timeout, path, lock.describe(holder)))

        taken = lock.acquire(path, lambda: _revision_or_unreadable(path), timeout, waiting=waiting)
        out = {"changed": False, "locked": True, "revision": taken["holder"]["revision"]}
        if taken["took_over"] is not None:
            out["took_over"] = taken["took_over"]
            self._display.warning("the lock of %s was held by a run that is gone (%s): taken over"
                                  % (path, lock.describe(taken["took_over"])))
        return out

    def _write(self, path, content):
        if self._task.check_mode:
            # Shown, not written; the lock and the revision are checked all the same.
            if os.path.exists(lock.lock_path(path)):
                current = record.require(path, lock.held(path)["revision"])
            else:
                current = record.read_bytes(path)
            return {"changed": current != content.encode("utf-8")}
        if not os.path.exists(lock.lock_path(path)):
            # This run found no record (state=locked took no lock): its first
            # write takes the lock and replaces only "no record".
            record.ensure_directory(path)
            lock.acquire(path, lambda: record.ABSENT)
        changed = []

        def replace(expected):
            new, did = record.write(path, content, expected)
            changed.append(did)
            return new

        new = lock.advance(path, replace)
        return {"changed": changed[0], "revision": new}
