# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/options.py: the options of socket_local_groups and fleet_plan, checked."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import (
    h100_nvswitch,
)


# ---------------------------------------------------------------- validate_options


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "tp_size is required"),
        ({"tp_size": 0}, "tp_size must be an integer >= 1"),
        ({"tp_size": "4"}, "tp_size must be an integer"),
        ({"tp_size": True}, "tp_size must be an integer"),
        ({"tp_size": 2, "pp_size": 0}, "pp_size"),
        ({"tp_size": 2, "allow_span": "yes"}, "allow_span must be a boolean"),
        ({"tp_size": 2, "exclude_gpus": "0000:18:00.0"}, "exclude_gpus must be a list"),
        ({"tp_size": 2, "max_instances_per_host": 0}, "max_instances_per_host"),
        ({"tp_size": 2, "tensor_parallel": 2}, "unknown option\\(s\\): tensor_parallel"),
    ],
)
def test_plan_host_rejects_bad_options(options, message):
    with pytest.raises(placement.PlacementError, match=message):
        placement.plan_host(h100_nvswitch(), **options)
