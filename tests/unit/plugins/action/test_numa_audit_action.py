# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""numa_audit in real ansible runs: the audit playbook over a replayed
capture and a deployed plan (report, table, gate), the module live on this
machine against a real numactl-bound process (record, then replay), and
the action's errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay  # noqa: E402
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement  # noqa: E402

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import DGX2, TRAP_HOLDS, capture_with_processes, pid_of  # noqa: E402


def env():
    out = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    return out


def playbook(inventory, *extra):
    proc = subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), os.path.join(REPO, "playbooks", "audit_topology.yml")]
        + list(extra), cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True, timeout=180, check=False)
    return proc.returncode, proc.stdout


def ad_hoc(args):
    argv = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", "gpufleet.numa.numa_audit", "-a", args]
    proc = subprocess.run(argv, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120, check=False)
    dummy_head, sep, payload = proc.stdout.partition("=>")
    assert sep, "no result in ansible output:\n%s\n%s" % (proc.stdout, proc.stderr)
    return proc.returncode, json.loads(payload), proc.stdout + proc.stderr


def trap_files(tmp_path):
    """The NUMA trap on a DGX-2 as a capture file, and a plan deployed on the same machine (tp 4)."""
    capture = capture_with_processes(DGX2, TRAP_HOLDS, hostname="dgx2h")
    capture_path = tmp_path / "gpu-a.yml"
    capture_path.write_text(yaml.safe_dump(capture))
    facts, dummy = audit_replay.gather_capture(capture)
    plan_path = tmp_path / "deployed-plan.json"
    plan_path.write_text(json.dumps({"options": {"tp_size": 4}, "plan": placement.plan_fleet({"gpu-a": facts}, tp_size=4)}))
    inventory = tmp_path / "hosts.yml"
    # 192.0.2.1 is TEST-NET-1: the replay must not contact it
    inventory.write_text("all:\n  children:\n    gpu_servers:\n      hosts:\n        gpu-a:\n          ansible_host: 192.0.2.1\n"
                         "          numa_capture: %s\n" % capture_path)
    return inventory, plan_path, capture_path


def test_audit_playbook_report_table_and_gate(tmp_path):
    inventory, plan, dummy = trap_files(tmp_path)
    report = tmp_path / "out" / "audit.html"
    rc, out = playbook(inventory, "-e", "audit_plan=%s" % plan, "-e", "audit_report=%s" % report)
    assert rc != 0, out
    assert "4 finding(s) at or above critical" in out
    # 3 more warnings than before: vllm-0..2 are misplaced and a replay holds no unit state, so their state is unknown
    assert "gpu-a: 4 critical, 4 error, 10 warning, 0 info; 6 GPU process(es) (nvidia-smi)" in out
    assert "planned instances: 1 stopped, 3 unknown" in out
    assert "instance_not_running" in out and "vllm-3" in out
    assert "unreachable=0" in out and "Traceback" not in out
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>") and "gpus_span_sockets" in page
    assert "python3 (pid %d and 1 more process)" % pid_of("tp_server") in page


def test_module_live_records_a_real_process_and_the_replay_agrees(tmp_path):
    # No GPU here: a stand-in nvidia-smi says the real process below holds one.
    proc = subprocess.Popen(
        ["numactl", "--physcpubind=0", "--membind=0", sys.executable, "-c", "import time; time.sleep(60)",
         "--api-key", "sk-never-recorded"],
        env=dict(os.environ, CUDA_VISIBLE_DEVICES="0", VLLM_API_KEY="sk-never-recorded"))
    try:
        deadline = time.time() + 10
        # numactl's own command line holds the same words: wait until it has exec'd Python
        while open("/proc/%d/cmdline" % proc.pid).read().split("\0")[0] != sys.executable and time.time() < deadline:
            time.sleep(0.02)
        smi = tmp_path / "nvidia-smi"
        smi.write_text('#!/bin/sh\n[ "$1" = "--query-compute-apps=pid,gpu_bus_id" ] || exit 9\n'
                       'echo "%d, 00000000:1A:00.0"\n' % proc.pid)
        smi.chmod(0o755)
        rc, live, out = ad_hoc("record=true nvidia_smi=%s" % smi)
    finally:
        proc.kill()
        proc.wait()
    assert rc == 0, out
    assert "sk-never-recorded" not in out
    assert live["process_source"] == "nvidia-smi"
    assert [p["pid"] for p in live["processes"]] == [proc.pid]
    assert live["processes"][0]["cpus_allowed"] == "0" and live["processes"][0]["memory_policy"] == "bind:0"
    codes = sorted(f["code"] for f in live["findings"])
    assert codes == ["cuda_device_order", "gpu_not_in_topology"]
    capture = live["capture"]
    assert "/proc/%d/numa_maps" % proc.pid in capture["files"]
    assert capture["files"]["/proc/%d/environ" % proc.pid] == "CUDA_VISIBLE_DEVICES=0\0"
    path = tmp_path / "this-host.yml"
    path.write_text(yaml.safe_dump(capture))
    rc, replay, out = ad_hoc("capture=%s" % path)
    assert rc == 0, out
    assert replay["findings"] == live["findings"]
    assert replay["processes"] == live["processes"]


