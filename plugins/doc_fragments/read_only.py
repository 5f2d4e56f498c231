# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Attributes shared by the modules that only read a host (numa_facts, numa_audit)."""

from __future__ import annotations


class ModuleDocFragment(object):  # pylint: disable=too-few-public-methods
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
"""
