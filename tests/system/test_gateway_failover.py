# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Two gateways, one address: a real failover, measured.

Network namespaces joined by a bridge (netns_gateways.Lab): two gateways
(g1 priority 200, g2 priority 150), a backend (the vLLM stand-in,
tests/stub/vllm-stub) and a client. Role gpufleet.numa.gateway renders each
gateway's haproxy.cfg and keepalived.conf (ansible-playbook run inside the
gateway's namespace, so keepalived -t sees its interface; manage_service
off); the real HAProxy and keepalived run them there. The client sends 20
requests a second to the floating address while, one after the other:

  (a) the MASTER's HAProxy stops: the track script fails, the address moves;
  (b) the MASTER's keepalived stops (SIGTERM);
  (c) the MASTER's link goes down (ip link set vrrp0 down);
  (d) that link comes back: with nopreempt (the role's default) the address
      stays where it is and nothing fails.

Every ~100 ms both gateways' addresses are sampled: never both hold the
floating address. Per scenario: seconds until the address moved, until
the client was answered again, requests failed, and failed after the new
MASTER held the address (must be 0). Printed as one line per scenario
(pytest -s), docs/gateway.md "Two gateways, one address" quotes them.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from fleet_processes import wait_until
from netns_gateways import INTERFACE, Lab, Sampler

REPO = pathlib.Path(__file__).resolve().parents[2]
STUB = REPO / "tests" / "stub" / "vllm-stub"
HELPER = pathlib.Path(__file__).resolve().parent / "netns_gateways.py"
KEEPALIVED = shutil.which("keepalived") or "/usr/sbin/keepalived"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
# Priorities high enough that a BACKUP's skew ((256 - priority) / 256 s) is short.
PRIORITIES = {"g1": 200, "g2": 150}
OCTETS = {"g1": 11, "g2": 12, "be": 20, "cl": 30}
VIP_OCTET = 100
PORT = 18080
MONITOR = "/gateway/health"
RATE = 20.0
# The goal: the address answers again within this many seconds ...
GOAL = 3.0
# ... except after a cut link: nothing tells the BACKUP, it waits VRRPv2's
# master-down interval, 3 adverts (1 s each; PASS authentication needs
# VRRPv2, whole seconds) plus its skew (256 - 150) / 256 s from the last
# advert it got, and one sample of margin.
CUT_LINK_BOUND = 3 * 1 + (256 - PRIORITIES["g2"]) / 256.0 + 0.2


def require_tools():
    if os.geteuid() != 0:
        pytest.skip("needs root: it creates network namespaces (ip netns)")
    if not shutil.which("ip") or subprocess.run(["ip", "netns", "list"], stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL, check=False).returncode != 0:
        pytest.skip("ip netns is not available")
    if not os.access(KEEPALIVED, os.X_OK):
        pytest.skip("keepalived is not installed (scripts/setup installs it)")
    if not os.access(HAPROXY, os.X_OK):
        pytest.fail("haproxy is not installed: run scripts/setup")


@pytest.fixture
def lab():
    require_tools()
    made = Lab(OCTETS)
    try:
        yield made
    finally:
        made.close()


def render(lab, tmp_path):
    """Run role gateway for g1 and g2, each inside its namespace; return {role: directory}."""
    vip = "%s.%d" % (lab.subnet, VIP_OCTET)
    hosts = {}
    for role in PRIORITIES:
        directory = tmp_path / role
        hosts[role] = {
            "gateway_config_path": str(directory / "haproxy.cfg"),
            "gateway_vrrp_config_path": str(directory / "keepalived.conf"),
            "gateway_vrrp_priority": PRIORITIES[role],
            "gateway_vrrp_unicast_address": lab.addresses[role],
        }
    group = {
        "gateway_install": False, "gateway_manage_service": False, "gateway_listen_address": "0.0.0.0",
        "gateway_listen_port": PORT, "gateway_allow_unauthenticated": True, "gateway_user": "", "gateway_group": "",
        "gateway_chroot": "", "gateway_admin_socket": "", "gateway_log_target": "",
        "gateway_backends": [{"name": "be-0", "host": "be", "address": lab.addresses["be"], "port": 8000,
                              "model": "m"}],
        "gateway_vrrp_address": vip + "/24", "gateway_vrrp_interface": INTERFACE,
        "gateway_vrrp_router_id": 213, "gateway_vrrp_password": "fl0at-gw",
    }
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {"gateways": {"vars": group, "hosts": hosts}}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: gateways\n  gather_facts: false\n  roles: [gpufleet.numa.gateway]\n")
    runs = {}
    for role in PRIORITIES:
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCAL_TEMP=str(tmp_path / (".ansible-tmp-" + role)))
        argv = lab.exec_argv(role, [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory),
                                    "-c", "local", "--limit", role, "-e",
                                    "ansible_python_interpreter=%s" % (REPO / ".venv" / "bin" / "python"),
                                    str(playbook)])
        runs[role] = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
    for role, run in runs.items():
        output = run.communicate(timeout=300)[0]
        assert run.returncode == 0, output
    return {role: tmp_path / role for role in PRIORITIES}, vip


