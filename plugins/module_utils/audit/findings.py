# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The audit's old entry points, kept importable for code outside audit/
that still imports them here (the placement and plan tests); new code
imports from where they live: result.audit_host, drift.deployed_for_host.
Controller only."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit.drift import deployed_for_host
from ansible_collections.gpufleet.numa.plugins.module_utils.audit.result import audit_host

__all__ = ("audit_host", "deployed_for_host")
