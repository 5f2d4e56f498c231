# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The record's file on the controller: its revision, and a write that
replaces only the revision the run started from (compare-and-swap).

The revision is the sha256 of the file's bytes ("absent" before the first
write). write() runs under the run's lock (state/lock.py, advance()), so
the check and the rename cannot interleave with another run's; a file that
changed anyway (a hand edit, a run that broke the lock) is never
overwritten. The new text goes to a temporary file in the same directory,
is synced, then renamed over the old one: a crash leaves the old record or
the new one, never half of either. Controller only; standard library only.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact

ABSENT = "absent"
RECORD_MODE = 0o644
DIRECTORY_MODE = 0o755


class RecordChanged(ValueError):
    """The record is not at the revision this run expected."""


def revision_of_bytes(data):
    return ABSENT if data is None else "sha256:" + hashlib.sha256(data).hexdigest()


def read_bytes(path):
    """The record's bytes, None when nothing is there; read by the record's
    one reader (a FIFO, a directory or an oversized file is a ValueError
    naming it, never a hang)."""
    text = artifact.read_plan_file(path)
    return None if text is None else text.encode("utf-8")


def revision(path):
    """The record's revision now."""
    return revision_of_bytes(read_bytes(path))


def require(path, expected):
    """The record's bytes (None when absent) when it is at revision
    `expected`; RecordChanged otherwise."""
    current = read_bytes(path)
    now = revision_of_bytes(current)
    if now != expected:
        raise RecordChanged(
            "the record %s changed since this run read it (it was %s, it is %s now): another run or a hand "
            "edit wrote it, and this run's update would lose that one. Nothing was written; run again to "
            "plan from the record as it is now" % (path, _short(expected), _short(now)))
    return current


def write(path, text, expected):
    """Replace the record at `path` with `text` when it is still at revision
    `expected`. Returns (new revision, changed). RecordChanged otherwise."""
    data = text.encode("utf-8")
    current = require(path, expected)
    if current == data:
        return expected, False
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, RECORD_MODE)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _sync_directory(directory)
    return revision_of_bytes(data), True


def _sync_directory(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_directory(path):
    """Create the record's directory when it is missing (an existing one
    keeps its mode). True when it was created."""
    directory = os.path.dirname(path)
    if os.path.isdir(directory):
        return False
    os.makedirs(directory, DIRECTORY_MODE)
    return True


def _short(rev):
    return rev if rev == ABSENT else rev[:19]
