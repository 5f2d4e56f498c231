# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The deploy run as AWX and AAP run it (docs/deploy.md, "Under
ansible-runner, AWX and AAP"): `ansible_runner.run` with a private data
directory holding the inventory (the demo fleet's), the repository as the
project, the record in a real three-member etcd cluster (etcd_cluster.py),
twice, each time from a fresh private data directory, as each job of AWX
gets one: the first deploys, the second changes nothing on any host. The
record is in etcd (no plan file anywhere), the Prometheus files in the
directory gpufleet_metrics_dir names, one that outlives the jobs (what a
volume mounted into the execution environment is under AWX: in the private
data directory they would be lost with it, and rewritten, changed, by every
job), and nothing is written outside the private data directory, the
staging directory (the hosts' disks, shared by both jobs), that directory
and etcd: nothing beside the inventory, nothing in the repository's
inventories/. Two playbook runs in all."""

import json
import os
import time

import ansible_runner
import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec
from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    A6000, H100, REPO, RTX, demo_copy, routed, write_inventory)

from etcd_cluster import NEEDS_ETCD, cluster_of

pytestmark = NEEDS_ETCD

PREFIX = "/gpufleet/runner/"
GATEWAY = "demo-gateway"
HOSTS = {A6000, H100, RTX, GATEWAY}
METRICS = {"vllm.json", "gateway.json", "node.json", "rules.yml"}
# What a job leaves in its private data directory: the inventory AWX wrote,
# runner's env/ (the extra and environment variables) and artifacts/ (the
# output and events), and Ansible's temporary folder under HOME (an
# execution environment's HOME is its private data directory, /runner).
PRIVATE = {"inventory", "env", "artifacts", ".ansible"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from cluster_of(tmp_path_factory)


def _tree(top):
    """Every path under top (relative), with the mtime of each file."""
    found = {}
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        for name in dirs + files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, top)] = None if name in dirs else os.lstat(path).st_mtime_ns
    return found


def _job(root, name, endpoints):
    """One job: a fresh private data directory root/name with the demo's
    inventory, the playbook run there by ansible-runner; (the runner, the
    private data directory, its inventory's files before the run, seconds)."""
    private = root / name
    fleet = demo_copy(private)
    write_inventory(fleet, "hosts.yml")
    inventory_before = _tree(fleet["inventory"])
    started = time.monotonic()
    runner = ansible_runner.run(
        private_data_dir=str(private), project_dir=REPO, playbook="playbooks/deploy_inference.yml", quiet=True,
        envvars={"PATH": os.path.join(REPO, ".venv", "bin") + os.pathsep + os.environ["PATH"],
                 "HOME": str(private), "GPUFLEET_REPO": REPO, "GPUFLEET_STAGING": str(root / "staging"),
                 "ANSIBLE_NOCOLOR": "1"},
        extravars={"gpufleet_state_backend": "etcd", "gpufleet_etcd_endpoints": endpoints,
                   "gpufleet_etcd_prefix": PREFIX, "gpufleet_etcd_timeout": 2, "gpufleet_etcd_retry_seconds": 20,
                   "gpufleet_metrics_dir": str(root / "prometheus")})
    return runner, private, inventory_before, time.monotonic() - started


def _out(runner):
    with runner.stdout as handle:
        return " ".join(handle.read().split())


def _record(cluster):
    client = ec.Client(cluster.settings(PREFIX))
    history = ec.history_prefix(PREFIX)
    entries = client.call("/v3/kv/range", {"key": ec.b64(history), "range_end": ec.b64(ec.prefix_end(history)),
                                           "count_only": True})
    return client.get(ec.record_key(PREFIX)), client.get(ec.lock_key(PREFIX)), int(entries.get("count", 0))


@pytest.fixture(scope="module")
def jobs(cluster, tmp_path_factory):
    """Two jobs one after the other, each from its own fresh private data directory."""
    root = tmp_path_factory.mktemp("awx")
    inventories = _tree(os.path.join(REPO, "inventories"))
    first = _job(root, "job-1", cluster.endpoints())
    after_first = _record(cluster)
    second = _job(root, "job-2", cluster.endpoints())
    return {"root": root, "inventories": inventories, "first": first, "second": second,
            "after_first": after_first, "after_second": _record(cluster)}


def _check_job(job):
    runner, private, inventory_before, seconds = job
    assert (runner.status, runner.rc) == ("successful", 0), _out(runner)[-5000:]
    assert set(runner.stats["processed"]) == HOSTS, runner.stats
    assert not runner.stats["failures"] and not runner.stats["dark"], runner.stats
    # Nothing beside the inventory or in it: no plan, reports, exports or
    # Prometheus files in <inventory>.gpufleet/, no file added or changed.
    assert sorted(os.listdir(private)) == sorted(PRIVATE), os.listdir(private)
    assert _tree(private / "inventory") == inventory_before
    return runner, seconds


def test_the_first_job_deploys_the_fleet_with_its_record_in_etcd(jobs):
    runner, seconds = _check_job(jobs["first"])
    print("first job (ansible-runner, fresh private data directory): %.1f s" % seconds)
    assert all(runner.stats["changed"].get(host, 0) > 0 for host in HOSTS), runner.stats
    record, lock, history = jobs["after_first"]
    assert record is not None and lock is None and history == 1
    assert sorted(json.loads(record["value"])["hosts"]) == sorted([A6000, H100, RTX])
    # The hosts' disks: their files, and no plan file (the record is in etcd).
    fleet = {"staging": jobs["root"] / "staging"}
    assert sorted(os.listdir(fleet["staging"])) == sorted(HOSTS)
    assert sorted(os.listdir(jobs["root"] / "prometheus")) == sorted(METRICS)
    assert {server.split("-vllm-")[0] for server, dummy in routed(fleet)} == {A6000, H100, RTX}
    assert "etcd %srecord at" % PREFIX in _out(runner)


def test_a_second_job_from_a_fresh_private_data_directory_changes_nothing(jobs):
    runner, seconds = _check_job(jobs["second"])
    print("second job (ansible-runner, fresh private data directory, no change): %.1f s" % seconds)
    assert set(runner.stats["changed"].values()) <= {0}, runner.stats
    record, again = jobs["after_first"][0], jobs["after_second"][0]
    # Nothing written: the same revision of the record, no history entry more, the lock freed.
    assert again["mod_revision"] == record["mod_revision"], (record, again)
    assert jobs["after_second"][1:] == (None, jobs["after_first"][2])
    assert sorted(os.listdir(jobs["root"] / "staging")) == sorted(HOSTS)
    # Each job wrote only in its own private data directory: job 1's is as it left it.
    assert sorted(os.listdir(jobs["root"])) == ["job-1", "job-2", "prometheus", "staging"]


def test_nothing_is_written_in_the_repositorys_inventories(jobs):
    assert _tree(os.path.join(REPO, "inventories")) == jobs["inventories"]
