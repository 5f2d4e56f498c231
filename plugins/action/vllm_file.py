# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.vllm_file: one of role vllm's writes, only when it differs.

On the controller: renders the entry's template (the role's templates, as
the template lookup renders them, with the task's variables) or reads its
helper program (the role's files), and asks module_utils/deploy/vllm/rollout.py
write_needed whether the host's copy (find's mode, owner and sha1, carried
in the entry) differs. When it does not, the item is skipped without a call
to the host; when it does, ansible.builtin.template, ansible.builtin.copy
or the file module writes it with the same arguments the role's tasks gave
them before (mode, owner and group of secrets.env, validate of the units).
Either way a file's result carries content_sha1, the sha1 of its content as
written or found (the role's vllm_deployed record reads the units'); a
secret's does not (a hash of a short key is a way to guess it).
"""

from __future__ import annotations

import hashlib

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase
from ansible.release import __version__ as ANSIBLE_CORE_VERSION

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import rollout
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain

# The template lookup's convert_data: needed before ansible-core 2.19 (text
# that looks like YAML would come back as data), deprecated from 2.19 on
# (it always returns the text).
_TEMPLATE_OPTIONS = {} if tuple(int(p) for p in ANSIBLE_CORE_VERSION.split(".")[:2]) >= (2, 19) else {"convert_data": False}

KINDS = ("directory", "copy", "template")
# The arguments each kind passes on (when the entry has them).
PASSED_ON = {"directory": ("path", "mode", "owner", "group"), "copy": ("src", "mode"),
             "template": ("template", "mode", "owner", "group", "validate")}


def _checked_entry(entry):
    """The entry as vllm_units made it: a mapping with a known kind and a path."""
    if not isinstance(entry, dict) or entry.get("kind") not in KINDS or not isinstance(entry.get("path"), str):
        raise AnsibleActionFail("gpufleet.numa.vllm_file: entry must be one of vllm_units' writes "
                                "({kind: directory|copy|template, path, ...})")
    for key in ("template",) if entry["kind"] == "template" else ("src",) if entry["kind"] == "copy" else ():
        if not isinstance(entry.get(key), str):
            raise AnsibleActionFail("gpufleet.numa.vllm_file: entry %s: %s must be a file name of the role"
                                    % (entry["path"], key))
    return entry


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(("entry",))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        entry = _checked_entry(plain(self._task.args.get("entry")))
        content_sha1 = self._content_sha1(entry, task_vars)
        shown = {} if entry.get("secret") or content_sha1 is None else {"content_sha1": content_sha1}
        if not rollout.write_needed(entry, content_sha1):
            return dict(result, skipped=True, changed=False, skip_reason="%s is as planned" % entry["label"], **shown)
        args = dict((key, entry[key]) for key in PASSED_ON[entry["kind"]] if entry.get(key) is not None)
        if entry["kind"] == "directory":
            args["state"] = "directory"
            result.update(self._execute_module(module_name="ansible.legacy.file", module_args=args,
                                               task_vars=task_vars))
            return result
        if entry["kind"] == "template":
            args["src"] = args.pop("template")
        args["dest"] = entry["path"]
        return dict(result, **dict(self._sub_action("ansible.builtin.%s" % entry["kind"], args, task_vars), **shown))

    def _content_sha1(self, entry, task_vars):
        """sha1 of what the role would write, worked out here (None for a directory)."""
        if entry["kind"] == "directory":
            return None
        if entry["kind"] == "copy":
            with open(self._find_needle("files", entry["src"]), "rb") as source:
                return hashlib.sha1(source.read()).hexdigest()
        lookup = self._shared_loader_obj.lookup_loader.get("ansible.builtin.template", loader=self._loader,
                                                           templar=self._templar)
        (text,) = lookup.run([entry["template"]], variables=task_vars, **_TEMPLATE_OPTIONS)
        return hashlib.sha1(to_bytes(text, errors="surrogate_or_strict")).hexdigest()

    def _sub_action(self, name, args, task_vars):
        """Run the template or copy action with ARGS, as this task."""
        task = self._task.copy()
        task.args.clear()
        task.args.update(args)
        action = self._shared_loader_obj.action_loader.get(
            name, task=task, connection=self._connection, play_context=self._play_context, loader=self._loader,
            templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        return action.run(task_vars=task_vars)