def monitor_code(lab, role):
    out = subprocess.run(lab.exec_argv(role, ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time",
                                              "1", "http://127.0.0.1:%d%s" % (PORT, MONITOR)]),
                         stdout=subprocess.PIPE, text=True, check=False, timeout=10).stdout
    return out.strip()


STATE = re.compile(r"\) Entering (MASTER|BACKUP|FAULT) STATE")


def keepalived_state(processes, name):
    found = STATE.findall(processes.log(name))
    return found[-1] if found else None


class Failover:
    """The running lab: processes, the sampler, the client, the events."""

    def __init__(self, lab, processes, directories, vip, tmp_path):
        self.lab, self.processes, self.directories, self.vip = lab, processes, directories, vip
        self.tmp_path = tmp_path
        self.starts = {}

    def start_haproxy(self, role):
        name = "haproxy-%s-%d" % (role, self.starts.setdefault("h" + role, 0))
        self.starts["h" + role] += 1
        config = str(self.directories[role] / "haproxy.cfg")
        self.processes.start(name, self.lab.exec_argv(role, [HAPROXY, "-db", "-f", config]), dict(os.environ))
        wait_until(lambda: monitor_code(self.lab, role) == "200", 20, what="HAProxy of %s answering 200" % role)
        return name

    def start_keepalived(self, role):
        number = self.starts.setdefault("k" + role, 0)
        self.starts["k" + role] += 1
        name = "keepalived-%s-%d" % (role, number)
        directory = self.directories[role]
        argv = [KEEPALIVED, "-n", "-l", "-D", "-G", "-P", "-f", str(directory / "keepalived.conf"),
                "-p", str(directory / ("keepalived-%d.pid" % number)), "-r", str(directory / ("vrrp-%d.pid" % number))]
        self.processes.start(name, self.lab.exec_argv(role, argv), dict(os.environ))
        return name


def measure(name, t0, t_end, new_holder, samples, requests):
    """The figures of one scenario: the requests sent in [t0, t_end), and
    those in flight at t0 (TCP connections do not move with the address:
    one open on the old holder when it lets the address go is lost, and
    counts for this event)."""
    held = [t for t, holders in samples if t >= t0 and holders[new_holder]]
    t_hold = held[0] if held else None
    window = [r for r in requests if t0 <= r["sent"] < t_end]
    # Failed before the next event (one still open then counts for that one).
    failed = [r for r in window if not r["ok"] and r["done"] < t_end]
    in_flight = [r for r in requests if r["sent"] < t0 <= r["done"]]
    # The first answer after the last failed request was sent (a request
    # sent while the address had no holder is answered after TCP sends
    # its SYN again, 1 s later; the client waits 5 s for an answer).
    last = max(r["sent"] for r in failed) if failed else t0
    answered = sorted(r["done"] for r in window if r["ok"] and r["sent"] >= last)
    # Sent once the new MASTER held the address, failed before the next event.
    after = [r for r in window if t_hold is not None and r["sent"] >= t_hold and r["done"] < t_end]
    return {
        "scenario": name, "requests": len(window), "failed": len(failed),
        "in_flight_failed": len([r for r in in_flight if not r["ok"]]),
        "slowest_s": round(max([r["done"] - r["sent"] for r in window if r["ok"]] or [0]), 2),
        "moved_after_s": None if t_hold is None else round(t_hold - t0, 2),
        "last_failed_sent_after_s": round(last - t0, 2) if failed else None,
        "first_answer_after_s": round(answered[0] - t0, 2) if answered else None,
        "failed_after_new_master": len([r for r in after if not r["ok"]]),
        "slowest_after_new_master_s": round(max([r["done"] - r["sent"] for r in after] or [0]), 2),
        "errors": sorted(set(r["error"] for r in failed + in_flight if r["error"]))[:3],
    }


