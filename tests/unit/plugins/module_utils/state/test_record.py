# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The record's file: a write replaces only the revision the run read."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import record


def test_the_first_write_needs_no_record(tmp_path):
    path = str(tmp_path / "plan.json")
    assert record.revision(path) == record.ABSENT
    new, changed = record.write(path, '{"a": 1}\n', record.ABSENT)
    assert changed and new == record.revision(path) and new.startswith("sha256:")
    assert oct(os.stat(path).st_mode & 0o777) == oct(record.RECORD_MODE)
    assert record.write(path, '{"a": 1}\n', new) == (new, False)  # unchanged: not written
    assert os.listdir(str(tmp_path)) == ["plan.json"]  # no temporary file left


def test_a_record_changed_since_the_run_read_it_is_never_overwritten(tmp_path):
    path = str(tmp_path / "plan.json")
    first = record.write(path, "one\n", record.ABSENT)[0]
    with open(path, "w") as handle:
        handle.write("another run's\n")
    with pytest.raises(record.RecordChanged) as err:
        record.write(path, "mine\n", first)
    assert "the record %s changed since this run read it" % path in str(err.value)
    assert open(path).read() == "another run's\n"
    # A record that appeared since a first run found none is not overwritten either.
    other = str(tmp_path / "other.json")
    with open(other, "w") as handle:
        handle.write("x")
    with pytest.raises(record.RecordChanged, match="it was absent"):
        record.write(other, "mine\n", record.ABSENT)


def test_the_directory_is_made_only_when_missing(tmp_path):
    path = str(tmp_path / "state" / "plan.json")
    assert record.ensure_directory(path) is True
    assert oct(os.stat(str(tmp_path / "state")).st_mode & 0o777) == oct(record.DIRECTORY_MODE)
    os.chmod(str(tmp_path / "state"), 0o700)
    assert record.ensure_directory(path) is False
    assert oct(os.stat(str(tmp_path / "state")).st_mode & 0o777) == "0o700"


def test_a_record_that_is_no_file_is_refused_never_waited_on(tmp_path):
    fifo = str(tmp_path / "plan.json")
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="plan file %s cannot be read: it is a FIFO" % fifo):
        record.revision(fifo)
