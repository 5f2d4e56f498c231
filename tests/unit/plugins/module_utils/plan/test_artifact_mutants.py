# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The plan artifact at its edges: the size limit held where it moves by one,
each file kind read_plan_file refuses, options typed, plans combined and
sorted exactly (scripts/mutation.py plan/artifact found these untested)."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as pa

EMPTY = {"artifact_version": 1, "instances": [], "unused": [], "warnings": [], "hosts": {}}


def test_named_limits_are_pinned():
    assert pa.ARTIFACT_VERSION == 1
    assert pa.PLAN_MAX_BYTES == 64 * 1024 * 1024 == 67108864


def test_read_plan_file_missing_is_none(tmp_path):
    assert pa.read_plan_file(str(tmp_path / "none.json")) is None


def test_read_plan_file_takes_max_bytes_and_refuses_one_more(tmp_path):
    path = tmp_path / "plan.json"
    path.write_bytes(b"x" * 10)
    assert pa.read_plan_file(str(path), max_bytes=10) == "x" * 10
    with pytest.raises(ValueError, match=r"^plan file %s cannot be read: it is larger than 9 bytes$" % path):
        pa.read_plan_file(str(path), max_bytes=9)


def test_read_plan_file_default_limit_is_plan_max_bytes(tmp_path):
    path = tmp_path / "plan.json"
    with open(path, "wb") as handle:
        handle.truncate(pa.PLAN_MAX_BYTES)  # sparse: no 64 MiB written
    assert len(pa.read_plan_file(str(path))) == pa.PLAN_MAX_BYTES
    with open(path, "ab") as handle:
        handle.write(b" ")
    with pytest.raises(ValueError, match=r"it is larger than 67108864 bytes$"):
        pa.read_plan_file(str(path))


def test_read_plan_file_refuses_what_is_no_plan(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"^plan file %s is empty \(a kept plan never is\)" % empty):
        pa.read_plan_file(str(empty))
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(ValueError, match=r"^plan file %s is not UTF-8 text \(byte 7\)$" % latin):
        pa.read_plan_file(str(latin))
    with pytest.raises(ValueError, match=r"^plan file %s cannot be read: it is a directory, not a regular file$"
                       % tmp_path):
        pa.read_plan_file(str(tmp_path))
    dangling = tmp_path / "dangling.json"
    os.symlink("nowhere.json", str(dangling))
    with pytest.raises(ValueError, match=r"cannot be read: it is a symbolic link to 'nowhere.json', which does not"):
        pa.read_plan_file(str(dangling))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(str(fifo))
    with pytest.raises(ValueError, match=r"cannot be read: it is a FIFO"):
        pa.read_plan_file(str(fifo))
    below = tmp_path / "file" / "plan.json"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"^plan file %s cannot be read: .*\(ENOTDIR\)$" % below):
        pa.read_plan_file(str(below))


def test_load_artifact_text_limit_and_forms():
    with pytest.raises(ValueError, match=r"^plan file p is larger than 67108864 bytes$"):
        pa.load_artifact("x" * (pa.PLAN_MAX_BYTES + 1), "p")  # whitespace only would be no plan
    with pytest.raises(ValueError, match=r"^plan file p must hold a JSON object"):
        pa.load_artifact(" " * (pa.PLAN_MAX_BYTES - 2) + "[]", "p")
    assert pa.load_artifact("  \n") is None
    assert pa.load_artifact(dict(EMPTY))["hosts"] == {}
    assert pa.load_artifact(json.dumps(EMPTY))["instances"] == []
    with pytest.raises(ValueError, match=r"^plan file p: its content must be JSON text, got list$"):
        pa.load_artifact(["x"], "p")
    with pytest.raises(ValueError, match=r"^plan file p nests too deeply to be a plan$"):
        pa.load_artifact("[" * 100000 + "]" * 100000, "p")


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_load_artifact_reads_version_one_only(version):
    with pytest.raises(ValueError, match=r"^plan file p has artifact_version .*; this collection reads version 1$"):
        pa.load_artifact(dict(EMPTY, artifact_version=version), "p")


def test_require_artifact():
    assert pa.require_artifact(json.dumps(EMPTY))["artifact_version"] == 1
    with pytest.raises(ValueError, match=r"^no deployed plan at p: run the playbook"):
        pa.require_artifact("", "p")


@pytest.mark.parametrize("plan, message", [
    ([], r"^w must be the mapping fleet_plan returns, got list$"),
    ({"instances": [], "unused": [], "warnings": {}}, r"^w: warnings must be a list$"),
    ({"instances": [], "unused": [{"host": 1}], "warnings": []}, r"^w: instance or unused GPU 0 has no host$"),
    ({"instances": [{"host": "a"}], "unused": ["x"], "warnings": []}, r"^w: instance or unused GPU 1 has no host$"),
])
def test_combine_plans_checks_each_plan(plan, message):
    with pytest.raises(ValueError, match=message.replace("w", "a fleet plan", 1)):
        pa.combine_plans([plan])


def _note(host, text):
    return {"host": host, "text": text, "gpus": [], "nodes": []}


