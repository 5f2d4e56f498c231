# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A model's config.json on the controller, for the fleet's variable check
(fleet/variable_check.py model_errors): a local path, or the snapshot of the
Hugging Face cache's refs/main.

A file that is there but cannot be read as a config is a problem named
with its path, never a traceback and never a silent skip: a ref that holds
no commit hash (it is joined into a path), a file too large, not JSON or
nested too deeply. Controller only.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import download
from ansible_collections.gpufleet.numa.plugins.plugin_utils import json_text

CONFIG_MAX_BYTES = 4 * 1024 * 1024
# What the hub writes into refs/<branch>: the commit's full hash.
COMMIT_HASH = re.compile(r"[0-9a-f]{40}")


def hub_cache(environ):
    """The Hugging Face cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    return environ.get("HF_HUB_CACHE") or os.path.join(
        environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")


def config_path(model, environ):
    """Where MODEL's config.json is: a local path, or the cached snapshot
    refs/main names; None when it is not at hand. ValueError when the ref
    holds anything but a commit hash."""
    if os.path.isabs(model):
        return os.path.join(model, "config.json")
    if model.count("/") != 1:
        return None
    repo = download.hub_repo_folder(hub_cache(environ), model)
    ref = os.path.join(repo, "refs", "main")
    try:
        with open(ref, "rb") as handle:
            revision = handle.read(200).decode("ascii", "replace").strip()
    except OSError:
        return None
    if not COMMIT_HASH.fullmatch(revision):
        raise ValueError("%s must hold a commit hash, 40 hex digits (got %s)" % (ref, show(revision)))
    return os.path.join(repo, "snapshots", revision, "config.json")


def read_config(path):
    """The parsed config.json at PATH; ValueError names the file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(CONFIG_MAX_BYTES + 1)
    except OSError as exc:
        raise ValueError("%s cannot be read: %s" % (path, exc.strerror or exc))
    if len(data) > CONFIG_MAX_BYTES:
        raise ValueError("%s is larger than %d bytes: not read" % (path, CONFIG_MAX_BYTES))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("%s is not UTF-8 text (byte %d)" % (path, exc.start))
    return json_text.loads(text, path)


def model_configs(models, environ=None):
    """(configs, problems) for the models whose config.json is at hand:
    configs maps model -> (path, parsed config), problems model -> why its
    config could not be read (naming the file)."""
    environ = os.environ if environ is None else environ
    configs, problems = {}, {}
    for model in sorted(set(m for m in models if isinstance(m, str) and m)):
        try:
            path = config_path(model, environ)
            if path is not None and os.path.isfile(path):
                configs[model] = (path, read_config(path))
        except ValueError as exc:
            problems[model] = str(exc)
    return configs, problems
