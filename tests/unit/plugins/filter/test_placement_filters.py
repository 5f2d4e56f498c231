# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The socket_local_groups and fleet_plan filters: called directly, and through a real ansible-playbook."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.placement import FilterModule, fleet_plan, socket_local_groups
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.test_placement_hosts import (
    h100_nvswitch,
    ndv4_like,
)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def test_filter_module_exposes_both_filters():
    filters = FilterModule().filters()
    assert filters["socket_local_groups"] is socket_local_groups
    assert filters["fleet_plan"] is fleet_plan


def test_socket_local_groups_positional_tp_size():
    plan = socket_local_groups(h100_nvswitch(), 4)
    assert [g["gpu_indices"] for g in plan["groups"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_socket_local_groups_rejects_unknown_keyword():
    with pytest.raises(AnsibleFilterError, match="socket_local_groups: unknown option\\(s\\): tp"):
        socket_local_groups(h100_nvswitch(), 4, tp=2)


def test_socket_local_groups_rejects_fleet_only_option():
    with pytest.raises(AnsibleFilterError, match="unknown option\\(s\\): base_port"):
        socket_local_groups(h100_nvswitch(), 4, base_port=9000)


@pytest.mark.parametrize("tp", [None, 0, -2, "four", "4.0", 2.0, True])
def test_socket_local_groups_rejects_bad_tp_size(tp):
    with pytest.raises(AnsibleFilterError, match="tp_size"):
        socket_local_groups(h100_nvswitch(), tp)


def test_filters_accept_numbers_and_booleans_given_as_strings():
    # -e gpufleet_tp_size=4 on the command line arrives as a string
    plan = socket_local_groups(h100_nvswitch(), "8", allow_span="yes", reserved_cpus_per_socket="1")
    assert plan["groups"][0]["gpu_indices"] == list(range(8))
    fleet = fleet_plan({"a": h100_nvswitch()}, tp_size="4", base_port="9000")
    assert [i["port"] for i in fleet["instances"]] == [9000, 9001]
    with pytest.raises(AnsibleFilterError, match="allow_span must be a boolean"):
        socket_local_groups(h100_nvswitch(), 4, allow_span="maybe")


def test_socket_local_groups_strict_failure_is_a_filter_error_naming_host():
    with pytest.raises(AnsibleFilterError, match="host gpu-a: tp_size 8 does not fit on any socket"):
        socket_local_groups(h100_nvswitch("gpu-a"), 8)


def test_socket_local_groups_missing_facts():
    with pytest.raises(AnsibleFilterError, match="schema_version is None"):
        socket_local_groups({}, 2)


def test_fleet_plan_hostvars_mapping_and_hosts_option():
    hostvars = {
        "gpu-a": {"ansible_facts": {"numa_topology": h100_nvswitch()}, "ansible_host": "10.0.0.1"},
        "gpu-b": {"numa_topology": ndv4_like()},
        "lb": {"ansible_host": "10.0.0.9"},
    }
    fleet = fleet_plan(hostvars, tp_size=2, hosts=["gpu-a", "gpu-b"])
    assert fleet["totals"] == {"hosts": 2, "instances": 8, "gpus": 16, "gpus_used": 16, "gpus_unused": 0}
    with pytest.raises(AnsibleFilterError, match="fleet_plan: host lb: no topology facts"):
        fleet_plan(hostvars, tp_size=2)


def test_fleet_plan_rejects_unknown_keyword_naming_it():
    with pytest.raises(AnsibleFilterError, match="unknown option\\(s\\): base_prot"):
        fleet_plan({"a": h100_nvswitch()}, tp_size=2, base_prot=9000)


def test_fleet_plan_rejects_non_mapping_input():
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        fleet_plan([h100_nvswitch()], tp_size=2)


def test_fleet_plan_through_ansible_playbook_with_hostvars(tmp_path):
    """hostvars and templated (tagged) values as Ansible really passes them."""
    facts_dir = tmp_path / "facts"
    facts_dir.mkdir()
    for host, facts in (("gpu-a", h100_nvswitch("gpu-a")), ("gpu-b", ndv4_like("gpu-b"))):
        (facts_dir / (host + ".yml")).write_text(yaml.safe_dump({"numa_topology": facts}))
    (tmp_path / "inventory.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"gpu-a": {}, "gpu-b": {}, "lb": {}},
                    "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                }
            }
        )
    )
    out = tmp_path / "plan.json"
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "gpu-a:gpu-b",
                    "gather_facts": False,
                    "tasks": [
                        {"ansible.builtin.include_vars": {"file": str(facts_dir) + "/{{ inventory_hostname }}.yml"}},
                        {"ansible.builtin.set_fact": {"numa_topology": "{{ numa_topology }}"}},
                    ],
                },
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "ansible.builtin.copy": {
                                "dest": str(out),
                                "content": "{{ hostvars | gpufleet.numa.fleet_plan(tp_size=2, hosts=['gpu-a', 'gpu-b'],"
                                " exclude_gpus={'gpu-b': ['0000:0b:00.0']}) | to_json }}",
                            }
                        },
                        {
                            "ansible.builtin.debug": {
                                "msg": "{{ hostvars['gpu-a'].numa_topology | gpufleet.numa.socket_local_groups(4) }}"
                            }
                        },
                    ],
                },
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"), ANSIBLE_NOCOLOR="1")
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    result = subprocess.run(
        [playbook, "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml")],
        env=env, capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    fleet = json.loads(out.read_text())
    assert [(i["host"], i["name"], i["gpu_indices"], i["numa_nodes"]) for i in fleet["instances"]] == [
        ("gpu-a", "vllm-0", [0, 1], [0]),
        ("gpu-a", "vllm-1", [2, 3], [0]),
        ("gpu-a", "vllm-2", [4, 5], [1]),
        ("gpu-a", "vllm-3", [6, 7], [1]),
        ("gpu-b", "vllm-0", [2, 3], [0]),
        ("gpu-b", "vllm-1", [4, 5], [3]),
        ("gpu-b", "vllm-2", [6, 7], [2]),
    ]
    assert fleet["unused"] == [{"host": "gpu-b", "id": "0000:0b:00.0", "index": 0, "reason": "excluded by exclude_gpus"},
                               {"host": "gpu-b", "id": "0000:0c:00.0", "index": 1,
                                "reason": fleet["unused"][1]["reason"]}]
    assert "NV18" in result.stdout


def test_fleet_plan_failure_through_ansible_playbook_names_host(tmp_path):
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"fleet": {"gpu-z": {"numa_topology": h100_nvswitch("gpu-z")}}},
                    "tasks": [{"ansible.builtin.debug": {"msg": "{{ fleet | gpufleet.numa.fleet_plan(tp_size=8) }}"}}],
                }
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    result = subprocess.run([playbook, str(tmp_path / "play.yml")], env=env, capture_output=True, text=True,
                            cwd=str(tmp_path), timeout=300, check=False)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "host gpu-z: tp_size 8 does not fit on any socket" in text
    assert "Traceback" not in text
