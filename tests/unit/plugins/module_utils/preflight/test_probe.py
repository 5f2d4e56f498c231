# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The syscall probe for real: PROBE_SOURCE run by this Python under real
numactl on node 0 (this machine's one NUMA node) reports every call OK, and
nodes or CPUs the process may not use come back as EINVAL; the canonical
command line and the runner that turns PROBE_WORD into the program."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import probe
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import default_runner

NUMACTL = shutil.which("numactl")
needs_numactl = pytest.mark.skipif(NUMACTL is None, reason="numactl is not installed (apt-get install numactl)")


def run_probe(prefix, nodes, cpus, policy):
    runner = probe.probe_runner(lambda argv: default_runner(argv, timeout=30), sys.executable)
    rc, out, err = runner(prefix + [probe.PROBE_WORD, nodes, cpus, policy])
    assert rc == 0 and err == ""
    return probe.parse_probe(out)


@needs_numactl
@pytest.mark.parametrize("policy", ["bind", "interleave"])
def test_probe_under_numactl_node0_reports_ok(policy):
    result = run_probe([NUMACTL, "--cpunodebind=0", "--membind=0"], "0", "0", policy)
    assert result == {"calls": {"set_mempolicy": "OK", "mbind": "OK", "sched_setaffinity": "OK"}, "exit": 0,
                      "stderr": ""}


@needs_numactl
def test_probe_under_numactl_node_without_memory_is_einval():
    # Node 63 exists on no machine here: the kernel refuses it, as it refuses a node the cpuset excludes.
    result = run_probe([NUMACTL, "--membind=0"], "63", "0", "bind")
    assert result["calls"] == {"set_mempolicy": "EINVAL", "mbind": "EINVAL", "sched_setaffinity": "OK"}
    assert result["exit"] == 0


def test_probe_runner_keeps_a_failed_start_as_output():
    result = run_probe(["/nonexistent/numactl"], "0", "0", "bind")
    assert result["calls"] == {} and result["exit"] == 127 and "nonexistent" in result["stderr"]


def test_probe_runner_leaves_other_commands_alone():
    seen = []
    runner = probe.probe_runner(lambda argv: seen.append(argv) or (3, "out", "err"), "/usr/bin/python3")
    assert runner(["nvidia-smi", "topo", "-m"]) == (3, "out", "err")
    assert runner(["systemd-run", "--", probe.PROBE_WORD, "0", "0", "bind"]) == (0, "out\nexit-status 3\nstderr err\n", "")
    assert seen[1] == ["systemd-run", "--", "/usr/bin/python3", "-c", probe.PROBE_SOURCE, "0", "0", "bind"]


def test_probe_command_carries_the_units_properties_account_and_prefix():
    unit = {"properties": [["NUMAPolicy", "bind"], ["SystemCallFilter", "~set_mempolicy mbind"]],
            "prefix": ["/usr/bin/numactl", "--cpunodebind=1", "--membind=1"], "user": "vllm", "group": "vllm",
            "mems": "1", "cpus": "8-15", "policy": "bind"}
    words = shlex.split(probe.probe_command(unit, user_exists=True, group_exists=False))
    assert words == probe.SYSTEMD_RUN + [
        "--property=NUMAPolicy=bind", "--property=SystemCallFilter=~set_mempolicy mbind", "--property=User=vllm",
        "--", "/usr/bin/numactl", "--cpunodebind=1", "--membind=1", probe.PROBE_WORD, "1", "8-15", "bind"]
    assert "User=" not in probe.probe_command(unit) and "Group=" not in probe.probe_command(unit)


@pytest.mark.parametrize("pair", [["numa policy", "bind"], ["NUMAPolicy", "bind\nExecStart=/bin/sh"]])
def test_probe_command_refuses_what_is_no_property(pair):
    with pytest.raises(ValueError, match="units: property"):
        probe.probe_command({"properties": [pair], "mems": "0", "cpus": "0", "policy": "bind"})


def test_parse_probe_empty_and_garbage():
    assert probe.parse_probe(None) == {"calls": {}, "exit": None, "stderr": ""}
    assert probe.parse_probe("mbind\nexit-status x\nnoise OK\n") == {"calls": {}, "exit": None, "stderr": ""}


def test_probe_source_runs_where_numactl_is_missing():
    # No numactl prefix: the probe alone, in this process's own binding.
    out = subprocess.run([sys.executable, "-c", probe.PROBE_SOURCE, "0", "0", "bind"], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    assert probe.parse_probe(out)["calls"] == {"set_mempolicy": "OK", "mbind": "OK", "sched_setaffinity": "OK"}
