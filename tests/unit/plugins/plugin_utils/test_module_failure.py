# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plugin_utils/module_failure.py: why a module failed, in every shape
ansible-core gives it (a playbook run through an action is in
tests/unit/plugins/action/test_vllm_files_action.py)."""

from __future__ import annotations

from ansible.module_utils._internal import _messages  # the type 2.19 hands the action

from ansible_collections.gpufleet.numa.plugins.plugin_utils import module_failure


def test_a_failed_module_says_why_whatever_ansible_core_made_of_it():
    """msg when the module gave one; for an uncaught exception, its message:
    ansible-core 2.19 hands the action an error summary and no msg, older
    ones a traceback (and msg MODULE FAILURE)."""
    crashed = {"failed": True, "exception": _messages.ErrorSummary(event=_messages.Event(msg="embedded null byte"))}
    assert module_failure.failure_reason(crashed) == "embedded null byte"
    traceback = "Traceback (most recent call last):\n  File \"x\", line 1\nValueError: embedded null byte\n"
    assert module_failure.failure_reason({"failed": True, "exception": traceback}) == "ValueError: embedded null byte"
    assert module_failure.failure_reason({"failed": True, "msg": "disk full", "exception": traceback}) == "disk full"
    assert module_failure.failure_reason({"failed": True, "msg": ""}) is None
    assert module_failure.failure_reason("not a result") is None
    task = module_failure.failed_task(dict(crashed, invocation={"module_args": {}}, rc=1), "vllm_files")
    assert task == {"failed": True, "msg": "vllm_files: embedded null byte", "rc": 1,
                    "exception": crashed["exception"]}
    assert module_failure.failed_task({"failed": True}, "x")["msg"] == "x: the module failed without saying why"
