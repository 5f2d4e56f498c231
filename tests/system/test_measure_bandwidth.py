# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""playbooks/measure_bandwidth.yml on this machine's own NUMA node (the CPU
part: the engine venv's torch triad under the real numactl, small buffers
and short passes), beside a recorded host that is never contacted: the
figures are printed and kept in the kept plan's host entry, the recorded
host is said to be not measured, check mode writes nothing, and the audit playbook's report shows the figures, its chart
parsed by headless Chromium."""

import os
import pathlib
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import artifact as plan_artifact
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.gather import gather_live

REPO = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"


def engine_python():
    check = subprocess.run([str(REPO / "scripts" / "engine-cache"), "--check"], capture_output=True, text=True,
                           check=False, timeout=120)
    assert check.returncode == 0, "run scripts/setup (scripts/engine-cache): " + check.stderr
    return dict(line.split("=", 1) for line in check.stdout.splitlines())["venv"] + "/bin/python"


@pytest.fixture
def fleet(tmp_path):
    """An inventory of this machine (recorded in the kept plan, no instances)
    and a recorded host (numa_capture, not in the kept plan)."""
    inventory = tmp_path / "fleet" / "inventory"
    inventory.mkdir(parents=True)
    hosts = {"all": {"children": {"gpu_servers": {"hosts": {
        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                      "gpufleet_bandwidth_python": engine_python(), "gpufleet_bandwidth_size_mib": 16,
                      "gpufleet_bandwidth_seconds": 0.05, "gpufleet_bandwidth_timeout": 120},
        "rec-b": {"ansible_host": "127.0.0.9",
                  "numa_capture": str(REPO / "tests" / "fixtures" / "machines" / "power8_minsky_p100" / "capture.yml")},
    }}}}}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    facts, dummy = gather_live(root="/")
    fresh = {"instances": [], "unused": [], "warnings": [], "totals": {},
             "hardware": {"localhost": plan_artifact.hardware_record(facts)}}
    proposal = plan_artifact.merge_plans(fresh, None, ["localhost"], ["localhost", "rec-b"])["plan"]
    kept = plan_record.record_hosts(None, proposal, ["localhost"], {})
    plan = tmp_path / "fleet" / "inventory.gpufleet" / "gpufleet-plan.json"
    plan.parent.mkdir()
    plan.write_text(plan_artifact.dump_artifact(kept))
    return inventory, plan


def run(playbook, inventory, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(inventory.parent / ".ansible-tmp"))
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "playbooks/%s" % playbook, "-i", str(inventory)] + list(extra),
                          check=False, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    return done.returncode, done.stdout


def test_measure_playbook_keeps_this_machines_figures_and_the_audit_report_shows_them(fleet, tmp_path):
    inventory, plan = fleet
    before = plan.read_text()
    rc, output = run("measure_bandwidth.yml", inventory, "--check")
    assert rc == 0, output[-6000:]
    assert plan.read_text() == before  # check mode measures, shows, writes nothing
    rc, output = run("measure_bandwidth.yml", inventory)
    assert rc == 0, output[-6000:]
    output = " ".join(output.split())  # the YAML callback folds long lines
    assert "localhost: one NUMA node: nothing to compare" in output
    assert "memory (torch-triad) CPU node 0, memory node 0: " in output
    assert "not measured: torch " in output and " sees no CUDA or ROCm device" in output
    assert "rec-b: not measured: a recorded host (numa_capture) is never contacted" in output
    assert "kept in %s: localhost" % plan in output
    kept = plan_artifact.load_artifact(plan.read_text(), str(plan))  # the kept plan's own checks
    figures = kept["hosts"]["localhost"]["bandwidth"]
    assert figures["memory"]["method"] == "torch-triad" and figures["size_mib"] == 16
    assert [(p["cpu_node"], p["memory_node"]) for p in figures["memory"]["pairs"]] == [(0, 0)]
    assert figures["memory"]["pairs"][0]["gbps"] > 0.1 and figures["python"].endswith("/bin/python")
    assert sorted(kept["hosts"]) == ["localhost"]

    rc, output = run("audit_topology.yml", inventory)
    assert rc == 0, output[-6000:]
    output = " ".join(output.split())
    assert "localhost: measured bandwidth: one NUMA node: nothing to compare" in output
    report = inventory.parent / "inventory.gpufleet" / "reports" / "topology-audit.html"
    page = report.read_text()
    assert page.count("<h3>Measured bandwidth</h3>") == 1 and "CPU node 0, memory node 0" in page
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    assert browser, "chromium is not installed: run scripts/setup"
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--user-data-dir=%s" % (tmp_path / "profile"), "--dump-dom", report.as_uri()],
                         capture_output=True, text=True, timeout=90, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('class="bandwidth"') == 2  # the chart and the table made it through the parser
    assert 'aria-label="measured bandwidth"' in dom.stdout
