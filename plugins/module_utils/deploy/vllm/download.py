# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Model weights before start: where vLLM takes vllm_model from, the Hub
cache folder, whether the role downloads it (download_plan) and the
offline environment of the units once it has. Pure functions, standard
library only.
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks


# A Hugging Face Hub repository id (huggingface_hub's validate_repo_id):
# NAME or ORG/NAME of [A-Za-z0-9_.-], no '--' or '..', not starting or
# ending with '-' or '.'.


_HUB_PART = r"(?![-.])(?!.*(?:--|\.\.))[A-Za-z0-9_.-]{1,96}(?<![-.])"


_HUB_ID = r"%s(?:/%s)?" % (_HUB_PART, _HUB_PART)


def model_source(model):
    """Where vLLM takes the model from: "path" (an absolute path on the host),
    "hub" (a Hugging Face Hub repository id, ORG/NAME) or "other" (anything
    else: vLLM would try it as a path relative to its working directory)."""
    if model.startswith("/"):
        return "path"
    if re.fullmatch(_HUB_ID, model):
        return "hub"
    return "other"


def hub_repo_folder(hub_cache, model):
    """The folder huggingface_hub caches a model repository in under its
    cache HUB_CACHE ($HF_HUB_CACHE, or $HF_HOME/hub): HUB_CACHE/models--ORG--NAME.
    The one home of the cache's layout (the role's download, the controller's
    config.json lookup in plugin_utils/model_config.py)."""
    return posixpath.join(hub_cache, "models--" + model.replace("/", "--"))


def hub_cache_folder(hf_home, model):
    """The folder of a model repository under HF_HOME: HF_HOME/hub/models--ORG--NAME."""
    return hub_repo_folder(hf_home + "/hub", model)


def secrets_file(v):
    """The host's secrets.env (0600, the service account's): what every unit
    reads as its EnvironmentFile and where the downloader reads HF_TOKEN."""
    return v["vllm_config_dir"] + "/secrets.env"


def offline_environment(v):
    """HF_HUB_OFFLINE=1 when the role downloads the weights before start:
    the units then load them from HF_HOME and never reach the Hub."""
    if v["vllm_download_weights"] and model_source(v["vllm_model"]) == "hub":
        return [["HF_HUB_OFFLINE", "1"]]
    return []


def download_plan(v, existing):
    """Whether the role downloads vllm_model into vllm_hf_home before any
    unit starts, and with what (existing: path -> stat_paths result on the host,
    None when unknown). A model that is an absolute path, or whose cache
    already has a snapshot folder (downloaded, or seeded by hand), is not
    downloaded. Whether the host can run the download is
    host_state.check_download_python's question."""
    model = v["vllm_model"]
    source = model_source(model)
    folder = hub_cache_folder(v["vllm_hf_home"], model) if source == "hub" else ""
    plan = {"needed": False, "model": model, "hf_home": v["vllm_hf_home"], "folder": folder,
            "snapshots": folder + "/snapshots" if folder else "", "python": v["vllm_download_python"],
            "timeout": v["vllm_download_timeout"], "poll": v["vllm_download_poll"],
            "ignore_patterns": v["vllm_download_ignore_patterns"], "reason": "",
            # the downloader reads HF_TOKEN from here (0600, the service account's): never from argv,
            # stdin or the environment of the task, which async records in a 0644 job file
            "secrets_file": secrets_file(v)}
    if not v["vllm_download_weights"]:
        plan["reason"] = "vllm_download_weights is false"
        return plan
    if source == "path":
        plan["reason"] = "the model is a local path"
        return plan
    if source == "other":
        checks.fail("vllm_model", "must be a Hugging Face repository id (ORG/NAME) or an absolute path while "
                    "vllm_download_weights is true (set it false to pass the model to vLLM as it is)", model)
    prefix = plan["snapshots"] + "/"
    cached = sorted(path for path, entry in (existing or {}).items()
                    if path.startswith(prefix) and "/" not in path[len(prefix):]
                    and (entry.get("isdir") or entry.get("islnk")))
    if cached:
        plan["reason"] = "already in the cache (%s)" % cached[-1]
        return plan
    plan["needed"] = True
    plan["reason"] = "not in %s yet" % plan["snapshots"]
    return plan
