# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/template.py: the template of a host, a function of its PlanKey alone, built in named steps."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import facts as placement_facts
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host as placement_host
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import options as placement_options
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import template as placement_template
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.cpus import SocketKey, node_sockets
from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.placement.test_hosts import h100_nvswitch, make_facts, rtx3090_numa_na


def key_of(facts, **options):
    opts = placement_options.validate_options(dict(options, tp_size=options.get("tp_size", 2)))
    return placement_host.plan_key(placement_facts.read_host_facts(facts), opts)


def test_template_is_a_function_of_the_key_alone():
    a, b = key_of(h100_nvswitch("a")), key_of(h100_nvswitch("b"))
    assert a == b
    assert placement_template.build_template(a, "a", []) == placement_template.build_template(b, "b", [])


def test_placeable_leaves_out_excluded_unknown_and_homeless_gpus():
    facts = make_facts("m", {0: (0, "0-3"), 1: (0, "")}, [0, None, 1, 0], lambda i, j: "SYS")
    facts["numa_nodes"][1]["distances"] = {}
    key = key_of(facts, tp_size=1, exclude_gpus=[facts["gpus"][3]["pci_bus_id"]])
    gpus = placement_template._placeable(key, node_sockets(key.topology))
    assert gpus.positions == [0, 2]  # node 1 is memory-only: GPU 2 is placed on node 0 of its socket
    assert gpus.nodes == [0, 0]
    assert gpus.rehomed == [placement_template.Rehomed(2, 1, 0)]
    assert [u.position for u in gpus.unused] == [1, 3]
    assert gpus.unknown == [1]


def test_placeable_unknown_socket_is_the_node_alone():
    key = key_of(rtx3090_numa_na(), tp_size=1)
    gpus = placement_template._placeable(key, node_sockets(key.topology))
    assert gpus.sockets == [SocketKey(None, 1)]


def test_missing_links_counted_with_the_first_pair():
    facts = make_facts("m", {0: (0, "0-3")}, [0, 0, 0], lambda i, j: "PIX")
    del facts["links"][facts["gpus"][0]["id"]][facts["gpus"][2]["id"]]
    del facts["links"][facts["gpus"][2]["id"]][facts["gpus"][0]["id"]]
    template = placement_template.build_template(key_of(facts, tp_size=1), "m", [])
    assert template.missing_links == placement_template.MissingLinks(1, (0, 2))
    plan = placement.plan_host(facts, tp_size=1)
    assert any("1 GPU pair(s) have no link class" in w for w in plan["warnings"])
