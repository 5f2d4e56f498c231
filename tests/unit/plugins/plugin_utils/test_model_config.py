# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A model's config.json on the controller: a local path or the Hugging
Face cache's refs/main snapshot; every file that is there but unreadable
is a problem naming it, and the fleet's variable check says it for each
host of that model, never a traceback."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.filter import variable_check
from ansible_collections.gpufleet.numa.plugins.plugin_utils import model_config

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DEEP = '{"text_config": ' * 100000 + "{}" + "}" * 100000


def cached(tmp_path, ref, config='{"num_attention_heads": 8, "num_hidden_layers": 4}'):
    """A hub cache holding org/tiny, its refs/main reading REF; the environment that points at it."""
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(ref)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(config)
    return {"HF_HUB_CACHE": str(tmp_path / "hub")}


def test_a_cached_snapshot_and_a_local_model(tmp_path):
    environ = cached(tmp_path, COMMIT + "\n")
    local = tmp_path / "llama"
    local.mkdir()
    (local / "config.json").write_text('{"num_attention_heads": 64}')
    configs, problems = model_config.model_configs(["org/tiny", str(local), "org/absent", "no-slash", None], environ)
    assert problems == {}
    assert configs == {
        "org/tiny": (str(tmp_path / "hub" / "models--org--tiny" / "snapshots" / COMMIT / "config.json"),
                     {"num_attention_heads": 8, "num_hidden_layers": 4}),
        str(local): (str(local / "config.json"), {"num_attention_heads": 64})}


def test_the_cache_location_follows_the_hub_variables(tmp_path):
    assert model_config.hub_cache({"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}) == "/c"
    assert model_config.hub_cache({"HF_HOME": "/h"}) == "/h/hub"


@pytest.mark.parametrize("ref", ["../../../../etc", "main", COMMIT[:39], COMMIT + "0", COMMIT.upper(),
                                 COMMIT[:20] + "/" + COMMIT[21:], ""])
def test_a_ref_that_is_no_commit_hash_is_not_joined_into_a_path(tmp_path, ref):
    environ = cached(tmp_path, ref)
    configs, problems = model_config.model_configs(["org/tiny"], environ)
    ref_file = tmp_path / "hub" / "models--org--tiny" / "refs" / "main"
    assert configs == {}
    assert problems["org/tiny"].startswith("%s must hold a commit hash, 40 hex digits (got " % ref_file)


@pytest.mark.parametrize("config, problem", [
    (DEEP, "nests lists or objects deeper than 32 levels: not read"),
    ('{"num_attention_heads": ', "is not JSON: "),
    ("x" * (model_config.CONFIG_MAX_BYTES + 1), "is larger than 4194304 bytes: not read"),
])
def test_an_unreadable_config_is_a_problem_naming_the_file(tmp_path, config, problem):
    environ = cached(tmp_path, COMMIT, config)
    configs, problems = model_config.model_configs(["org/tiny"], environ)
    path = tmp_path / "hub" / "models--org--tiny" / "snapshots" / COMMIT / "config.json"
    assert configs == {} and problems["org/tiny"].startswith("%s %s" % (path, problem))


def test_the_fleet_check_names_the_deep_config_for_each_of_its_hosts(tmp_path, monkeypatch):
    """The probe: one deeply nested config.json used to fail the whole check
    with a bare 'maximum recursion depth'."""
    model = tmp_path / "deep"
    model.mkdir()
    (model / "config.json").write_text(DEEP)
    hostvars = {"gpu-a": {"vllm_model": str(model)}, "gpu-b": {"vllm_model": str(model)}, "gpu-c": {}}
    errors = variable_check.variable_errors(hostvars, ["gpu-a", "gpu-b", "gpu-c"])
    named = [e for e in errors if "config.json" in e]
    # one error of two hosts: said once, naming both
    assert named == ["gpu-a, gpu-b: vllm_model: %s/config.json nests lists or objects deeper than 32 levels: not read"
                     % model]
    assert not [e for e in errors if "recursion" in e]


def test_the_fleet_check_does_not_follow_a_ref_out_of_the_cache(tmp_path, monkeypatch):
    """The probe: refs/main holding '../../../outside' made the check read
    tmp/outside/config.json, a file outside the cache."""
    environ = cached(tmp_path, "../../../outside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text('{"num_attention_heads": 3}')
    monkeypatch.setenv("HF_HUB_CACHE", environ["HF_HUB_CACHE"])
    errors = variable_check.variable_errors({"gpu-a": {"vllm_model": "org/tiny", "gpufleet_tp_size": 2}}, ["gpu-a"])
    ref_file = tmp_path / "hub" / "models--org--tiny" / "refs" / "main"
    assert [e for e in errors if "org/tiny" in e or "refs" in e or "attention" in e] == [
        "gpu-a: vllm_model: %s must hold a commit hash, 40 hex digits (got '../../../outside')" % ref_file]