def test_module_live_read_problems_are_warnings_not_a_failure(tmp_path):
    # ansible-core 2.19 turns a module's own warnings into records, not text:
    # a read problem used to fail the host ("result.warnings[0]: must be a string").
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "not, a line"\n')
    smi.chmod(0o755)
    rc, live, out = ad_hoc("nvidia_smi=%s" % smi)
    assert rc == 0, out
    assert live["process_source"] == "nvidia-smi" and live["processes"] == []
    # the callback shows the result's warnings as warnings, not in the result
    assert "[WARNING]" in out and "not, a line" in out
    assert "deprecated" not in out


def test_module_fail_on_severity_and_missing_plan(tmp_path):
    dummy_inventory, dummy_plan, capture = trap_files(tmp_path)
    rc, result, out = ad_hoc("capture=%s fail_on_severity=critical" % capture)
    assert rc != 0
    assert result["msg"].startswith("localhost: 4 finding(s) at or above critical; first: python3")
    assert len(result["findings"]) == 6
    rc, result, out = ad_hoc("capture=%s plan=%s" % (capture, tmp_path / "nope.yml"))
    assert rc != 0 and "plan file %s not found" % (tmp_path / "nope.yml") in result["msg"]
    bad = tmp_path / "bad-plan.yml"
    bad.write_text("instances: {}\n")
    rc, result, out = ad_hoc("capture=%s plan=%s" % (capture, bad))
    assert rc != 0 and "deployed plan has no instances list" in result["msg"]
    assert "Traceback" not in out


# A real process rewrites its title the way setproctitle does: over argv's
# own memory, the title and then NULs (no separators left between words).
SET_TITLE = (
    "import sys, time\n"
    "fields = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n"
    "start, end = int(fields[45]), int(fields[46])\n"
    "title = sys.argv[1].encode()[:end - start - 1]\n"
    "with open('/proc/self/mem', 'r+b', buffering=0) as mem:\n"
    "    mem.seek(start)\n"
    "    mem.write(title + b'\\0' * (end - start - len(title)))\n"
    "time.sleep(60)\n")


def test_module_live_masks_every_secret_form_of_real_processes(tmp_path):
    from ansible_collections.gpufleet.numa.tests.unit.plugins.module_utils.common.test_secret_mask import (  # noqa: E402
        FORMS, assert_hidden, secrets_of)
    from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_html, report_text  # noqa: E402

    argv, titles, secrets = [], [], []
    for number, (dummy_id, words) in enumerate(FORMS):
        values = secrets_of(number)
        secrets.extend(v for k, v in values.items() if k in json.dumps(words))
        filled = [words] if isinstance(words, str) else words
        filled = [w.replace("{S}", values["{S}"]).replace("{T}", values["{T}"]) for w in filled]
        (titles if isinstance(words, str) else argv).append(filled)
    # One process per form, named as the form's program (sshpass -p S is a password, ssh -p 22 is not).
    procs = [subprocess.Popen([words[0], "-c", "import time; time.sleep(60)"] + words[1:], executable=sys.executable)
             for words in argv]
    titled_procs = [subprocess.Popen([sys.executable, "-c", SET_TITLE, title[0], "x" * 200]) for title in titles]
    procs += titled_procs
    try:
        deadline = time.time() + 10
        while time.time() < deadline and any(
                "\0" in open("/proc/%d/cmdline" % p.pid).read().rstrip("\0") for p in titled_procs):
            time.sleep(0.02)
        smi = tmp_path / "nvidia-smi"
        smi.write_text('#!/bin/sh\n[ "$1" = "--query-compute-apps=pid,gpu_bus_id" ] || exit 9\n'
                       + "".join('echo "%d, 00000000:1A:00.0"\n' % p.pid for p in procs))
        smi.chmod(0o755)
        rc, live, out = ad_hoc("record=true nvidia_smi=%s" % smi)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert rc == 0, out
    assert sorted(p["pid"] for p in live["processes"]) == sorted(p.pid for p in procs)
    titled = [p for p in live["processes"] if p["pid"] in set(t.pid for t in titled_procs)]
    assert len(titled) == len(titles)
    assert all(len(p["argv"]) == 1 and " " in p["argv"][0] for p in titled), titled
    assert_hidden({"output": out, "capture": yaml.safe_dump(live["capture"]),
                   "table": "\n".join(report_text.text_table([live])), "html": report_html.html_report([live])},
                  secrets)


def test_audit_playbook_bad_audit_fail_on_is_named_before_any_host_is_read(tmp_path):
    inventory, dummy_plan, dummy_capture = trap_files(tmp_path)
    rc, out = playbook(inventory, "-e", "audit_fail_on=fatal")
    assert rc != 0
    assert "audit_fail_on: must be one of none, info, warning, error, critical (got 'fatal')" in out, out
    assert "Audit the host" not in out and "Traceback" not in out


def test_module_live_without_systemd_and_gpus_says_unknown_and_why(tmp_path):
    """The real module on this machine (no GPU, systemd not PID 1), with a
    plan for localhost: its unit's state cannot be read, nothing holds a
    GPU, so the instance is unknown, never running."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"plan": {"instances": [{"host": "localhost", "name": "vllm-0", "gpus": []}], "unused": []}}))
    rc, result, out = ad_hoc("plan=%s" % plan)
    assert rc == 0, out
    assert result["unit_states"] == {"source": None, "units": {},
                                     "missing": "systemd is not the init system here (no /run/systemd/system)"}
    assert [(i["state"], i["unit"]) for i in result["instances"]] == [("unknown", "gpufleet-vllm-0.service")]
    unknown = [f for f in result["findings"] if f["code"] == "instance_state_unknown"]
    assert len(unknown) == 1 and "(systemd is not the init system here" in unknown[0]["message"]
