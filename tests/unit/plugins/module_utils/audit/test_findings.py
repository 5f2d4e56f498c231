# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/findings.py: the old entry points still import, as the new ones."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import drift, findings, result


def test_old_names_are_the_new_functions():
    assert findings.audit_host is result.audit_host
    assert findings.deployed_for_host is drift.deployed_for_host