def test_two_gateways_one_address_fail_over(lab, processes, tmp_path):
    directories, vip = render(lab, tmp_path)
    conf = (directories["g1"] / "keepalived.conf").read_text()
    assert "unicast_peer {\n        %s  # g2, priority 150\n" % lab.addresses["g2"] in conf
    assert "nopreempt" in conf and "state BACKUP" in conf
    run = Failover(lab, processes, directories, vip, tmp_path)

    processes.start("stub", lab.exec_argv("be", [sys.executable, str(STUB), "serve", "m", "--host",
                                                 lab.addresses["be"], "--port", "8000", "--served-model-name", "m"]),
                    dict(os.environ))
    haproxy = {role: run.start_haproxy(role) for role in PRIORITIES}
    keepalived = {"g1": run.start_keepalived("g1")}
    wait_until(lambda: lab.holds("g1", vip), 15, what="g1 holding %s" % vip)
    keepalived["g2"] = run.start_keepalived("g2")
    wait_until(lambda: keepalived_state(processes, keepalived["g2"]) == "BACKUP", 10, what="g2 in BACKUP")

    sampler = Sampler(lab, list(PRIORITIES), vip)
    sampler.start()
    stop_file, out = tmp_path / "client.stop", tmp_path / "client.jsonl"
    processes.start("client", lab.exec_argv("cl", [sys.executable, str(HELPER), "client",
                                                   "http://%s:%d/v1/completions" % (vip, PORT), str(RATE), "150",
                                                   str(stop_file), str(out)]), dict(os.environ))
    events = []
    time.sleep(1.5)

    def holder_is(role):
        return lambda: lab.holds(role, vip)

    # (a) g1's HAProxy stops: its track script fails (2 x 1 s), FAULT.
    events.append(("a: MASTER's HAProxy stopped", time.monotonic(), "g2"))
    processes.stop(haproxy["g1"])
    wait_until(holder_is("g2"), 10, what="g2 holding the address after g1's HAProxy stopped")
    time.sleep(2)
    haproxy["g1"] = run.start_haproxy("g1")
    wait_until(lambda: keepalived_state(processes, keepalived["g1"]) == "BACKUP", 10, what="g1 back to BACKUP")
    time.sleep(1)
    # (b) g2's keepalived stops (SIGTERM): it sends priority 0 and drops the address.
    events.append(("b: MASTER's keepalived stopped", time.monotonic(), "g1"))
    processes.stop(keepalived["g2"])
    wait_until(holder_is("g1"), 10, what="g1 holding the address after g2's keepalived stopped")
    time.sleep(2)
    keepalived["g2"] = run.start_keepalived("g2")
    wait_until(lambda: keepalived_state(processes, keepalived["g2"]) == "BACKUP", 10, what="g2 back to BACKUP")
    time.sleep(1)
    # (c) g1's link goes down.
    events.append(("c: MASTER's link down", time.monotonic(), "g2"))
    lab.link("g1", "down")
    wait_until(holder_is("g2"), 10, what="g2 holding the address after g1's link went down")
    time.sleep(2)
    # (d) g1's link comes back: nopreempt, g2 keeps the address.
    events.append(("d: link back (nopreempt: no move)", time.monotonic(), "g2"))
    lab.link("g1", "up")
    time.sleep(5)
    events.append(("end", time.monotonic(), None))
    stop_file.write_text("")
    wait_until(lambda: processes.processes["client"][0].poll() is not None, 10, what="the client to finish")
    sampler.stop()

    requests = [json.loads(line) for line in out.read_text().splitlines()]
    samples = sampler.samples
    both = [t for t, holders in samples if sum(holders.values()) > 1]
    figures = []
    for (name, t0, holder), (dummy, t_end, dummy2) in zip(events, events[1:]):
        figures.append(measure(name, t0, t_end, holder, samples, requests))
    for figure in figures:
        print("FAILOVER %s" % json.dumps(figure))
    print("FAILOVER samples=%d requests=%d both_held=%d" % (len(samples), len(requests), len(both)))
    assert not both, "both gateways held %s at %d sample(s)" % (vip, len(both))
    assert len(samples) > 100 and len(requests) > 300
    a, b, c, d = figures
    # The address answers again once the new MASTER holds it: nothing sent
    # from then on failed.
    for figure in (a, b):
        assert figure["moved_after_s"] is not None and figure["moved_after_s"] <= GOAL, figure
    assert c["moved_after_s"] is not None and c["moved_after_s"] <= CUT_LINK_BOUND, c
    for figure in (a, b, c):
        assert figure["failed_after_new_master"] == 0, figure
        assert figure["first_answer_after_s"] is not None, figure
    # (d): nopreempt: g2 held the address all along, and nothing failed
    # that was sent there. A request still open when the link comes back
    # and failing after it was lost to the cut (c): its connection is on g1,
    # sent before g2 held the address (the client waits 5 s, the link
    # stays down about 2 s after g2 takes over).
    t_c, t_d, t_end = events[2][1], events[3][1], events[4][1]
    c_held = t_c + c["moved_after_s"]
    lost_to_the_cut = [r for r in requests if r["sent"] < t_d <= r["done"] and not r["ok"]]
    assert d["failed"] == 0 and all(r["sent"] < c_held for r in lost_to_the_cut), (d, lost_to_the_cut)
    assert all(holders["g2"] and not holders["g1"] for t, holders in samples if t_d <= t < t_end)
    assert keepalived_state(processes, keepalived["g1"]) == "BACKUP"
