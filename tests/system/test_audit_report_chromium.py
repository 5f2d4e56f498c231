# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The audit's HTML report in a real browser: headless Chromium loads the
file offline, lays it out and takes a screenshot.

Three hosts: a DGX-2 running the recorded numactl processes in the NUMA
trap against a deployed plan, an Azure NDv4-like VM (four NUMA nodes, PCI
order is not NUMA order) with a TP group across nodes, and an 8x RTX 4090
box of PCIe switch quads with nothing running. Set
GPUFLEET_AUDIT_SCREENSHOT=path.png to keep the screenshot.
"""

import json
import os
import pathlib
import shutil
import struct
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay  # noqa: E402
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_html  # noqa: E402
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result  # noqa: E402
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement  # noqa: E402
from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes  # noqa: E402

WIDTH, HEIGHT = 1400, 2600


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed: run scripts/setup (it installs Debian's chromium package)")


def results():
    out = []
    facts, processes = audit_replay.gather_capture(capture_with_processes(DGX2, TRAP_HOLDS))
    deployed = {"options": {"tp_size": 4}, "plan": placement.plan_fleet({"dgx2-a": facts}, tp_size=4)}
    out.append(audit_result.audit_result(facts, processes, "dgx2-a", deployed))
    facts, processes = audit_replay.gather_capture(capture_with_processes(
        "azure_ndv4_like", {"tp_server": ["0001:00:00.0", "0002:00:00.0"], "tp_server_worker": ["0003:00:00.0"],
                            "unbound": ["000d:00:00.0"]}))
    out.append(audit_result.audit_result(facts, processes, "ndv4-b"))
    facts, processes = audit_replay.gather_capture(capture_with_processes("rtx4090_8gpu_pcie_switch_quads", {}))
    out.append(audit_result.audit_result(facts, processes, "rtx-c"))
    return out


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_report_renders_in_headless_chromium(tmp_path, request):
    page = tmp_path / "audit.html"
    page.write_text(report_html.html_report(results(), generated="test"))
    shot = tmp_path / "audit.png"
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--user-data-dir=%s" % (tmp_path / "profile")]
    dom = subprocess.run(base + ["--dump-dom", page.as_uri()], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=90, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the browser's own DOM: every host section, its diagram and findings made it through the parser
    assert dom.stdout.count('<section class="host"') == 3
    assert dom.stdout.count('class="host-diagram"') == 3
    assert "gpus_span_sockets" in dom.stdout and "NUMA nodes 0,1 (sockets unknown" in dom.stdout
    run = subprocess.run(base + ["--window-size=%d,%d" % (WIDTH, HEIGHT), "--screenshot=%s" % shot, page.as_uri()],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=90,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    data = shot.read_bytes()
    assert png_size(data) == (WIDTH, HEIGHT)
    # a blank or unstyled page compresses to a few KiB; diagrams and tables do not
    assert len(data) > 100000, "screenshot is %d bytes: the page did not render" % len(data)
    keep = os.environ.get("GPUFLEET_AUDIT_SCREENSHOT")
    if keep:
        shutil.copy(str(shot), keep)
        (pathlib.Path(keep).with_suffix(".json")).write_text(json.dumps([r["host"] for r in results()]))
