# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The demo fleet end to end: playbooks/deploy_inference.yml on
inventories/demo (recorded topologies of three GPU servers) renders the
units and the gateway configuration into a staging directory; every
rendered unit then runs as a real process (numactl moved to this machine's
node 0, vLLM replaced by the stub the demo already points at) behind the
real HAProxy running the rendered configuration.

Only ports and HAProxy's process settings are overridden on the command
line, so the test can run unprivileged next to other work on this machine.
"""

import json
import os
import pathlib
import random
import re
import shutil
import subprocess

import pytest
import yaml

from fleet_processes import (
    SYSTEMD_BASE_ENVIRONMENT, ProcessGroup, free_port, haproxy_fully_up, http_request, ports_free,
    rebind_to_local_node, split_numactl, wait_for_health, wait_until,
)
from systemd_exec import service_process
from ansible_collections.gpufleet.numa.tests.fixtures import playbook_output

REPO = pathlib.Path(__file__).resolve().parents[2]
STUB = REPO / "tests" / "stub" / "vllm-stub"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
LOCAL_NODE = 0
REQUESTS = 30

pytestmark = [
    pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (scripts/setup)"),
    pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed (scripts/setup)"),
]


def demo_hosts():
    """{inventory host: loopback address} of the demo's GPU servers."""
    with open(REPO / "inventories" / "demo" / "hosts.yml") as hosts:
        inventory = yaml.safe_load(hosts)
    servers = inventory["all"]["children"]["gpu_servers"]["hosts"]
    return {name: host["ansible_host"] for name, host in servers.items()}


def free_base_port(addresses, count=16):
    """A base port with COUNT free ports above it on every address."""
    rng = random.Random()
    for dummy in range(50):
        base = rng.randrange(20000, 50000, 100)
        if all(ports_free(address, range(base, base + count)) for address in addresses):
            return base
    raise RuntimeError("no free port range on %s" % sorted(addresses))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("demo-fleet")
    staging = tmp_path / "staging"
    hosts = demo_hosts()
    base_port = free_base_port(hosts.values())
    gateway = {"address": "127.0.0.1", "port": free_port(), "stats_port": free_port(), "metrics_port": free_port()}
    overrides = {
        "gpufleet_base_port": base_port,
        "gateway_listen_port": gateway["port"],
        "gateway_stats_port": gateway["stats_port"],
        "gateway_metrics_port": gateway["metrics_port"],
        "gateway_manage_service": False,
        "vllm_manage_service": False,
        # HAProxy runs unprivileged in the foreground here.
        "gateway_user": "", "gateway_group": "", "gateway_chroot": "",
        "gateway_admin_socket": "", "gateway_log_target": "",
        "gateway_check_interval": "300ms", "gateway_check_fall": 2, "gateway_check_rise": 1,
    }
    (tmp_path / "overrides.json").write_text(json.dumps(overrides))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               GPUFLEET_STAGING=str(staging), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible-tmp"))
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "playbooks/deploy_inference.yml", "-i", "inventories/demo",
         "-e", "@%s" % (tmp_path / "overrides.json")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=900,
    )
    assert result.returncode == 0, playbook_output.failures(result.stdout)

    configs = list(staging.glob("*/etc/haproxy/haproxy.cfg"))
    assert len(configs) == 1, configs
    config = configs[0]
    servers = {}
    for name, address, port in re.findall(r"^\s+server (\S+) (\S+):(\d+)", config.read_text(), re.M):
        servers[name] = (address, int(port))
    units = {}
    for host in hosts:
        # The instances' units (the host's agent for the gateways, gpufleet-agent*, runs no instance).
        for unit in sorted((staging / host / "etc" / "systemd" / "system").glob("gpufleet-vllm-*.service")):
            units["%s-%s" % (host, unit.name[len("gpufleet-"):-len(".service")])] = unit

    processes = ProcessGroup(str(tmp_path))
    instances = []
    try:
        for slot, (key, unit) in enumerate(sorted(units.items())):
            process = service_process(str(unit), SYSTEMD_BASE_ENVIRONMENT)
            argv, binding = rebind_to_local_node(process["argv"], LOCAL_NODE, slot=slot)
            program = split_numactl(argv)[2]
            assert program[0] == str(STUB), "the demo's %s should run the stub, not %s" % (unit, program[0])
            option = dict(zip(program, program[1:]))
            processes.start(key, argv, process["environment"], cwd=process["working_directory"])
            instances.append({"key": key, "unit": process, "binding": binding,
                              "address": option["--host"], "port": int(option["--port"])})
        for entry in instances:
            wait_for_health(processes, entry["key"], entry["address"], entry["port"])
        processes.start("haproxy", [HAPROXY, "-W", "-db", "-f", str(config)], dict(os.environ))
        wait_for_health(processes, "haproxy", gateway["address"], gateway["port"])
        wait_until(lambda: haproxy_fully_up(gateway["address"], gateway["stats_port"]), 15, what="every backend UP")
        yield {"instances": instances, "servers": servers, "gateway": gateway, "hosts": hosts, "staging": staging,
               "processes": processes, "playbook_output": result.stdout}
    finally:
        processes.stop_all()


