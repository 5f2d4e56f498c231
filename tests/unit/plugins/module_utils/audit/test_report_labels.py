# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/report_labels.py: what the diagram's boxes say, and the width
reserved for it (the layout test, test_report_svg.py, checks the boxes the
widths make on every recorded machine)."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_labels as labels


def test_text_width_reserves_more_for_a_symbol_than_for_ascii():
    assert labels.text_width("", 11) == 0
    assert labels.text_width("GPU 7", 10) == 5 * labels.CHAR_EM * 10
    assert labels.text_width("\u26a0", 10) == labels.WIDE_EM * 10 > labels.text_width("W", 10)


def test_ceil_px_rounds_up_to_a_whole_pixel():
    assert [labels.ceil_px(v) for v in (0, 1.0, 1.01, 57.9)] == [0, 1, 2, 58]


def test_escape_quotes_what_svg_text_and_attributes_cannot_hold():
    assert labels.escape('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"
    assert labels.escape(None) == ""


def test_node_labels_name_the_node_once_with_its_cpus_and_memory():
    assert labels.node_labels(1, {"cpus": "48-95", "memory_mb": 262144}) == ("NUMA node 1", "CPUs 48-95 \u00b7 256 GiB")
    assert labels.node_labels(2, {"cpus": ""}) == ("NUMA node 2", "CPUs none (memory only)")
    assert labels.node_labels(None, {}) == ("GPUs without a NUMA node", "CPUs unknown")
    # A node whose socket is unknown sits in a box that says so, not "NUMA node N" again.
    assert labels.socket_label(("node", 3)) == "socket unknown"
    assert labels.socket_label(("socket", 0)) == "socket 0"


def test_gpu_nic_and_chip_labels():
    assert labels.gpu_labels({"index": 3, "id": "g3", "pci_bus_id": "0000:1b:00.0"}) == ("GPU 3", "1b:00.0")
    assert labels.gpu_labels({"index": None, "id": "g3", "pci_bus_id": None}) == ("GPU", "g3")
    assert labels.nic_label({"id": "0000:c1:00.0", "interfaces": ["mlx5_0"]}) == "NIC mlx5_0"
    assert labels.nic_label({"id": "0000:c1:00.0"}) == "NIC 0000:c1:00.0"
    group = {"misplaced": True, "name": "vllm-serve-worker", "leader": 4242, "pids": [4242, 4243, 4244]}
    assert labels.chip_label(group) == "\u26a0 vllm-serv 4242 +2"
