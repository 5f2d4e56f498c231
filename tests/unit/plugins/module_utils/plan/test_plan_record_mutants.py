# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plan/record at its edges (scripts/mutation.py plan/record found these
untested): the unused GPUs of hosts that did not converge or were
forgotten, the retired instances of two hosts whose names overlap, the
order of a hand-edited kept plan written back, and the first wrong host
named when several are."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record
# facts is a pytest fixture: used by name, not in the code.
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.plan.test_plan_record import facts  # noqa: F401 pylint: disable=unused-import
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.plan.test_plan_record import (
    FLEET,
    proposal,
    runs,
)


def unused_of(plan, host):
    return [u for u in plan["unused"] if u["host"] == host]


@pytest.fixture()
def half_used(facts):
    """Both hosts recorded with one tp4 instance each: four unused GPUs per host."""
    first = proposal(facts, max_instances_per_host=1)
    assert [len(unused_of(first, h)) for h in FLEET] == [4, 4]
    return plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))


def test_unused_gpus_follow_their_host_through_a_partial_convergence(facts, half_used):
    second = proposal(facts, half_used)  # two instances per host: no GPU unused
    assert second["unused"] == []
    after = plan_record.record_hosts(half_used, second, ["rtx4090"], runs(second, ["rtx4090"]))
    assert unused_of(after, "h100") == unused_of(half_used, "h100")
    assert unused_of(after, "rtx4090") == []
    assert plan_artifact.load_artifact(plan_artifact.dump_artifact(after)) == after


def test_a_forgotten_host_takes_its_unused_gpus_along(half_used):
    forgotten = plan_record.forget_hosts(half_used, ["h100"])
    assert forgotten["unused"] == unused_of(half_used, "rtx4090")
    assert len(forgotten["unused"]) == 4
    assert forgotten["totals"]["gpus_unused"] == 4


def test_retired_instances_are_counted_per_host_when_names_overlap(facts):
    h100 = proposal(facts, hosts=["h100"], tp_size=4)
    rtx = proposal(facts, hosts=["rtx4090"], tp_size=2)
    record = plan_record.record_hosts(None, h100, ["h100"], runs(h100, ["h100"]))
    record = plan_record.record_hosts(record, rtx, ["rtx4090"], runs(rtx, ["rtx4090"]))
    assert [i["name"] for i in record["instances"]] == ["vllm-0", "vllm-1", "vllm-0", "vllm-1", "vllm-2", "vllm-3"]
    narrower = proposal(facts, hosts=["h100"], tp_size=4, max_instances_per_host=1)
    now = {"instances": narrower["instances"] + rtx["instances"]}
    assert [i["name"] for i in narrower["instances"]] == ["vllm-0"]
    assert plan_record.retired_instances(record, now, FLEET) == {"h100": ["vllm-1"]}


def test_a_hand_edited_kept_plan_is_written_back_with_its_unused_gpus_in_index_order(half_used):
    edited = copy.deepcopy(half_used)
    h100 = unused_of(edited, "h100")
    assert [u["index"] for u in h100] == [4, 5, 6, 7]
    # edited out of order, one GPU without index (listed first, before index 0)
    for entry, index in zip(h100, [7, 0, None, 5]):
        entry["index"] = index
    edited["unused"] = h100 + unused_of(edited, "rtx4090")[::-1]
    written = plan_record.forget_hosts(edited, [])
    assert [(u["host"], u["index"]) for u in written["unused"]] == [
        ("h100", None), ("h100", 0), ("h100", 5), ("h100", 7)] + [
        ("rtx4090", u["index"]) for u in unused_of(half_used, "rtx4090")]


def test_several_wrong_hosts_are_all_named_and_the_first_one_shown_as_a_field(facts):
    first = proposal(facts)
    record = plan_record.record_hosts(None, first, FLEET, runs(first, FLEET))
    with pytest.raises(ValueError, match=r"^the kept plan names h100, rtx4090 as GPU host\(s\) \(hosts\.h100\), but "
                                         r"they are the controller or a gateway"):
        plan_record.to_remove(record, [], gateways=FLEET)