def test_combine_plans_sorts_and_sums():
    first = {"instances": [{"host": "b", "ordinal": 1}, {"host": "b"}], "unused": [{"host": "b", "index": 0}],
             "warnings": [_note("b", "late")],
             "totals": {"hosts": 1, "instances": 2, "gpus": 4, "gpus_used": 3, "gpus_unused": 1}}
    second = {"instances": [{"host": "a", "ordinal": 0}], "unused": [{"host": "b", "index": None}],
              "warnings": [_note("a", "early")], "totals": {"hosts": "2", "instances": 1}}
    third = {"instances": [], "unused": [], "warnings": [], "totals": None}
    combined = pa.combine_plans([first, second, third])
    assert combined["instances"] == [{"host": "a", "ordinal": 0}, {"host": "b"}, {"host": "b", "ordinal": 1}]
    assert combined["unused"] == [{"host": "b", "index": None}, {"host": "b", "index": 0}]
    assert combined["warnings"] == [_note("a", "early"), _note("b", "late")]
    assert combined["totals"] == {"hosts": 3, "instances": 3, "gpus": 4, "gpus_used": 3, "gpus_unused": 1}
    assert pa.combine_plans([])["totals"] == dict.fromkeys(("hosts", "instances", "gpus", "gpus_used",
                                                            "gpus_unused"), 0)


def test_dump_artifact_is_sorted_indented_and_ends_in_a_newline():
    assert pa.dump_artifact({"b": 1, "a": [2]}) == '{\n "a": [\n  2\n ],\n "b": 1\n}\n'


def test_hardware_record_orders_gpus_by_index_then_id():
    facts = {"gpus": [{"id": "c", "index": None}, {"id": "b", "index": 1}, {"id": "d", "index": 0},
                      {"id": "a", "index": 0}, {"id": "e"}],
             "numa_nodes": [{"id": 1, "cpus": "4-7"}, {"id": 0, "cpus": "0-3"}, {"id": 2, "cpus": None}]}
    assert pa.hardware_record(facts) == {"gpus": [["a", 0], ["d", 0], ["b", 1], ["c", None], ["e", None]],
                                         "numa_nodes": [0, 1, 2], "cpus": "0-7"}
    assert pa.hardware_record({}) == {"gpus": [], "numa_nodes": [], "cpus": ""}


def _fresh(hosts, **extra):
    plan = {"instances": [{"host": h, "ordinal": 0, "gpus": [{"id": "g0"}, {"id": "g1"}]} for h in hosts],
            "unused": [{"host": h, "index": 2} for h in hosts], "warnings": [_note(h, "note") for h in hosts]}
    plan.update(extra)
    return plan


def test_merge_plans_counts_gpus_and_types_options():
    merged = pa.merge_plans(_fresh(["a"], settings={"a": {"tp_size": " 2 ", "allow_span": "Yes", "model": "m",
                                                          "allow_x": "yes"}},
                                   hardware={"a": {"gpus": []}}), None, ["a"], ["a"])
    assert merged["plan"]["hosts"] == {"a": {"gpus": 3, "options": {"tp_size": 2, "allow_span": True, "model": "m",
                                                                    "allow_x": "yes"},
                                             "hardware": {"gpus": []}}}
    assert merged["plan"]["totals"]["gpus"] == 3 and merged["plan"]["totals"]["hosts"] == 1
    assert merged["plan"]["warnings"] == [_note("a", "note")]
    off = pa.merge_plans(_fresh(["a"], settings={"a": {"allow_span": "off"}, "b": {}}), None, ["a"], ["a"])
    assert off["plan"]["hosts"]["a"]["options"] == {"allow_span": False}
    plain = pa.merge_plans(_fresh(["a"], settings={"b": {}}, hardware={"b": {}}), None, ["a"], ["a"])
    assert plain["plan"]["hosts"]["a"] == {"gpus": 3}


def test_merge_plans_keeps_unreached_hosts_with_their_warnings():
    first = pa.merge_plans(_fresh(["a", "b"]), None, ["a", "b"], ["a", "b"])["plan"]
    again = pa.merge_plans(_fresh(["b"]), first, ["b"], ["a", "b", "c"])
    assert (again["kept"], again["replanned"], again["not_planned"], again["dropped"]) == (["a"], ["b"], ["c"], [])
    assert again["plan"]["warnings"] == [_note("a", "note"), _note("b", "note")]
    assert [u["host"] for u in again["plan"]["unused"]] == ["a", "b"]
    assert again["plan"]["totals"] == {"hosts": 2, "instances": 2, "gpus": 6, "gpus_used": 4, "gpus_unused": 2}


@pytest.mark.parametrize("extra, message", [
    ({"settings": ["a"]}, r"^the fresh plan's settings must map host -> options$"),
    ({"hardware": "a"}, r"^the fresh plan's hardware must map host -> record$"),
])
def test_merge_plans_refuses_bad_settings_and_hardware(extra, message):
    with pytest.raises(ValueError, match=message):
        pa.merge_plans(_fresh(["a"], **extra), None, ["a"], ["a"])


def test_merge_plans_refuses_bad_fresh_plans():
    with pytest.raises(ValueError, match=r"^re-planned hosts not in the fleet: x, y$"):
        pa.merge_plans(_fresh([]), None, ["y", "x"], ["a"])
    with pytest.raises(ValueError, match=r"^the fresh plan holds hosts that were not re-planned: a$"):
        pa.merge_plans(_fresh(["a"]), None, [], ["a"])
