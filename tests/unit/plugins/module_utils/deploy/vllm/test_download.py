# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/download.py: the model's weights before start (where vLLM
takes the model from, whether the role downloads it, the offline
environment of the units).
"""

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import download
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import COMMIT, INSTANCE, SNAPSHOTS, VARIABLES


def environment_of(variables):
    return dict(host_state.host_units([INSTANCE], variables)["units"][0]["environment"])


@pytest.mark.parametrize("model, source", [
    ("meta-llama/Llama-3.1-70B-Instruct", "hub"), ("gpt2", "hub"), ("Qwen/Qwen2.5-0.5B", "hub"),
    ("/srv/models/llama", "path"), ("/", "path"),
    ("org/sub/name", "other"), ("./models/llama", "other"), ("org--x/name", "other"), ("-org/name", "other"),
    ("org/name.", "other"), ("org/na..me", "other"), ("org name/x", "other"), ("", "other"),
])
def test_model_source_tells_hub_ids_from_paths(model, source):
    assert download.model_source(model) == source


def test_hub_models_are_downloaded_and_served_offline():
    result = host_state.host_units([INSTANCE], dict(VARIABLES, existing=[], vllm_install=True, host="gpu-a"))
    download = result["download"]
    assert download["needed"] is True
    assert download["folder"] == SNAPSHOTS[:-len("/snapshots")]
    assert download["snapshots"] == SNAPSHOTS
    assert download["python"] == "/opt/vllm/bin/python"
    assert (download["timeout"], download["poll"], download["ignore_patterns"]) == (14400, 10, ["original/*"])
    assert environment_of(VARIABLES)["HF_HUB_OFFLINE"] == "1"
    # Without the step, vLLM downloads on start as before: no offline flag.
    off = dict(VARIABLES, vllm_download_weights=False)
    assert "HF_HUB_OFFLINE" not in environment_of(off)
    assert host_state.host_units([INSTANCE], off)["download"]["needed"] is False
    # ...and the operator may set it for a cache seeded by hand.
    assert environment_of(dict(off, vllm_environment={"HF_HUB_OFFLINE": "1"}))["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(ValueError, match=r"^vllm_environment key: must not set HF_HUB_OFFLINE while "
                                         r"vllm_download_weights is true"):
        host_state.host_units([INSTANCE], dict(VARIABLES, vllm_environment={"HF_HUB_OFFLINE": "0"}))


def test_local_paths_are_neither_downloaded_nor_offline():
    variables = dict(VARIABLES, vllm_model="/srv/models/llama", vllm_served_model_name="llama", existing=[],
                     vllm_install=False, host="gpu-a")
    result = host_state.host_units([INSTANCE], dict(variables, existing=[
        {"path": "/opt/vllm/bin/vllm", "isreg": True, "xusr": True},
        {"path": "/usr/bin/numactl", "isreg": True, "xusr": True}]))
    assert result["download"]["needed"] is False
    assert result["download"]["reason"] == "the model is a local path"
    assert "HF_HUB_OFFLINE" not in dict(result["units"][0]["environment"])


def test_a_model_that_is_neither_hub_id_nor_path_is_refused_while_downloading():
    with pytest.raises(ValueError, match=r"^vllm_model: must be a Hugging Face repository id \(ORG/NAME\) or an "
                                         r"absolute path while vllm_download_weights is true.*'models/a/b'"):
        host_state.host_units([INSTANCE], dict(VARIABLES, vllm_model="models/a/b"))
    host_state.host_units([INSTANCE], dict(VARIABLES, vllm_model="models/a/b", vllm_download_weights=False))


@pytest.mark.parametrize("entry", [{"isdir": True}, {"islnk": True}])
def test_a_snapshot_in_the_cache_skips_the_download(entry):
    found = [dict(entry, path=SNAPSHOTS + "/" + COMMIT)]
    result = host_state.host_units([INSTANCE], dict(VARIABLES, existing=found, vllm_install=True))
    assert result["download"]["needed"] is False
    assert result["download"]["reason"] == "already in the cache (%s/%s)" % (SNAPSHOTS, COMMIT)
    # Still served offline: the weights are local.
    assert dict(result["units"][0]["environment"])["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize("found", [
    [],  # nothing cached
    [{"path": SNAPSHOTS, "isdir": True}],  # the snapshots folder alone
    [{"path": SNAPSHOTS + "/" + COMMIT, "isreg": True}],  # not a folder
    [{"path": SNAPSHOTS + "/" + COMMIT + "/config.json", "isreg": True}],  # deeper
    [{"path": SNAPSHOTS.replace("70B", "8B") + "/" + COMMIT, "isdir": True}],  # another model
])
def test_anything_but_a_snapshot_folder_downloads(found):
    result = host_state.host_units([INSTANCE], dict(VARIABLES, existing=found, vllm_install=True))
    assert result["download"]["needed"] is True
