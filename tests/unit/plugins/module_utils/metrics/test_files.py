# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""metrics/files.py: the four files of gpufleet_metrics_dir from one
record, as their own functions make them, and options checked by name;
which of them differ from a real directory, as stat_paths sees it."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import files, prometheus, rules, targets
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES

DGX2 = facts_from_capture(os.path.join(MACHINES, "dgx2_v100_16gpu_nvswitch", "capture.yml"))


def options(**changes):
    gateway = {"listen": "127.0.0.1", "port": 8405, "reach": "10.0.0.2"}
    found = {"addresses": {"gpu-a": "10.0.0.11"}, "gateways": {"lb": gateway},
             "nodes": {"gpu-a": "10.0.0.11", "lb": "10.0.0.2"}, "node_exporter_port": 9100, "down_for": "2m"}
    found.update(changes)
    return found


def record():
    plan = placement.plan_fleet({"gpu-a": copy.deepcopy(DGX2)}, tp_size=8)
    for instance in plan["instances"]:
        instance["served_model_name"] = "llama"
    return plan


def test_the_four_files_from_one_record():
    written = files.metrics_files(record(), options())
    assert written == {
        "vllm.json": targets.vllm_targets(record(), {"gpu-a": "10.0.0.11"}),
        "gateway.json": [{"targets": ["127.0.0.1:8405"], "labels": {"host": "lb", "instance": "lb/gateway"}}],
        "node.json": prometheus.node_targets({"gpu-a": "10.0.0.11", "lb": "10.0.0.2"}, 9100),
        "rules.yml": rules.alert_rules("2m"),
    }
    assert sorted(written) == sorted(list(prometheus.TARGET_FILES.values()) + [prometheus.RULE_FILE])
    assert len(written["vllm.json"]) == 2


@pytest.mark.parametrize("changed, message", [
    (dict(options(), extra=1), r"unknown option\(s\) extra"),
    (dict((k, v) for k, v in options().items() if k != "down_for"), r"missing option\(s\) down_for"),
    ("options", "options must be a mapping"),
    (options(down_for="soon"), "gpufleet_alert_down_for"),
])
def test_options_are_checked_by_name(changed, message):
    with pytest.raises(ValueError, match=message):
        files.metrics_files(record(), changed)


def test_only_the_files_that_differ_on_disk_are_to_be_written(tmp_path):
    """Against what the stat_paths module itself finds in a real directory."""
    from ansible_collections.gpufleet.numa.plugins.modules.stat_paths import stat_paths

    directory = str(tmp_path / "prometheus")
    wanted = {"vllm.json": "[]\n", "rules.yml": "groups: []\n", "node.json": "[{}]\n"}

    def look():
        return stat_paths([directory, directory + "/*"], 1 << 20)

    assert files.to_write(wanted, directory, look(), "0644") == {"create_directory": True, "files": wanted}
    os.mkdir(directory)
    for name, text in wanted.items():
        with open(os.path.join(directory, name), "w") as out:
            out.write(text)
        os.chmod(os.path.join(directory, name), 0o644)
    assert files.to_write(wanted, directory + "/", look(), "0644") == {"create_directory": False, "files": {}}
    # A directory reached through a link (an operator's shared folder) is used as it is.
    link = str(tmp_path / "link")
    os.symlink(directory, link)
    assert files.to_write(wanted, link, stat_paths([link, link + "/*"], 1 << 20), "0644") == {
        "create_directory": False, "files": {}}
    # One file's content, another's mode, a third missing.
    with open(os.path.join(directory, "vllm.json"), "w") as out:
        out.write("[1]\n")
    os.chmod(os.path.join(directory, "rules.yml"), 0o600)
    os.unlink(os.path.join(directory, "node.json"))
    assert files.to_write(wanted, directory, look(), "0644") == {"create_directory": False, "files": wanted}
    with pytest.raises(ValueError, match="is not a directory"):
        files.to_write(wanted, directory + "/rules.yml", look(), "0644")
    with pytest.raises(ValueError, match="files must map file name -> text"):
        files.to_write({"vllm.json": []}, directory, [], "0644")
    with pytest.raises(ValueError, match="looked must be stat_paths's files"):
        files.to_write(wanted, directory, {"files": []}, "0644")
