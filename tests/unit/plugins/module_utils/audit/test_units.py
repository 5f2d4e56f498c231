# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/units.py: the planned units' systemd state, read on the target.

The parser reads `systemctl show` as a real systemd 252 printed it in a
booted box (scripts/box; tests/fixtures/systemd/show-gpufleet-units.txt:
a transient unit running, one failed, one in auto-restart after a failure,
one that does not exist, one installed and stopped). systemd is not PID 1
on this machine: the paths without it run for real here."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import instance_state
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import units as unit_reader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

RECORDED = os.path.join(fixture_paths.FIXTURES, "systemd", "show-gpufleet-units.txt")
UNITS = ["gpufleet-vllm-%d.service" % i for i in (0, 1, 2, 3, 5)]


def recorded():
    with open(RECORDED) as handle:
        return handle.read()


def test_the_recorded_show_output_parses_per_unit():
    states, warnings = unit_reader.parse_show(recorded(), UNITS)
    assert warnings == []
    assert states["gpufleet-vllm-0.service"] == {
        "id": "gpufleet-vllm-0.service", "load_state": "loaded", "active_state": "active", "sub_state": "running",
        "main_pid": 39, "started_monotonic_us": 27921572482}
    kinds = [instance_state.unit_kind(states[u])[0] for u in UNITS]
    assert kinds == ["running", "failed", "failed", "stopped", "stopped"]
    assert states["gpufleet-vllm-3.service"]["load_state"] == "not-found"


def test_blocks_match_by_id_when_their_number_differs():
    text = recorded().split("\n\n")
    states, warnings = unit_reader.parse_show("\n\n".join(text[1:3]), UNITS)
    assert sorted(states) == ["gpufleet-vllm-1.service", "gpufleet-vllm-2.service"]
    assert warnings == ["systemctl show gave no state for 3 unit(s): gpufleet-vllm-0.service, gpufleet-vllm-3.service, "
                        "gpufleet-vllm-5.service"]


def test_values_not_of_their_form_are_dropped_and_output_is_bounded():
    states, dummy = unit_reader.parse_show("Id=a.service\nActiveState=act\x1bive\nMainPID=-3\n", ["a.service"])
    assert states["a.service"]["active_state"] is None and states["a.service"]["main_pid"] is None
    assert instance_state.unit_kind(states["a.service"]) == (None, "None")
    states, warnings = unit_reader.parse_show("Id=a.service\n" * 10000, ["a.service"])
    assert states == {} and "more than" in warnings[0]


@pytest.mark.parametrize("name", ["-H.service", "--all", "a b.service", "a.service;reboot", ".service", "a\n.service",
                                  "gpufleet-vllm-0", "$(id).service", "a/b.service", "x" * 250 + ".service", 7,
                                  "gpufleet-vllm-0.service\n"])
def test_only_strict_unit_names_reach_the_command_line(name):
    with pytest.raises(ValueError, match=r"units\[1\]: must be a systemd service name"):
        unit_reader.show_command(["gpufleet-vllm-0.service", name])
    with pytest.raises(ValueError, match="unit must be a systemd service name"):
        instance_state.planned_units([{"name": "ok"}, {"name": "x", "deployed": {"unit": name}}])


def test_the_command_is_one_call():
    assert unit_reader.show_command(["gpufleet-vllm-0.service", "gpufleet-vllm-1.service"]) == (
        "systemctl show --property=Id,LoadState,ActiveState,SubState,MainPID,ExecMainStartTimestampMonotonic "
        "gpufleet-vllm-0.service gpufleet-vllm-1.service")
    with pytest.raises(ValueError, match="at most 256"):
        unit_reader.check_unit_names(["u%d.service" % i for i in range(257)])


def test_without_systemd_as_init_nothing_runs_here():
    """This machine: systemd is not PID 1, /run/systemd/system is absent."""
    assert not os.path.isdir("/run/systemd/system")
    ran = []
    reader = LiveReader(runner=lambda argv: ran.append(argv) or (0, "", ""))
    out = unit_reader.read_unit_states(reader, ["gpufleet-vllm-0.service"])
    assert out == {"source": None, "units": {}, "missing": "systemd is not the init system here (no /run/systemd/system)",
                   "warnings": []}
    assert ran == []


class Booted(LiveReader):
    """This machine as if systemd managed it (the one thing not true here);
    the commands run for real."""

    def listdir(self, path):
        return [] if path == unit_reader.SYSTEMD_RUNTIME else LiveReader.listdir(self, path)


def test_no_systemctl_is_not_a_failure_of_the_host():
    out = unit_reader.read_unit_states(Booted(which=lambda name: None), ["gpufleet-vllm-0.service"])
    assert out["source"] is None and out["missing"] == "systemctl not found"


@pytest.mark.skipif(not os.path.exists("/usr/bin/systemctl"), reason="needs systemctl installed")
def test_a_real_systemctl_that_cannot_answer_says_so():
    out = unit_reader.read_unit_states(Booted(), ["gpufleet-vllm-0.service"])
    assert out["source"] is None and out["missing"].startswith("systemctl show failed: systemctl show --property=Id,")
    assert "exited 1" in out["missing"]


def test_no_units_or_another_root_read_nothing(tmp_path):
    assert unit_reader.read_unit_states(Booted(), [])["missing"] == "no planned unit to read"
    out = unit_reader.read_unit_states(Booted(root=str(tmp_path)), ["a.service"], root=str(tmp_path))
    assert out["missing"].startswith("not read with root=")
