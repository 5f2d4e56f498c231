# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The export filters are thin: text from module_utils, its errors as
AnsibleFilterError naming the filter, the host and the field."""

from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.topology_export import (
    FilterModule, nccl_topology_xml, slurm_gres_conf, topology_exports,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

MACHINES = fixture_paths.MACHINES


def test_export_filters_are_registered_and_return_text():
    assert set(FilterModule().filters()) == {"slurm_gres_conf", "nccl_topology_xml", "topology_exports"}
    facts = facts_from_capture(os.path.join(MACHINES, "power8_minsky_p100", "capture.yml"))
    assert "Cores=4-7" in slurm_gres_conf(facts, host="gpu-a")
    assert nccl_topology_xml(facts, cpu_arch="ppc64").count('arch="ppc64"') == 2


def test_export_filters_turn_errors_into_filter_errors():
    facts = facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))
    with pytest.raises(AnsibleFilterError, match=r"nccl_topology_xml: gpu-a: numa_topology\.gpus\[0\]\.pci_bus_id"):
        nccl_topology_xml(facts, host="gpu-a")
    with pytest.raises(AnsibleFilterError, match=r"cpu_arch: must be a word"):
        nccl_topology_xml(facts, host="gpu-a", cpu_arch='x"86')
    with pytest.raises(AnsibleFilterError, match=r"slurm_gres_conf: gpu-a: numa_topology: must be a dict"):
        slurm_gres_conf("not facts", host="gpu-a")


def test_topology_exports_says_which_file_is_not_written():
    """A recorded host without PCI bus ids: its gres.conf, no NCCL file, and
    the line export_topology.yml prints; facts that are no facts fail."""
    facts = facts_from_capture(os.path.join(MACHINES, "h100_sxm_8gpu_nvswitch", "capture.yml"))
    result = topology_exports(facts, host="gpu-a")
    assert result == {"files": {"gres.conf": slurm_gres_conf(facts, host="gpu-a"), "nccl-topo.xml": None},
                      "skipped": ["gpu-a: nccl-topo.xml not written: GPU 0 has no PCI bus id"]}
    with pytest.raises(AnsibleFilterError, match=r"topology_exports: gpu-a: numa_topology: must be a dict"):
        topology_exports("not facts", host="gpu-a")
