# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Where role vllm's files are on a host, in one place: what the role looks
at before it writes (look_paths, for its one find), and the marker on the
first line of every file it writes (the take-down and the stale-file
cleanup remove only files that start with it).

look_paths reads the role's variables before they are checked (the look
changes nothing; vllm_units then refuses what is wrong), so it only joins
the strings it is given and leaves out what is empty.
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import command
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import download

# Every helper program the role installs into vllm_libexec_dir.
HELPERS = (command.CHECKER, command.WAIT_READY, command.AGENT, command.AGENT_STATE, command.AGENT_WEIGHTS,
           command.AGENT_LIBRARY)
# A snapshot folder in the hub cache is named by a 40-hex commit: the glob
# matches nothing else the role looks at.
SNAPSHOT = "[0-9a-f]" * 40
_GLOB = re.compile(r"[*?[]")


def managed_first_line():
    """A regular expression (Python's, and find's `contains`) that matches a
    text whose first line starts with the role's marker."""
    return r"\A" + re.escape(command.MANAGED_MARKER)


def _text(variables, name):
    value = variables.get(name)
    return "" if value is None or isinstance(value, (dict, list)) else str(value)


def _download_paths(variables):
    """The Python that downloads and the model's snapshot folders, when the
    role downloads the weights of a Hub model."""
    model = _text(variables, "vllm_model")
    wanted = variables.get("vllm_download_weights")
    if not (wanted is True or str(wanted).lower() in ("true", "yes", "on", "1")) or not model or model.startswith("/"):
        return []
    hub = posixpath.join(_text(variables, "vllm_hf_home"), "hub")
    return [_text(variables, "vllm_download_python"),
            posixpath.join(download.hub_repo_folder(hub, model), "snapshots", SNAPSHOT)]


def look_paths(variables):
    """What the role looks at on the host before it writes: the directories
    it creates and their parents, the programs ExecStart runs, the files it
    writes (globs for the per-instance ones) and, with
    vllm_download_weights, the downloader and the model's snapshots."""
    names = ("vllm_config_dir", "vllm_unit_dir", "vllm_libexec_dir", "vllm_state_dir", "vllm_hf_home",
             "vllm_cache_dir")
    config, units, libexec, state, hf_home, cache = (_text(variables, name) for name in names)
    venv, prefix = _text(variables, "vllm_venv"), _text(variables, "vllm_unit_prefix")
    paths = _download_paths(variables) + [config, units, libexec, state, hf_home, cache]
    paths += [posixpath.dirname(path) for path in (state, hf_home, cache)]
    paths += [_text(variables, "vllm_executable"), venv + "/bin/vllm", venv + "/bin/python",
              _text(variables, "vllm_numactl"), download.secrets_file({"vllm_config_dir": config})]
    paths += [posixpath.join(libexec, helper) for helper in HELPERS]
    paths += [posixpath.join(units, prefix + command.AGENT_SOCKET), posixpath.join(config, prefix + "*.yaml"),
              posixpath.join(units, prefix + "*.service")]
    # What stat_paths cannot look at (a relative path, a glob in a folder)
    # is a malformed variable: left out here, named by vllm_units.
    return [path for path in paths if path.startswith("/") and not _GLOB.search(posixpath.dirname(path))]
