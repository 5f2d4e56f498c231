# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/gateway/affinity.py: gateway_affinity checked whole before
anything is written, each model's balance and the body reader's action.
tests/system/test_gateway_affinity.py runs what it decides at HAProxy."""

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import affinity
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gs
from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import variable_check
from ansible_collections.gpufleet.numa.tests.fixtures.gateway_inputs import DEFAULTS, variables

SERVERS = [
    {"name": "a-0", "host": "a", "address": "10.0.0.1", "port": 8000, "model": "llama"},
    {"name": "a-1", "host": "a", "address": "10.0.0.1", "port": 8001, "model": "llama"},
    {"name": "b-0", "host": "b", "address": "10.0.0.2", "port": 8000, "model": "qwen/q-7b"},
]


def check(value, **changes):
    return gs.check_settings(variables(gateway_backends=SERVERS, gateway_affinity=value, **changes))


def by_model(settings):
    return dict((model["model"], model) for model in settings["models"])


def test_the_default_is_no_affinity_and_leastconn():
    assert DEFAULTS["gateway_affinity"] == {}
    settings = check({})
    assert settings["body_action"] == "gpufleet_request_model"
    assert [(m["balance"], m["affinity"]) for m in settings["models"]] == [("leastconn", {}), ("leastconn", {})]
    # Models left out keep gateway_balance, whatever it is.
    assert by_model(check({}, gateway_balance="roundrobin"))["llama"]["balance"] == "roundrobin"


def test_a_model_with_prefix_affinity_hashes_its_key_within_the_bound():
    settings = check({"llama": {}})
    models = by_model(settings)
    assert models["llama"]["balance"] == "hash var(txn.affinity_key)"
    assert models["llama"]["affinity"] == {"mode": "prefix", "prefix_bytes": 256, "balance_factor": 125,
                                           "session_header": ""}
    assert (models["qwen/q-7b"]["balance"], models["qwen/q-7b"]["affinity"]) == ("leastconn", {})
    assert settings["body_action"] == "gpufleet_request_model_prefix 256"


def test_the_reader_takes_the_widest_prefix_of_any_model():
    settings = check({"llama": {"prefix_bytes": "64", "session_header": "X-Session-Id", "balance_factor": 150},
                      "qwen/q-7b": {"prefix_bytes": 1000, "mode": "prefix"}})
    models = by_model(settings)
    assert models["llama"]["affinity"] == {"mode": "prefix", "prefix_bytes": 64, "balance_factor": 150,
                                           "session_header": "X-Session-Id"}
    assert models["qwen/q-7b"]["affinity"]["prefix_bytes"] == 1000
    assert settings["body_action"] == "gpufleet_request_model_prefix 1000"


def test_mode_none_keeps_the_models_balance():
    settings = check({"llama": {"mode": "none", "prefix_bytes": 64}})
    assert by_model(settings)["llama"]["balance"] == "leastconn"
    assert by_model(settings)["llama"]["affinity"] == {}
    assert settings["body_action"] == "gpufleet_request_model"


@pytest.mark.parametrize("field, lowest, highest", [("prefix_bytes", 1, 65536), ("balance_factor", 101, 1000)])
def test_numbers_take_their_bounds_and_refuse_one_beyond(field, lowest, highest):
    for value in (lowest, highest):
        assert by_model(check({"llama": {field: value}}))["llama"]["affinity"][field] == value
    with pytest.raises(ValueError, match=r"^gateway_affinity\[llama\]\.%s: must be at least %d \(got %d\)$"
                       % (field, lowest, lowest - 1)):
        check({"llama": {field: lowest - 1}})
    with pytest.raises(ValueError, match=r"^gateway_affinity\[llama\]\.%s: must be at most %d \(got %d\)$"
                       % (field, highest, highest + 1)):
        check({"llama": {field: highest + 1}})


@pytest.mark.parametrize("value, message", [
    ("prefix", r"^gateway_affinity: must be a mapping of served model name -> \{mode, prefix_bytes, "),
    (["llama"], r"^gateway_affinity: must be a mapping"),
    ({"other": {}}, r"^gateway_affinity: names a model no backend serves \(models: llama, qwen/q-7b\) "
                    r"\(got 'other'\)$"),
    ({"bad name": {}}, r"^gateway_affinity key: must be a served model name"),
    ({"llama": "prefix"}, r"^gateway_affinity\[llama\]: must be a mapping of mode, prefix_bytes, balance_factor, "
                          r"session_header \(got 'prefix'\)$"),
    ({"llama": {"bytes": 64}}, r"^gateway_affinity\[llama\]: unknown field\(s\) bytes; a model's affinity has mode, "),
    ({"llama": {"mode": "hash"}}, r"^gateway_affinity\[llama\]\.mode: must be one of prefix, none \(got 'hash'\)$"),
    ({"llama": {"balance_factor": 0}}, r"^gateway_affinity\[llama\]\.balance_factor: must be at least 101"),
    ({"llama": {"prefix_bytes": True}}, r"^gateway_affinity\[llama\]\.prefix_bytes: must be an integer, not a "),
    ({"llama": {"prefix_bytes": "64 if TRUE"}}, r"^gateway_affinity\[llama\]\.prefix_bytes: must be an integer"),
    ({"llama": {"session_header": "X-Session\n    server evil 6.6.6.6:80"}},
     r"^gateway_affinity\[llama\]\.session_header: must not contain control characters"),
    ({"llama": {"session_header": "X-Session) -m found } || { always_true"}},
     r"^gateway_affinity\[llama\]\.session_header: must be an HTTP header name"),
    ({"llama": {"session_header": "x" * 65}}, r"^gateway_affinity\[llama\]\.session_header: must be an HTTP header"),
])
def test_bad_values_are_refused_with_the_variable_named(value, message):
    with pytest.raises(ValueError, match=message):
        check(value)


def test_the_preflight_check_knows_the_models_it_names():
    """Before a run the plan's models are unknown: gateway_affinity's own
    models stand in, so its settings are checked and a good one passes."""
    def errors(value):
        return variable_check.gateway_errors({"gateway_listen_address": "127.0.0.1", "gateway_affinity": value},
                                             DEFAULTS)
    assert errors({"llama": {"prefix_bytes": 64}, "qwen/q-7b": {}}) == []
    assert errors({"llama": {"balance_factor": 100}}) == [
        "gateway_affinity[llama].balance_factor: must be at least 101 (got 100)"]
    assert errors({"bad name": {}})[0].startswith("gateway_affinity key: must be a served model name")
    assert affinity.DEFAULTS == {"mode": "prefix", "prefix_bytes": 256, "balance_factor": 125, "session_header": ""}
