# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""JSON files read as JSON, bounded in depth, every error naming the file."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.plugin_utils import json_text


def nested(levels):
    return "[" * levels + "]" * levels


def test_json_numbers_stay_numbers():
    assert json_text.loads('{"gbps": 1e-05, "tiny": 5e-324, "n": [1, 2.5]}', "plan.json") == {
        "gbps": 1e-05, "tiny": 5e-324, "n": [1, 2.5]}


@pytest.mark.parametrize("levels", [json_text.MAX_DEPTH + 1, 5000, 200000])
def test_too_deep_is_refused_naming_the_file(levels):
    with pytest.raises(ValueError, match=r"^/m/config\.json nests lists or objects deeper than 32 levels: not read$"):
        json_text.loads(nested(levels), "/m/config.json")


def test_the_limit_itself_is_read():
    assert json_text.too_deep(json_text.loads(nested(json_text.MAX_DEPTH), "f"), json_text.MAX_DEPTH) is False
    assert json_text.loads('{"a": ' * 32 + "1" + "}" * 32, "f") is not None
    with pytest.raises(ValueError, match="deeper than 32"):
        json_text.loads('{"a": ' * 33 + "1" + "}" * 33, "f")


def test_scalars_and_empty_containers():
    assert json_text.too_deep(7, 0) is False
    assert json_text.too_deep([], 1) is False and json_text.too_deep([[]], 1) is True
    assert json_text.too_deep({"a": {}}, 1) is True


@pytest.mark.parametrize("text", ["", "{", "{'a': 1}", "1e-05: x", "\ufeff{}"])
def test_not_json_names_the_file(text):
    with pytest.raises(ValueError, match=r"^plan\.json is not JSON: "):
        json_text.loads(text, "plan.json")
