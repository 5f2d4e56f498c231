# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Why a module failed on a host, said by the action that ran it.

A module that raises an uncaught exception is reported by ansible-core
2.19 as {failed, exception: an error summary} with no msg (older
ansible-core: msg "MODULE FAILURE" and the traceback as text). An action
that reads only msg loses the reason. failure_reason() reads both;
failed_task() is the failed task's result that hands it on. Controller
only.
"""

from __future__ import annotations

# What Ansible shows of a failed module besides its msg; handed on as it came.
FAILURE_KEYS = ("rc", "stdout", "stderr", "module_stdout", "module_stderr", "exception")


def failure_reason(result):
    """Why a module failed, as text: its msg; else, for an uncaught
    exception, the exception's message (ansible-core 2.19 sends an error
    summary and no msg; older ones a traceback); else None."""
    msg = result.get("msg") if isinstance(result, dict) else None
    if isinstance(msg, str) and msg.strip():
        return msg
    exception = result.get("exception") if isinstance(result, dict) else None
    said = getattr(getattr(exception, "event", None), "msg", None)
    if isinstance(said, str) and said.strip():
        return said
    if isinstance(exception, str) and exception.strip():
        return exception.strip().splitlines()[-1]
    return None


def failed_task(result, context):
    """The failed task's result for a failed module RESULT: msg is CONTEXT
    and the module's reason, and what Ansible shows of a failure (return
    code, output, exception: FAILURE_KEYS) is handed on as it came."""
    reason = failure_reason(result) or "the module failed without saying why"
    failed = dict((key, result[key]) for key in FAILURE_KEYS if isinstance(result, dict) and key in result)
    return dict(failed, failed=True, msg="%s: %s" % (context, reason))
