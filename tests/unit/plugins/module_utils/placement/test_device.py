# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/device.py: a host's device class from gpufleet_device_class and
its GPUs' vendor, on recorded machines (mi300x_8gpu_xgmi is AMD,
h100_sxm_8gpu_nvswitch NVIDIA, this_machine_ci has no GPU)."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.tests.fixtures.paths import MACHINES


def machine(name):
    return facts_from_capture(os.path.join(MACHINES, name, "capture.yml"))


MI300X = machine("mi300x_8gpu_xgmi")
H100 = machine("h100_sxm_8gpu_nvswitch")
CI = machine("this_machine_ci")


def devices(facts, **options):
    plan = placement.plan_fleet({"h": facts}, **dict({"tp_size": 1}, **options))
    return sorted(set(i["device"] for i in plan["instances"]))


def test_auto_reads_amd_on_mi300x_and_nvidia_on_h100():
    assert devices(MI300X) == ["amd"]
    assert devices(H100) == ["nvidia"]
    assert devices(MI300X, device_class="amd") == ["amd"]
    assert devices(H100, device_class="nvidia") == ["nvidia"]


def test_socket_local_groups_carry_the_device_too():
    groups = placement.plan_host(MI300X, tp_size=4)["groups"]
    assert [g["device"] for g in groups] == ["amd", "amd"]


@pytest.mark.parametrize("facts, wrong, vendor", [(MI300X, "nvidia", "amd"), (H100, "amd", "nvidia")])
def test_a_class_that_mismatches_the_gpus_names_the_variable(facts, wrong, vendor):
    with pytest.raises(placement.PlacementError, match=r"^host h: gpufleet_device_class is %s, but its GPUs' vendor "
                                                       r"is %s" % (wrong, vendor)):
        devices(facts, device_class=wrong)


def test_gpus_of_two_vendors_need_the_class_said():
    mixed = copy.deepcopy(H100)
    mixed["gpus"][0]["vendor"] = "amd"
    with pytest.raises(placement.PlacementError, match=r"gpufleet_device_class auto cannot tell the device class "
                                                       r"from its GPUs' vendors \(amd, nvidia\): set it to the class"):
        devices(mixed)


def test_an_excluded_gpu_of_another_vendor_does_not_count():
    """An Intel display GPU beside NVIDIA GPUs (sysfs lists both): left out with exclude_gpus,
    the others decide the class, under auto and said."""
    mixed = copy.deepcopy(H100)
    mixed["gpus"][7]["vendor"] = "intel"
    intel = mixed["gpus"][7]["id"]
    with pytest.raises(placement.PlacementError, match=r"vendors \(intel, nvidia\): .*leave the other GPUs out "
                                                       r"with exclude_gpus$"):
        devices(mixed)
    with pytest.raises(placement.PlacementError, match=r"vendor is intel, nvidia: .*exclude_gpus$"):
        devices(mixed, device_class="nvidia")
    assert devices(mixed, exclude_gpus=[intel]) == ["nvidia"]
    assert devices(mixed, exclude_gpus=[intel], device_class="nvidia") == ["nvidia"]


def test_a_gpu_without_a_known_vendor_needs_the_class_said():
    unknown = copy.deepcopy(H100)
    del unknown["gpus"][3]["vendor"]
    with pytest.raises(placement.PlacementError, match=r"vendors \(nvidia, unknown\)"):
        devices(unknown)


def test_a_host_without_gpus_is_a_cpu_host_only_when_the_class_says_so():
    with pytest.raises(placement.PlacementError, match=r"^host h: the topology facts list no GPUs; a host without "
                                                       r"GPUs serves on CPU only when gpufleet_device_class: cpu"):
        devices(CI)
    for wrong in ("nvidia", "amd"):
        with pytest.raises(placement.PlacementError, match="gpufleet_device_class: cpu says so"):
            devices(CI, device_class=wrong)
    assert devices(CI, device_class="cpu") == ["cpu"]


def test_a_bad_vendor_or_memory_in_the_facts_names_the_field():
    bad = copy.deepcopy(MI300X)
    bad["gpus"][0]["vendor"] = 7
    with pytest.raises(placement.PlacementError, match=r"numa_topology\.gpus\[0\]\.vendor must be a string"):
        devices(bad)
    bad = copy.deepcopy(CI)
    bad["numa_nodes"][0]["memory_mb"] = -1
    with pytest.raises(placement.PlacementError, match=r"numa_topology\.numa_nodes\[0\]\.memory_mb must be an "
                                                       r"integer >= 0 or null"):
        devices(bad, device_class="cpu")


def test_device_class_option_is_checked():
    with pytest.raises(placement.PlacementError, match="device_class must be one of auto, nvidia, amd, cpu, got 'gpu'"):
        devices(H100, device_class="gpu")
