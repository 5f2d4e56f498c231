# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Fixtures shared by the real-process tests."""

import pytest

from fleet_processes import ProcessGroup


@pytest.fixture
def processes(tmp_path):
    """Processes a test starts; every one is stopped when the test ends."""
    group = ProcessGroup(str(tmp_path))
    try:
        yield group
    finally:
        group.stop_all()
