# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/engine_checks.py: vllm_extra_args keys against the pinned
vLLM's own option names, naming the nearest, and the oldest vllm_version."""

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import engine_checks, engine_options, host_state
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import INSTANCE, VARIABLES


def extra_args(args, **changes):
    units = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_extra_args=args, **changes))
    return units["units"][0]["config"]


@pytest.mark.parametrize("key, near", [
    ("enable-prefix-cacheing", "enable-prefix-caching"),
    ("max-model-lenght", "max-model-len"),
    ("gpu_memory_utilisation", "gpu-memory-utilization"),
])
def test_a_misspelled_option_names_the_nearest(key, near):
    with pytest.raises(ValueError) as info:
        extra_args({key: 1})
    assert str(info.value) == "vllm_extra_args key: is no option of vllm serve %s (did you mean %s?) (got '%s')" % (
        engine_options.VERSION, near, key)


def test_an_option_with_nothing_near_says_so():
    with pytest.raises(ValueError, match=r"^vllm_extra_args key: is no option of vllm serve [0-9.]+ \(got 'zzzz'\)$"):
        extra_args({"zzzz": 1})


@pytest.mark.parametrize("key", ["max-model-len", "max_model_len", "enable-prefix-caching", "no-async-scheduling"])
def test_real_options_pass_in_either_spelling(key):
    """vLLM reads _ as - (its parser and its --config file alike)."""
    extra_args({key: 1})


def test_options_of_another_version_are_not_judged():
    """The list is the pinned version's: another vLLM may have options it lacks."""
    extra_args({"enable-prefix-cacheing": True}, vllm_version="0.34.0")


def test_an_own_executable_is_judged_by_its_vllm_version():
    """vllm_version names the engine at vllm_executable too (GPUFLEET_ENGINE)."""
    with pytest.raises(ValueError, match="is no option of vllm serve"):
        extra_args({"enable-prefix-cacheing": True}, vllm_executable="/opt/vllm/bin/vllm")


@pytest.mark.parametrize("version, oldest", [("0.18.0", True), ("0.17.9", False), ("1.0", True), ("main", True),
                                             ("0.4.0", False), ("0.20.1rc1", True)])
def test_the_oldest_version_the_units_run_on(version, oldest):
    if oldest:
        assert engine_checks.check_version(version) == version
    else:
        with pytest.raises(ValueError, match=r"^vllm_version: must be 0\.18 or newer"):
            engine_checks.check_version(version)
