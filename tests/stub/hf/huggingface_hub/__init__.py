# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A stand-in for huggingface_hub's snapshot_download that needs no network.

Put tests/stub/hf on PYTHONPATH. snapshot_download(repo_id, ...) lays out
what the real one leaves in the hub cache under $HF_HOME/hub:

    models--ORG--NAME/refs/main                      (the commit)
    models--ORG--NAME/blobs/<sha1>                   (one config.json)
    models--ORG--NAME/snapshots/<commit>/config.json -> ../../blobs/<sha1>

and returns the snapshot folder. Every call appends one JSON line to
$HF_HOME/stub-downloads.jsonl: the repository id, the keyword arguments,
sys.argv, the environment and the account it ran as. A repository id with
"missing" in it fails the way the Hub answers an unknown or gated
repository, after leaving a half-made snapshot folder behind; one with
"slow" in it sleeps a minute after that folder (a download that overruns
its time).
"""

import getpass
import hashlib
import json
import os
import sys
import time

__version__ = "0.0.0+stub"


class RepositoryNotFoundError(Exception):
    pass


def snapshot_download(repo_id, revision=None, **kwargs):
    hf_home = os.environ["HF_HOME"]
    record = {"repo_id": repo_id, "revision": revision, "kwargs": kwargs, "argv": sys.argv,
              "environ": dict(os.environ), "uid": os.getuid(), "user": getpass.getuser()}
    os.makedirs(hf_home, exist_ok=True)
    with open(os.path.join(hf_home, "stub-downloads.jsonl"), "a") as out:
        out.write(json.dumps(record) + "\n")
    folder = os.path.join(hf_home, "hub", "models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = os.path.join(folder, "snapshots", commit)
    os.makedirs(snapshot, exist_ok=True)
    if "slow" in repo_id:
        time.sleep(60)
    if "missing" in repo_id:
        raise RepositoryNotFoundError(
            "404 Client Error. Repository Not Found for url: https://huggingface.co/api/models/%s/revision/main.\n"
            "Please make sure you specified the correct `repo_id` and `repo_type`." % repo_id)
    content = json.dumps({"model_type": "stub", "repo_id": repo_id}).encode()
    blob = hashlib.sha1(content).hexdigest()
    os.makedirs(os.path.join(folder, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(folder, "refs"), exist_ok=True)
    with open(os.path.join(folder, "blobs", blob), "wb") as out:
        out.write(content)
    with open(os.path.join(folder, "refs", revision or "main"), "w") as out:
        out.write(commit)
    link = os.path.join(snapshot, "config.json")
    if not os.path.lexists(link):
        os.symlink(os.path.join("..", "..", "blobs", blob), link)
    return snapshot
