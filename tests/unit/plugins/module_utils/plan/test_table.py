# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plan/table.py on its own, over plans the planner makes from recorded
machines: the columns, the NODE column of multi-node plans, unused GPUs,
the totals line, and a ValueError naming the instance and the field."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import table
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES


def machine(name):
    return facts_from_capture(os.path.join(MACHINES, name, "capture.yml"))


H100 = machine("h100_sxm_8gpu_nvswitch")
# One of its two GPUs has an N/A NUMA affinity: it stays unused.
RTX3090 = machine("rtx3090_2gpu_threadripper_numa_na")


def test_one_host_plan_rows_unused_and_totals():
    plan = placement.plan_fleet({"gpu-a": RTX3090}, tp_size=1)
    lines = table.plan_table(plan)
    assert lines[0].split() == [c.title for c in table.COLUMNS]
    assert lines[1].split() == ["gpu-a", "vllm-0", "-", "1", "1", "8-15,24-31", "bind", "-", "1x1", "8000"]
    assert lines[2] == ("unused: gpu-a GPU 0 (GPU0): NUMA node unknown (numa_node is null): cannot be placed "
                        "socket-locally")
    assert lines[3] == "gpus 2, gpus unused 1, gpus used 1, hosts 1, instances 1"
    assert len(lines) == 4


def test_cpu_instances_show_cpu_in_the_gpus_column():
    plan = placement.plan_fleet({"cpu-a": machine("this_machine_ci")}, tp_size=1, device_class="cpu")
    lines = table.plan_table(plan)
    assert lines[1].split() == ["cpu-a", "vllm-0", "-", "cpu", "0", "0-1", "bind", "-", "1x1", "8000"]
    assert lines[2] == "gpus 0, gpus unused 0, gpus used 0, hosts 1, instances 1"


def test_model_column_shows_the_served_name_else_the_model():
    # A kept record carries each instance's model and served name (host_settings).
    plan = placement.plan_fleet({"gpu-a": copy.deepcopy(H100)}, tp_size=4)
    plan["instances"][0].update(model="org/Llama-3-70B", served_model_name="llama")
    plan["instances"][1].update(model="org/Qwen-72B", served_model_name="")
    lines = table.plan_table(plan)
    start = lines[0].index("MODEL")
    assert lines[0].split()[:3] == ["HOST", "INSTANCE", "MODEL"]
    assert [line[start:].split()[0] for line in lines[1:3]] == ["llama", "org/Qwen-72B"]


def test_columns_are_aligned_over_every_row():
    fleet = {"gpu-a": copy.deepcopy(H100), "gpu-long-host-name": copy.deepcopy(H100)}
    lines = table.plan_table(placement.plan_fleet(fleet, tp_size=2))
    rows = lines[:1 + 8]
    for title in ("INSTANCE", "GPUS", "CPUS", "PORT"):
        start = rows[0].index(title)
        assert all(row[start - 2:start] == "  " and row[start] != " " for row in rows), title
    assert rows[-1].split()[:2] == ["gpu-long-host-name", "vllm-3"]


def test_multinode_plan_adds_the_node_column():
    fleet = dict((h, copy.deepcopy(H100)) for h in ("gpu-a", "gpu-b", "gpu-c", "gpu-d"))
    lines = table.plan_table(placement.plan_fleet(fleet, tp_size=4, pp_size=4, nodes_per_instance=2))
    assert lines[0].split()[-1] == table.NODE_COLUMN.title == "NODE"
    assert [line.split("8000")[1].strip() for line in lines[1:5]] == ["0/2 gpu-a", "1/2 gpu-a", "0/2 gpu-c", "1/2 gpu-c"]
    assert lines[5] == "gpus 32, gpus unused 0, gpus used 32, hosts 4, instances 2"


def test_no_totals_and_no_unused_lines_when_the_plan_has_none():
    plan = placement.plan_fleet({"gpu-a": H100}, tp_size=4)
    plan.pop("totals")
    lines = table.plan_table(plan)
    assert len(lines) == 3 and lines[2].split()[:4] == ["gpu-a", "vllm-1", "-", "4,5,6,7"]
    assert table.plan_table({"instances": []}) == [table.plan_table({"instances": []})[0]]


@pytest.mark.parametrize("field", ["cpus", "gpu_indices", "numa_nodes", "worst_link", "port"])
def test_an_instance_without_a_field_names_it(field):
    plan = placement.plan_fleet({"gpu-a": H100}, tp_size=4)
    del plan["instances"][0][field]
    with pytest.raises(ValueError, match=r"^plan instance 'vllm-0' lacks field '%s'$" % field):
        table.plan_table(plan)


@pytest.mark.parametrize("plan", [None, [], {"instances": None}, {"unused": []}])
def test_a_non_plan_names_plan_table(plan):
    with pytest.raises(ValueError, match=r"^plan_table expects the dict returned by fleet_plan"):
        table.plan_table(plan)


def test_record_diff_table_shows_changed_added_and_removed_instances_only():
    before = placement.plan_fleet({"gpu-a": copy.deepcopy(H100)}, tp_size=4)
    after = copy.deepcopy(before)
    after["instances"][1]["port"] = 9001
    after["instances"].append(dict(after["instances"][0], host="gpu-b"))
    lines = table.record_diff_table(before, after)
    assert lines[0].split()[:3] == ["HOST", "INSTANCE", "MODEL"]
    assert [line.split()[:3] for line in lines[1:4]] == [
        ["-", "gpu-a", "vllm-1"], ["+", "gpu-a", "vllm-1"], ["+", "gpu-b", "vllm-0"]]
    assert lines[4] == "1 instance unchanged" and len(lines) == 5
    assert table.record_diff_table(before, before) == ["2 instances unchanged"]
    # under --check it says the record is not written
    assert table.record_diff_table(before, after, check_mode=True) == [
        "check mode: the record would change so; it is not written"] + lines
