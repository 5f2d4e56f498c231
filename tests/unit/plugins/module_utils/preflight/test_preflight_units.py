# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The units the preflight probes are the units role vllm writes: the same
NUMA directives, sandboxing, numactl prefix and account (the vllm_units
filter's own code), for plans of recorded machines."""

from __future__ import annotations

from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import VARIABLES, PLANS
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm.host_state import host_units
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight.units import probe_units

PLAN = next(plan for name, facts, plan in PLANS if name.startswith("h100_sxm_8gpu_nvswitch-tp_size4"))


def test_probe_units_numactl_binding_matches_the_rendered_unit():
    instances = PLAN["instances"]
    units = probe_units(instances, VARIABLES)
    rendered = host_units(instances, dict(VARIABLES, vllm_instances=instances))["units"]
    assert [u["name"] for u in units["units"]] == ["vllm-0", "vllm-1"]
    for unit, written, instance in zip(units["units"], rendered, instances):
        assert unit["prefix"] == written["command"][:3] and unit["prefix"][0] == "/usr/bin/numactl"
        assert unit["properties"] == written["hardening"] and written["numa"] == []
        assert ["SystemCallFilter", "@system-service"] in unit["properties"]
        assert (unit["mems"], unit["cpus"], unit["policy"]) == (
            ",".join(map(str, instance["binding"]["mems"])), instance["binding"]["cpus"], "bind")
        assert (unit["user"], unit["group"], unit["device"]) == ("vllm", "vllm", "nvidia")
    assert units["numactl_installed_by_role"] is True


def test_probe_units_systemd_binding_and_own_hardening():
    instances = PLAN["instances"]
    hardening = {"SystemCallErrorNumber": "EPERM", "SystemCallFilter": "~set_mempolicy mbind"}
    units = probe_units(instances, dict(VARIABLES, vllm_binding="systemd", vllm_hardening=hardening,
                                        vllm_install=False, vllm_executable="/opt/vllm/bin/vllm"))
    first = units["units"][0]
    assert first["prefix"] == []
    assert first["properties"] == [["CPUAffinity", instances[0]["binding"]["cpus"]], ["NUMAPolicy", "bind"],
                                   ["NUMAMask", "0"], ["SystemCallErrorNumber", "EPERM"],
                                   ["SystemCallFilter", "~set_mempolicy mbind"]]
    assert units["numactl_installed_by_role"] is False


def test_probe_units_no_instances():
    assert probe_units([], VARIABLES) == {"units": [], "numactl_installed_by_role": False}