def test_demo_gateway_lists_exactly_the_rendered_units(demo):
    assert demo["instances"], "the demo plan rendered no unit"
    rendered = {e["key"]: (e["address"], e["port"]) for e in demo["instances"]}
    assert demo["servers"] == rendered
    # Each demo host's instances listen on that host's own address.
    for entry in demo["instances"]:
        host = next(h for h in demo["hosts"] if entry["key"].startswith(h + "-"))
        assert entry["address"] == demo["hosts"][host]


def test_demo_units_bind_each_instance_to_one_numa_node_set(demo):
    for entry in demo["instances"]:
        requested = entry["binding"]["requested"]
        nodes = requested.get("membind") or requested.get("interleave")
        assert nodes, "%s binds no memory: %r" % (entry["key"], requested)
        if "cpunodebind" in requested:
            assert requested["cpunodebind"] == nodes, entry["key"]
        else:
            assert "physcpubind" in requested, entry["key"]


def test_demo_instances_run_with_the_binding_and_gpus_of_their_unit(demo):
    for entry in demo["instances"]:
        status, dummy, body = http_request(entry["address"], entry["port"], "GET", "/debug/binding")
        assert status == 200
        report = json.loads(body)
        assert report["cpus"] == entry["binding"]["cpus"], entry["key"]
        assert report["memory_policy"] == entry["binding"]["memory_policy"], entry["key"]
        environment = entry["unit"]["environment"]
        assert report["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert report["environment"]["CUDA_VISIBLE_DEVICES"] == environment["CUDA_VISIBLE_DEVICES"]
        gpus = environment["CUDA_VISIBLE_DEVICES"].split(",")
        assert len(gpus) == report["tensor_parallel_size"] * report["pipeline_parallel_size"]


def test_demo_gateway_answers_every_request_from_every_instance(demo):
    gateway = demo["gateway"]
    served = json.loads(http_request(gateway["address"], gateway["port"], "GET", "/v1/models")[2])["data"][0]["id"]
    answered = {}
    for dummy in range(REQUESTS):
        status, dummy, body = http_request(gateway["address"], gateway["port"], "POST", "/v1/completions",
                                           {"model": served, "prompt": "Hi", "max_tokens": 2})
        assert status == 200, body
        report = json.loads(body)["stub_binding"]
        key = (report["host"], report["port"])
        answered[key] = answered.get(key, 0) + 1
    assert set(answered) == {(e["address"], e["port"]) for e in demo["instances"]}, answered
    print("demo fleet: %d instances answered %s" % (len(answered), sorted(answered.values())))


def test_demo_gateway_exports_every_server_to_prometheus(demo):
    """HAProxy's own exporter (PROMEX) on the gateway's metrics port: every
    server of the rendered configuration, UP, as Prometheus reads it."""
    gateway = demo["gateway"]
    status, dummy, body = http_request(gateway["address"], gateway["metrics_port"], "GET", "/metrics")
    assert status == 200
    text = body.decode()
    up = set(re.findall(r'^haproxy_server_status\{proxy="[^"]+",server="([^"]+)",state="UP"\} 1$', text, re.M))
    assert up == set(demo["servers"]), text[:2000]
    assert http_request(gateway["address"], gateway["metrics_port"], "GET", "/other")[0] == 404


def test_demo_deploy_writes_a_scrape_target_per_running_instance(demo):
    """The file_sd targets the deploy wrote: one per rendered unit, at the
    address and port it listens on, with its host and instance labels."""
    targets = json.loads((demo["staging"] / "prometheus" / "vllm.json").read_text())
    written = {group["labels"]["instance"].replace("/", "-"): group["targets"] for group in targets}
    assert written == {e["key"]: ["%s:%d" % (e["address"], e["port"])] for e in demo["instances"]}
    gateways = json.loads((demo["staging"] / "prometheus" / "gateway.json").read_text())
    assert [g["targets"] for g in gateways] == [["127.0.0.1:%d" % demo["gateway"]["metrics_port"]]]


def test_demo_report_says_once_why_each_hosts_units_were_not_started(demo):
    """vllm_manage_service false: the units were written and validated, not
    started; the report says so once, a line per GPU host (no task of role
    vllm says it per host)."""
    output = demo["playbook_output"]
    assert "TASK [gpufleet.numa.vllm : Say" not in output
    said = re.findall(r"^TASK \[Say where units were written and validated but not started\].*?(?=^TASK \[|^PLAY )",
                      output, re.M | re.S)
    assert len(said) == 1, output[-6000:]
    text = " ".join(said[0].split())  # the callback folds long lines
    lines = re.findall(r"- '([\w.-]+): service manager here is \S+ and vllm_manage_service is False: units rendered "
                       r"and validated in \S+/etc/systemd/system, not started'", text)
    assert sorted(lines) == sorted(demo["hosts"]), said[0]
