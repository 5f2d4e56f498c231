# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Action for gpufleet.numa.vllm_files: role vllm's writes, only what differs, in one module call.

On the controller: renders each entry's template (the role's templates, as
the template lookup renders them, each compiled once per process:
plugin_utils/role_templates.py; with the variables they read,
TEMPLATE_VARIABLES, the entry as __vllm_file) or reads its helper program
(the role's files), and asks
module_utils/deploy/vllm/rollout.py write_needed whether the host's copy
(stat_paths's mode, owner and sha1, carried in the entry) differs. What
does not differ is skipped without a word to the host; what does is sent
to the module in one call, which writes it on the host (secrets apart,
in secret_contents, never logged or diffed). The result is registered as
a loop over the entries would be (results, each with __vllm_file, changed
or skipped, content_sha1: the role's rollout and vllm_deployed read it);
a secret's has no content_sha1 (a hash of a short key is a way to guess
it). Before this, one loop item per entry called ansible.builtin.template,
copy or file: three to five processes on the host per file written.
"""

from __future__ import annotations

import hashlib

from jinja2 import TemplateError

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import rollout
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_templates
from ansible_collections.gpufleet.numa.plugins.plugin_utils.module_failure import failed_task
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain

# What the role's templates read: what role vllm works out (__vllm, from
# vllm_units) and the two secrets (the task's secrets, which Ansible
# evaluated: a vault's, a lookup's); nothing else of the host's variables.
SECRET_VARIABLES = ("vllm_api_key", "vllm_hf_token")
TEMPLATE_VARIABLES = ("__vllm",) + SECRET_VARIABLES
# What they read of __vllm (the rest of it, every unit and file, is most
# of it; the entry itself is __vllm_file).
TEMPLATE_UNITS_KEYS = ("managed_marker", "variables")

KINDS = ("directory", "copy", "template")
SOURCE = {"copy": "src", "template": "template"}


def _checked_entries(entries):
    """The entries as vllm_units made them: mappings with a known kind, a path and their source."""
    if not isinstance(entries, list):
        raise AnsibleActionFail("gpufleet.numa.vllm_files: entries must be vllm_units' writes (a list)")
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("kind") not in KINDS or not isinstance(entry.get("path"), str):
            raise AnsibleActionFail("gpufleet.numa.vllm_files: each entry must be one of vllm_units' writes "
                                    "({kind: directory|copy|template, path, ...})")
        key = SOURCE.get(entry["kind"])
        if key and not isinstance(entry.get(key), str):
            raise AnsibleActionFail("gpufleet.numa.vllm_files: entry %s: %s must be a file name of the role"
                                    % (entry["path"], key))
    return entries


def _host_write(entry, content):
    """What the module writes on the host for ENTRY (content apart for a secret)."""
    write = {"path": entry["path"], "kind": "directory" if entry["kind"] == "directory" else "file"}
    for key in ("mode", "owner", "group", "validate"):
        if entry.get(key) is not None:
            write[key] = entry[key]
    if content is not None and not entry.get("secret"):
        write["content"] = content
    return write


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("entries", "secrets"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        entries = _checked_entries(plain(self._task.args.get("entries")))
        results, writes, secrets, sent = [], [], {}, []
        given = self._template_variables(task_vars)
        for entry in entries:
            content = self._content(entry, given)
            content_sha1 = None if content is None else hashlib.sha1(to_bytes(content, errors="surrogate_or_strict")).hexdigest()
            item = {"__vllm_file": entry}
            if content_sha1 is not None and not entry.get("secret"):
                item["content_sha1"] = content_sha1
            if not rollout.write_needed(entry, content_sha1):
                item.update(skipped=True, changed=False, skip_reason="%s is as planned" % entry["label"])
            else:
                writes.append(_host_write(entry, content))
                if entry.get("secret"):
                    secrets[entry["path"]] = content
                sent.append(len(results))
            results.append(item)
        if writes:
            done = self._execute_module(module_name="gpufleet.numa.vllm_files",
                                        module_args={"writes": writes, "secret_contents": secrets}, task_vars=task_vars)
            if done.get("failed"):
                return dict(result, **failed_task(done, "gpufleet.numa.vllm_files"))
            for index, written in zip(sent, done["results"]):
                results[index]["changed"] = written["changed"]
                if written.get("diff"):
                    results[index]["diff"] = written["diff"]
        diffs = [item["diff"] for item in results if item.get("diff")]
        result.update(changed=any(item.get("changed") for item in results), results=results)
        if diffs:
            result["diff"] = diffs
        if not writes:
            # As a loop whose every item skipped: nothing was sent to the host.
            result.update(skipped=True, skip_reason="every directory and file is as planned")
        return result

    def _template_variables(self, task_vars):
        """What the templates read (TEMPLATE_VARIABLES), as plain values,
        worked out once for every entry: __vllm's keys as the role's look
        registered them, the secrets as the task gives them."""
        secrets = plain(self._task.args.get("secrets") or {})
        if not isinstance(secrets, dict) or sorted(secrets) != sorted(SECRET_VARIABLES) \
                or not all(isinstance(value, str) for value in secrets.values()):
            # The values are secrets: never shown.
            raise AnsibleActionFail("gpufleet.numa.vllm_files: secrets must map %s each to text"
                                    % " and ".join(SECRET_VARIABLES))
        units = task_vars.get("__vllm") or {}
        return dict(secrets, __vllm=plain(dict((key, units[key]) for key in TEMPLATE_UNITS_KEYS if key in units)))

    def _content(self, entry, given):
        """What the role writes at the entry's path, worked out here (None for a directory)."""
        if entry["kind"] == "directory":
            return None
        if entry["kind"] == "copy":
            with open(self._find_needle("files", entry["src"]), "rb") as source:
                return to_text(source.read(), errors="surrogate_or_strict")
        # Found here as the template action finds it (the variables given
        # hold no search path); the role's templates include no other file.
        path = self._find_needle("templates", entry["template"])
        try:
            return role_templates.render(path, dict(given, __vllm_file=entry))
        except TemplateError as exc:
            raise AnsibleActionFail("gpufleet.numa.vllm_files: rendering %s for %s failed: %s"
                                    % (entry["template"], entry["path"], exc))
