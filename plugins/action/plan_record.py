# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.plan_record: the run's lock on the kept plan,
and its compare-and-swap writes (docs/plan.md, "One run at a time").

Runs on the controller, whatever the task's host: the record is the
controller's file, or a key in the etcd cluster the controller reaches
(docs/state.md). Thin shell around module_utils/state/store.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.state import lock
from ansible_collections.gpufleet.numa.plugins.module_utils.state import store as state_store
from ansible_collections.gpufleet.numa.plugins.plugin_utils import paths
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain

STATES = ("locked", "written", "unlocked")


def open_store(args):
    """The store of the task's `store` (the run's settings) or `path` (a file store), one of them."""
    settings = plain(args.get("store"))
    if (settings is None) == (args.get("path") is None):
        raise ValueError("give one of store (the run's store settings, gpufleet.numa.state_settings) or path "
                         "(the record's file)")
    if settings is None:
        settings = {"backend": "file", "path": args.get("path")}
    if isinstance(settings, dict) and settings.get("backend") == "file":
        settings = dict(settings, path=paths.controller_path("path", settings.get("path")))
    return state_store.open_store(settings)


class ActionModule(ActionBase):
    _VALID_ARGS = frozenset(("path", "store", "state", "timeout", "record"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        try:
            store = open_store(args)
            state = args.get("state")
            if state not in STATES:
                raise ValueError("state: must be one of %s (got %r)" % (", ".join(STATES), state))
            if state == "locked":
                result.update(self._lock(store, lock.check_timeout("gpufleet_lock_timeout", args.get("timeout", 0))))
            elif state == "written":
                record_value = plain(args.get("record"))
                if not isinstance(record_value, dict):
                    raise ValueError("record: must be the record (the kept plan as a mapping)")
                # Serialised here, not by a template: ansible-core before
                # 2.19 turns a templated JSON text back into data.
                result.update(self._write(store, artifact.dump_artifact(record_value)))
            else:
                result.update(changed=False, released=store.release())
        except (TypeError, ValueError, OSError) as exc:  # TypeError: a value JSON cannot hold
            raise AnsibleActionFail("gpufleet.numa.plan_record: %s" % exc)
        return result

    def _lock(self, store, timeout):
        def waiting(holder):
            self._display.display("waiting up to %d s for the lock of %s, held by %s"
                                  % (timeout, store.location, store.describe(holder)))

        taken = store.acquire(timeout, waiting=waiting)
        if not taken["locked"]:
            return {"changed": False, "locked": False, "msg": taken["msg"]}
        out = {"changed": False, "locked": True, "revision": taken["revision"]}
        if taken["took_over"] is not None:
            out["took_over"] = taken["took_over"]
            self._display.warning("the lock of %s was held by a run that is gone (%s): taken over"
                                  % (store.location, store.describe(taken["took_over"])))
        return out

    def _write(self, store, content):
        # A lease-kept lock (etcd) is renewed at every write: a lock this run
        # lost is said here, and nothing is written.
        store.renew()
        if self._task.check_mode:
            # Shown, not written; the lock and the revision are checked all the same.
            return {"changed": store.preview(content)}
        new, changed = store.advance(content)
        return {"changed": changed, "revision": new}
