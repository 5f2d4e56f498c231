# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The host preflight's syscall probe on a booted systemd (a Debian 12 box,
scripts/box): read_live in the box, as the module runs it, probes each
unit under systemd-run with its own properties. Role vllm's default
hardening passes with numactl and with systemd binding; a
SystemCallFilter= that denies set_mempolicy and mbind is reported
critical (EPERM), one without SystemCallErrorNumber= kills the probe
(SIGSYS) and is reported critical, and so is numactl itself denied.
Needs root and systemd-nspawn (scripts/setup); skipped otherwise."""

import json
import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

REPO = fixture_paths.REPO
BOX = os.path.join(REPO, "scripts", "box")
NAME, ADDRESS, PORT = "preflight-probe", "127.0.77.92", "2292"


def _box_ready():
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        return False
    tree = subprocess.run([BOX, "path"], stdout=subprocess.PIPE, text=True, check=False).stdout.strip()
    return bool(tree) and os.path.isdir(tree)


pytestmark = pytest.mark.skipif(not _box_ready(), reason="needs root, systemd-nspawn and the box tree (scripts/box build)")

# Run by the box's own python3 with this checkout bound read-only at the same path.
IN_BOX = r'''
import json, sys
sys.path.insert(0, sys.argv[1] + "/.collections")
from ansible_collections.gpufleet.numa.plugins.module_utils.preflight import findings, gather
units = json.loads(sys.argv[2])
topology = {"sockets": [], "gpus": [], "numa_nodes": [{"id": 0, "cpus": "0"}]}
out = {}
for unit in units:
    readings, facts, capture = gather.read_live([unit], python="/usr/bin/python3", topology=False)
    out[unit["name"]] = {"readings": readings,
                         "findings": findings.host_findings(readings, [unit], topology, {"cgroup_slice": "system.slice"})}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    key = tmp_path_factory.mktemp("box") / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # A box of this name left by an earlier run that was killed would refuse
    # the start ("already running"): stopped first (nothing when there is none).
    subprocess.run([BOX, "stop", NAME], check=False, timeout=120)
    try:
        # Stopped afterwards even when the start fails half way.
        subprocess.run([BOX, "start", NAME, "--address", ADDRESS, "--ssh-port", PORT, "--authorized-key",
                        str(key) + ".pub", "--bind-ro", REPO], check=True, timeout=300)
        yield NAME
    finally:
        subprocess.run([BOX, "stop", NAME], check=False, timeout=120)


def hardening():
    with open(os.path.join(REPO, "roles", "vllm", "defaults", "main.yml")) as handle:
        return [[k, str(v)] for k, v in sorted(yaml.safe_load(handle)["vllm_hardening"].items())]


def unit(name, prefix, properties):
    return {"name": name, "device": "cpu", "gpus": [], "mems": "0", "cpus": "0", "policy": "bind",
            "user": "nobody", "group": "nogroup", "prefix": prefix, "properties": properties}


def test_probe_under_each_units_own_sandbox_on_booted_systemd(box):
    deny = [["SystemCallErrorNumber", "EPERM"], ["SystemCallFilter", "~set_mempolicy mbind"]]
    units = [
        unit("numactl-default", ["/usr/bin/numactl", "--cpunodebind=0", "--membind=0"], hardening()),
        unit("systemd-default", [], [["CPUAffinity", "0"], ["NUMAPolicy", "bind"], ["NUMAMask", "0"]] + hardening()),
        unit("denied", [], [["NUMAPolicy", "bind"], ["NUMAMask", "0"]] + deny),
        unit("killed", [], [["SystemCallFilter", "~mbind"]]),
        unit("numactl-denied", ["/usr/bin/numactl", "--membind=0"], deny),
    ]
    proc = subprocess.run([BOX, "shell", box, "/usr/bin/python3", "-c", IN_BOX, REPO, json.dumps(units)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("numactl-default", "systemd-default"):
        readings = got[name]["readings"]
        assert readings["systemd"] is True and "--property=User=nobody" in readings["probes"][0]["command"]
        assert readings["probes"][0]["output"] == "set_mempolicy OK\nmbind OK\nsched_setaffinity OK\nexit-status 0\n"
        assert got[name]["findings"] == [], got[name]
    assert got["numactl-default"]["readings"]["numactl"].startswith("policy:")
    assert got["denied"]["readings"]["probes"][0]["output"].startswith("set_mempolicy EPERM\nmbind EPERM\n")
    for name, fragment in (("denied", "set_mempolicy, mbind denied (EPERM, EPERM)"),
                           ("killed", "it was killed before mbind"),
                           ("numactl-denied", "set_mempolicy: Operation not permitted")):
        found = got[name]["findings"]
        assert [(f["check"], f["severity"], f["subject"]) for f in found] == [("syscalls", "critical", name)], found
        assert fragment in found[0]["message"], found
