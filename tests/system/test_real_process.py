# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Real processes from real rendered units, behind the real gateway.

The roles gpufleet.numa.vllm and gpufleet.numa.gateway render a three-host
fleet plan (fixtures/plan_three_hosts.yml) into a staging directory. Each
rendered unit is then executed the way systemd would (its ExecStart= and
environment, read by systemd_exec), with only numactl's node and CPU
arguments moved to this machine's NUMA node 0 and vLLM replaced by the
stub. The gateway's HAProxy configuration is run by the real haproxy, and
requests go through it over loopback. Each planned host gets its own
127.0.0.x address, as it would have its own IP.

Per-worker binding (binding.mode per_worker) is planned by the real planner
for a machine that looks like this one (two GPUs on NUMA node 0), so its
units run as rendered: the stub starts each GPU worker under the numactl
arguments vLLM derives from --numa-bind-nodes/--numa-bind-cpus and reports
what every worker got.

A multi-node instance (tp 1, pp 2 over two such machines, one stage each)
is planned by the real planner too: the worker's unit starts first and its
ExecStartPre waits for the head's rendezvous port, the head serves once
rank 1 has joined, and the worker fails when the head stops.
"""

import getpass
import grp
import http.client
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from fleet_processes import (
    SYSTEMD_BASE_ENVIRONMENT, ProcessGroup, free_port, haproxy_server_states, http_request,
    is_numactl, node_cpus, ports_free, rebind_to_local_node, split_numactl, systemd_binding_as_numactl,
    wait_for_health, wait_until,
)
from systemd_exec import parse_exec_line, read_unit, service_process, unit_values

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
STUB = REPO / "tests" / "stub" / "vllm-stub"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PYTHON = REPO / ".venv" / "bin" / "python"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
NUMACTL = shutil.which("numactl") or "/usr/bin/numactl"
LOCAL_NODE = 0
# Recorded CPUs and NUMA node of the CI machine with two made-up GPUs on node 0.
TWO_GPU_MACHINE = REPO / "tests" / "fixtures" / "machines" / "this_machine_2gpu_synthetic" / "capture.yml"

# A model name that breaks any ExecStart= quoting that is not right.
MODEL = 'acme/Llama "7B" 100% $HOME \\ tuned'
SERVED_NAME = "llama-7b"
API_KEY = 'k3y "with" $pecial \\ chars'
REQUESTS = 40

pytestmark = [
    pytest.mark.skipif(not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (scripts/setup)"),
    pytest.mark.skipif(not os.access(NUMACTL, os.X_OK), reason="numactl is not installed (scripts/setup)"),
    pytest.mark.skipif(not os.path.exists("/proc/self/numa_maps"), reason="kernel without NUMA support"),
]

PLAYBOOK = """\
- name: One NUMA-bound unit per planned instance
  hosts: gpu_servers
  gather_facts: false
  roles:
    - role: gpufleet.numa.vllm
      vars:
        vllm_instances: "{{ plan.instances | selectattr('host', 'equalto', inventory_hostname) | list }}"

- name: The gateway in front of every instance
  hosts: gateways
  gather_facts: false
  roles:
    - role: gpufleet.numa.gateway
      vars:
        gateway_backends: >-
          {{ plan | gpufleet.numa.gateway_backends(addresses=dict(groups['gpu_servers']
               | zip(groups['gpu_servers'] | map('extract', hostvars)
                     | map(attribute='vllm_listen_host', default='')))) }}
        gateway_backend_api_keys: >-
          {{ plan | gpufleet.numa.gateway_api_keys(api_keys=dict(groups['gpu_servers']
               | zip(groups['gpu_servers'] | map('extract', hostvars)
                     | map(attribute='vllm_api_key', default='')))) }}
"""


def load_plan(addresses):
    """The fixture plan, ready to render (move_ports)."""
    with open(HERE / "fixtures" / "plan_three_hosts.yml") as fixture:
        return move_ports(yaml.safe_load(fixture), addresses)


def move_ports(plan, addresses):
    """PLAN with API ports moved to ports free on each host's address (same
    offset for all, as fleet_plan's base_port would) and the model names
    fleet_plan_by_host records."""
    rng = random.Random()
    for dummy in range(50):
        offset = rng.randrange(10000, 50000, 10) - 8000
        if all(ports_free(addresses[i["host"]], [i["port"] + offset]) for i in plan["instances"]):
            break
    else:
        raise RuntimeError("no free port range found on %s" % sorted(addresses.values()))
    for instance in plan["instances"]:
        instance["port"] += offset
        # What fleet_plan_by_host records from the hosts' vllm_* variables.
        instance.update(model=MODEL, served_model_name=SERVED_NAME)
    return plan


def inventory(staging, addresses, gateway, binding):
    """Inventory: one local host per planned host, plus the gateway."""
    user = getpass.getuser()
    group = grp.getgrgid(os.getgid()).gr_name
    hosts = {}
    for host, address in addresses.items():
        root = staging / host
        hosts[host] = {
            "vllm_listen_host": address,
            "vllm_unit_dir": str(root / "etc" / "systemd" / "system"),
            "vllm_config_dir": str(root / "etc" / "vllm"),
            "vllm_state_dir": str(root / "var" / "lib" / "vllm"),
            "vllm_libexec_dir": str(root / "usr" / "libexec" / "gpufleet"),
        }
    return {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": str(PYTHON)},
        "children": {
            "gpu_servers": {
                "hosts": hosts,
                "vars": {
                    "vllm_model": MODEL,
                    "vllm_served_model_name": SERVED_NAME,
                    "vllm_binding": binding,
                    "vllm_numactl": NUMACTL,
                    "vllm_install": False,
                    "vllm_executable": str(STUB),
                    "vllm_download_weights": False,
                    "vllm_manage_user": False,
                    "vllm_user": user,
                    "vllm_group": group,
                    "vllm_manage_service": False,
                    "vllm_api_key": API_KEY,
                    "vllm_extra_args": {"max-model-len": 4096},
                    "vllm_shutdown_timeout": 5,
                    # Where the hosts reach each other (a multi-node head's is --master-addr).
                    "vllm_node_addresses": dict(addresses),
                    # Every "host" is this machine: a loopback --master-addr joins.
                    "vllm_allow_loopback_master": True,
                },
            },
            "gateways": {
                "hosts": {"gateway": {
                    "gateway_install": False,
                    "gateway_manage_service": False,
                    "gateway_config_path": str(staging / "gateway" / "etc" / "haproxy" / "haproxy.cfg"),
                    "gateway_listen_address": "127.0.0.1",
                    # Clients and instances take the same key here; the gateway
                    # checks it, then sends the instances' own key on.
                    "gateway_api_key": API_KEY,
                    "gateway_listen_port": gateway["port"],
                    "gateway_stats_port": gateway["stats_port"],
                    "gateway_metrics_port": 0,
                    "gateway_haproxy": HAPROXY,
                    # Unprivileged, in the foreground: no user switch, chroot or sockets under /run.
                    "gateway_user": "",
                    "gateway_group": "",
                    "gateway_chroot": "",
                    "gateway_admin_socket": "",
                    "gateway_log_target": "",
                    # Fast checks so that a dead backend leaves within a second.
                    "gateway_check_interval": "300ms",
                    "gateway_check_fall": 2,
                    "gateway_check_rise": 1,
                }},
            },
        },
    }}


def unit_path(tmp_path, instance):
    """Where render_with_roles wrote the unit of a plan instance."""
    return (tmp_path / "staging" / instance["host"] / "etc" / "systemd" / "system"
            / ("gpufleet-%s.service" % instance["name"]))


def render_with_roles(tmp_path, plan, addresses, gateway, binding="numactl", extra_args=()):
    inventory_data = inventory(tmp_path / "staging", addresses, gateway, binding)
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory_data))
    (tmp_path / "plan.json").write_text(json.dumps({"plan": plan}))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible-tmp"))
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "inventory.yml"), "-e", "@%s" % (tmp_path / "plan.json"),
         str(tmp_path / "play.yml")] + list(extra_args),
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Render, start every instance and the gateway; stop them all at the end."""
    tmp_path = tmp_path_factory.mktemp("real-process")
    addresses = {"gpu-a": "127.0.0.21", "gpu-b": "127.0.0.22", "gpu-c": "127.0.0.23"}
    plan = load_plan(addresses)
    gateway = {"address": "127.0.0.1", "port": free_port("127.0.0.1")}
    gateway["stats_port"] = free_port("127.0.0.1")
    render_with_roles(tmp_path, plan, addresses, gateway)

    logs = tmp_path / "logs"
    logs.mkdir()
    processes = ProcessGroup(str(logs))
    instances = []
    try:
        shared_slot = 0
        for instance in plan["instances"]:
            unit = unit_path(tmp_path, instance)
            process = service_process(str(unit), SYSTEMD_BASE_ENVIRONMENT)
            rendered_argv = process["argv"]
            assert is_numactl(rendered_argv[0]), "%s does not start with numactl: %r" % (unit, rendered_argv)
            argv, binding = rebind_to_local_node(rendered_argv, LOCAL_NODE, slot=shared_slot)
            if not instance["binding"]["by_node"]:
                shared_slot += 1
            dummy, dummy, program = split_numactl(argv)
            assert program[0] == str(STUB), "unit %s runs %s, not the stub" % (unit, program[0])
            key = "%s-%s" % (instance["host"], instance["name"])
            processes.start(key, argv, process["environment"], cwd=process["working_directory"])
            instances.append({"key": key, "plan": instance, "address": addresses[instance["host"]],
                              "unit": process, "binding": binding, "argv": argv})
        for entry in instances:
            wait_for_health(processes, entry["key"], entry["address"], entry["plan"]["port"])

        config = tmp_path / "staging" / "gateway" / "etc" / "haproxy" / "haproxy.cfg"
        # Master-worker mode in the foreground: what Debian's unit runs (-Ws)
        # and what makes `systemctl reload` (SIGUSR2 to the master) seamless.
        processes.start("haproxy", [HAPROXY, "-W", "-db", "-f", str(config)], dict(os.environ))
        wait_for_health(processes, "haproxy", gateway["address"], gateway["port"])

        def all_up():
            try:
                states = haproxy_server_states(gateway["address"], gateway["stats_port"])
            except OSError:
                return False
            return len(states) == len(instances) and set(states.values()) == {"UP"}
        wait_until(all_up, 15, what="every backend UP in HAProxy")

        def render_gateway_again(*extra_vars):
            arguments = ["--limit", "gateways"]
            for extra in extra_vars:
                arguments += ["-e", extra]
            render_with_roles(tmp_path, plan, addresses, gateway, extra_args=arguments)

        yield {"instances": instances, "gateway": gateway, "processes": processes, "plan": plan,
               "config": config, "render_gateway_again": render_gateway_again,
               "monitor_uri": "/gateway/health"}
    finally:
        processes.stop_all()


def completion(gateway, key=API_KEY, stream=False, path="/v1/completions"):
    body = {"model": SERVED_NAME, "prompt": "Hello", "max_tokens": 4, "stream": stream}
    if path.endswith("chat/completions"):
        body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "Hello"}],
                "max_tokens": 4, "stream": stream}
    headers = {"Authorization": "Bearer " + key} if key else {}
    return http_request(gateway["address"], gateway["port"], "POST", path, body, headers, timeout=5.0)


def test_rendered_units_bind_the_planned_nodes(fleet):
    for entry in fleet["instances"]:
        binding, requested = entry["plan"]["binding"], entry["binding"]["requested"]
        nodes = ",".join(str(node) for node in binding["mems"])
        if binding["policy"] == "interleave":
            assert requested.get("interleave") == nodes, (entry["key"], requested)
        else:
            assert requested.get("membind") == nodes, (entry["key"], requested)
        if not binding["by_node"]:
            assert requested.get("physcpubind") == binding["cpus"], (entry["key"], requested)
            assert "cpunodebind" not in requested
        else:
            assert requested.get("cpunodebind") == nodes, (entry["key"], requested)


def test_stub_processes_run_with_the_binding_numactl_applied(fleet):
    for entry in fleet["instances"]:
        status, dummy, body = http_request(entry["address"], entry["plan"]["port"], "GET", "/debug/binding")
        assert status == 200
        report = json.loads(body)
        assert report["cpus"] == entry["binding"]["cpus"], entry["key"]
        assert report["memory_policy"] == entry["binding"]["memory_policy"], entry["key"]
        assert report["mems_allowed"] == str(LOCAL_NODE), entry["key"]


def test_stub_processes_see_the_planned_gpus_and_ports(fleet):
    for entry in fleet["instances"]:
        plan = entry["plan"]
        status, dummy, body = http_request(entry["address"], plan["port"], "GET", "/debug/binding")
        report = json.loads(body)
        assert report["environment"]["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in plan["gpu_indices"])
        assert report["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert report["environment"]["VLLM_PORT"] == str(plan["dist_port"])
        assert report["model"] == MODEL, "the model name did not survive ExecStart= quoting"
        assert report["served_model_names"] == [SERVED_NAME]
        assert report["tensor_parallel_size"] == plan["tp_size"]
        assert report["pipeline_parallel_size"] == plan["pp_size"]
        assert (report["host"], report["port"]) == (entry["address"], plan["port"])
        assert report["argv"][1:] == entry["argv"][entry["argv"].index(str(STUB)) + 1:]


def test_gateway_spreads_requests_over_every_backend(fleet):
    by_port = {(e["address"], e["plan"]["port"]): e for e in fleet["instances"]}
    answered = {}
    for dummy in range(REQUESTS):
        status, headers, body = completion(fleet["gateway"])
        assert status == 200, body
        report = json.loads(body)["stub_binding"]
        entry = by_port[(report["host"], report["port"])]
        # The answer came from the NUMA-bound process of that instance.
        assert report["cpus"] == entry["binding"]["cpus"]
        assert report["memory_policy"] == entry["binding"]["memory_policy"]
        answered[entry["key"]] = answered.get(entry["key"], 0) + 1
    assert sorted(answered) == sorted(e["key"] for e in fleet["instances"]), answered
    # leastconn with equal load takes turns: no backend is starved.
    assert min(answered.values()) >= REQUESTS // len(fleet["instances"]) // 2, answered


def test_gateway_streams_server_sent_events(fleet):
    status, headers, body = completion(fleet["gateway"], stream=True, path="/v1/chat/completions")
    assert status == 200
    assert headers.get("content-type") == "text/event-stream"
    events = [line[len("data: "):] for line in body.decode().split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert len(chunks) == 4
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == "stub0 stub1 stub2 stub3"


def test_gateway_checks_the_key_and_sends_the_instances_key_on(fleet):
    status, dummy, body = completion(fleet["gateway"], key=None)
    assert status == 401, body
    status, dummy, dummy = completion(fleet["gateway"], key="wrong")
    assert status == 401
    status, dummy, body = http_request(fleet["gateway"]["address"], fleet["gateway"]["port"], "GET", "/v1/models",
                                       headers={"Authorization": "Bearer " + API_KEY})
    assert status == 200
    assert [model["id"] for model in json.loads(body)["data"]] == [SERVED_NAME]


def test_gateway_reload_keeps_open_streams_and_serves_throughout(fleet):
    """The role changes the configuration; a reload the way Debian's unit
    does it (SIGUSR2 to the master) neither cuts an open stream nor refuses
    new requests."""
    gateway, processes = fleet["gateway"], fleet["processes"]
    fleet["render_gateway_again"]("gateway_monitor_uri=/gateway/ready")
    assert "    monitor-uri /gateway/ready\n" in fleet["config"].read_text()
    # Until the reload the running HAProxy forwards that path to a backend
    # (past the key check: every path but /health and the monitor URI).
    assert http_request(gateway["address"], gateway["port"], "GET", "/gateway/ready",
                        headers={"Authorization": "Bearer " + API_KEY})[0] == 404

    tokens = 12
    connection = http.client.HTTPConnection(gateway["address"], gateway["port"], timeout=10)
    connection.request("POST", "/v1/completions", body=json.dumps({
        "model": SERVED_NAME, "prompt": "Hello", "max_tokens": tokens, "stream": True, "stub_token_delay": 0.25,
    }), headers={"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
    response = connection.getresponse()
    assert response.status == 200
    received = response.read1()
    assert received.startswith(b"data: "), received

    statuses = []
    stop = threading.Event()

    def keep_asking():
        while not stop.is_set():
            try:
                statuses.append(completion(gateway)[0])
            except OSError as error:
                statuses.append(repr(error))

    asker = threading.Thread(target=keep_asking)
    asker.start()
    try:
        time.sleep(0.3)
        os.kill(processes.processes["haproxy"][0].pid, signal.SIGUSR2)
        wait_until(lambda: http_request(gateway["address"], gateway["port"], "GET", "/gateway/ready")[0] == 200,
                   10, what="the reloaded configuration to answer /gateway/ready")
        while True:
            chunk = response.read1()
            if not chunk:
                break
            received += chunk
        time.sleep(0.3)
    finally:
        stop.set()
        asker.join(10)
        connection.close()
    events = [e for e in received.decode().split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "data: [DONE]", received[-300:]
    assert len(events) == tokens + 1, "the stream lost events across the reload"
    assert statuses and set(statuses) == {200}, statuses
    assert processes.processes["haproxy"][0].poll() is None, processes.log("haproxy")
    fleet["monitor_uri"] = "/gateway/ready"
    print("%d requests answered 200 while HAProxy reloaded under an open stream" % len(statuses))


def test_gateway_takes_a_dead_backend_out_and_instances_stop_cleanly(fleet):
    """Runs last: it kills one instance and then stops the others."""
    gateway, processes = fleet["gateway"], fleet["processes"]
    victim = fleet["instances"][1]
    survivors = [e for e in fleet["instances"] if e is not victim]
    processes.signal(victim["key"], signal.SIGKILL)
    killed_at = time.monotonic()

    def victim_down():
        return haproxy_server_states(gateway["address"], gateway["stats_port"]).get(victim["key"], "").startswith("DOWN")
    wait_until(victim_down, 10, what="HAProxy marking %s DOWN" % victim["key"])
    detected_after = time.monotonic() - killed_at
    states = haproxy_server_states(gateway["address"], gateway["stats_port"])
    assert all(states[e["key"]] == "UP" for e in survivors), states

    answered = set()
    for dummy in range(REQUESTS):
        status, dummy, body = completion(gateway)
        assert status == 200, body
        report = json.loads(body)["stub_binding"]
        answered.add((report["host"], report["port"]))
    assert (victim["address"], victim["plan"]["port"]) not in answered
    assert answered == {(e["address"], e["plan"]["port"]) for e in survivors}
    status, dummy, dummy = http_request(gateway["address"], gateway["port"], "GET", fleet["monitor_uri"])
    assert status == 200
    print("HAProxy marked the killed backend DOWN after %.2fs" % detected_after)

    # Like systemd stopping the units: SIGTERM, and every stub exits 0.
    for entry in survivors:
        assert processes.stop(entry["key"]) == 0, processes.log(entry["key"])

    # With no backend left the gateway says so on its own health path.
    wait_until(lambda: http_request(gateway["address"], gateway["port"], "GET", fleet["monitor_uri"])[0] == 503,
               10, what="the gateway's health path to answer 503")


def test_systemd_binding_units_name_the_planned_placement_and_run_with_it(tmp_path):
    """vllm_binding: systemd puts the placement in CPUAffinity=/NUMAPolicy=/
    NUMAMask= instead of a numactl prefix. Without systemd as PID 1 the test
    applies those directives with numactl (as systemd applies them before
    exec), moved to node 0, and checks what the process got."""
    addresses = {"gpu-a": "127.0.0.24", "gpu-b": "127.0.0.25", "gpu-c": "127.0.0.26"}
    plan = load_plan(addresses)
    gateway = {"address": "127.0.0.1", "port": free_port(), "stats_port": free_port()}
    render_with_roles(tmp_path, plan, addresses, gateway, binding="systemd")
    local_cpus = node_cpus(LOCAL_NODE)
    processes = ProcessGroup(str(tmp_path))
    try:
        for slot, instance in enumerate(plan["instances"]):
            process = service_process(str(unit_path(tmp_path, instance)), SYSTEMD_BASE_ENVIRONMENT)
            assert process["argv"][0] == str(STUB), "ExecStart= should run vLLM directly: %r" % process["argv"]
            service = process["service"]
            nodes = ",".join(str(node) for node in instance["binding"]["mems"])
            assert service["CPUAffinity"] == instance["binding"]["cpus"]
            assert service["NUMAPolicy"] == instance["binding"]["policy"]
            assert service["NUMAMask"] == nodes
            cpus = [local_cpus[slot % len(local_cpus)]] if not instance["binding"]["by_node"] else local_cpus
            prefix, binding = systemd_binding_as_numactl(service, NUMACTL, LOCAL_NODE, cpus)
            key = "%s-%s" % (instance["host"], instance["name"])
            processes.start(key, prefix + process["argv"], process["environment"], cwd=process["working_directory"])
            address, port = addresses[instance["host"]], instance["port"]
            wait_for_health(processes, key, address, port)
            report = json.loads(http_request(address, port, "GET", "/debug/binding")[2])
            assert report["cpus"] == binding["cpus"], key
            assert report["memory_policy"] == binding["memory_policy"], key
            assert report["environment"]["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in instance["gpu_indices"])
            assert report["model"] == MODEL
            assert processes.stop(key) == 0, processes.log(key)
    finally:
        processes.stop_all()


# --- per-worker binding: vLLM binds each GPU worker itself -----------------

PER_WORKER_ADDRESSES = {"gpu-node": "127.0.0.27", "gpu-cpus": "127.0.0.28"}


def this_machine_facts(usable_cpus=None):
    """Topology facts that look like this machine to the planner: the
    recorded two-GPU machine (both GPUs on NUMA node 0) with this machine's
    node 0 CPUs, and USABLE_CPUS of them usable where given (as a cpuset
    would leave them)."""
    facts = topology.facts_from_capture(str(TWO_GPU_MACHINE))
    assert [node["id"] for node in facts["numa_nodes"]] == [LOCAL_NODE]
    local = node_cpus(LOCAL_NODE)
    for entry in facts["sockets"] + facts["numa_nodes"]:
        entry["cpus"] = format_cpulist(local)
    for device in facts["gpus"] + facts["nics"]:
        device["local_cpus"] = format_cpulist(local)
    facts["smt_siblings"] = [[cpu] for cpu in local]
    facts["numa_nodes"][0]["usable_cpus"] = usable_cpus
    return facts


@pytest.fixture(scope="module")
def per_worker_units(tmp_path_factory):
    """One tp 1, pp 2 instance per host, planned by the real planner (one
    pipeline stage per GPU: binding.mode per_worker) and rendered by the
    roles: gpu-node binds by node; gpu-cpus, whose node 0 leaves the first
    CPU out (where this machine has more than one), by CPU list. Returns
    {host: {"plan": instance, "address", "unit": service_process(...)}}."""
    tmp_path = tmp_path_factory.mktemp("per-worker")
    local = node_cpus(LOCAL_NODE)
    fleet = {"gpu-node": this_machine_facts()}
    if len(local) > 1:
        fleet["gpu-cpus"] = this_machine_facts(usable_cpus=format_cpulist(local[1:]))
    addresses = dict((host, PER_WORKER_ADDRESSES[host]) for host in fleet)
    plan = move_ports(placement.plan_fleet(fleet, tp_size=1, pp_size=2), addresses)
    gateway = {"address": "127.0.0.1", "port": free_port(), "stats_port": free_port()}
    render_with_roles(tmp_path, plan, addresses, gateway)
    units = {}
    for instance in plan["instances"]:
        process = service_process(str(unit_path(tmp_path, instance)), SYSTEMD_BASE_ENVIRONMENT)
        units[instance["host"]] = {"plan": instance, "address": addresses[instance["host"]], "unit": process}
    assert sorted(units) == sorted(fleet)
    return units


def by_cpu_list_unit(per_worker_units):
    if "gpu-cpus" not in per_worker_units:
        pytest.skip("NUMA node %d has one CPU: nothing to leave out for binding by CPU list" % LOCAL_NODE)
    return per_worker_units["gpu-cpus"]


def planned_worker_args(binding):
    """Each worker's numactl arguments, as vLLM derives them from the
    --numa-bind-nodes/--numa-bind-cpus the plan's workers give."""
    return [["--cpunodebind=%d" % w["node"] if binding["by_node"] else "--physcpubind=%s" % w["cpus"],
             "--membind=%d" % w["node"]] for w in binding["workers"]]


def start_unit(processes, entry, argv=None):
    """Run the unit's ExecStart= (or ARGV) with its environment; return its binding report."""
    unit, instance = entry["unit"], entry["plan"]
    processes.start(instance["host"], argv or unit["argv"], unit["environment"], cwd=unit["working_directory"])
    wait_for_health(processes, instance["host"], entry["address"], instance["port"])
    return json.loads(http_request(entry["address"], instance["port"], "GET", "/debug/binding")[2])


def check_workers_bound_as_planned(processes, entry):
    instance = entry["plan"]
    binding = instance["binding"]
    numactl, options, program = split_numactl(entry["unit"]["argv"])
    assert program[0] == str(STUB)
    assert entry["unit"]["environment"]["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    report = start_unit(processes, entry)
    # The API server: the first stage's node, by node or on all the instance's CPUs.
    assert report["cpus"] == format_cpulist(parse_cpulist(binding["cpus"]))
    assert report["memory_policy"] == "bind:%d" % binding["mems"][0]
    assert report["numa_bind"]["errors"] == [], processes.log(instance["host"])
    workers = report["workers"]
    assert [w["gpu"] for w in workers] == [str(i) for i in instance["gpu_indices"]]
    assert [w["numactl_args"] for w in workers] == planned_worker_args(binding)
    for worker, planned in zip(workers, binding["workers"]):
        assert (worker["returncode"], worker["error"], worker["stderr"]) == (0, None, ""), worker
        assert worker["argv"][0] == numactl and worker["pid"] != report["pid"]
        cpus = node_cpus(planned["node"]) if binding["by_node"] else parse_cpulist(planned["cpus"])
        assert worker["cpus"] == format_cpulist(cpus), worker
        assert worker["memory_policy"] == "bind:%d" % planned["node"], worker
    return report


def test_per_worker_unit_binds_each_worker_to_its_gpus_node(processes, per_worker_units):
    entry = per_worker_units["gpu-node"]
    binding = entry["plan"]["binding"]
    assert (binding["mode"], binding["by_node"], entry["plan"]["pp_size"]) == ("per_worker", True, 2)
    assert [w["node"] for w in binding["workers"]] == [LOCAL_NODE, LOCAL_NODE]
    assert split_numactl(entry["unit"]["argv"])[1] == [("cpunodebind", str(LOCAL_NODE)),
                                                       ("membind", str(LOCAL_NODE))]
    report = check_workers_bound_as_planned(processes, entry)
    assert [w["numactl_args"] for w in report["workers"]] == [["--cpunodebind=0", "--membind=0"]] * 2


def test_per_worker_unit_binds_each_worker_to_its_cpu_list(processes, per_worker_units):
    entry = by_cpu_list_unit(per_worker_units)
    binding = entry["plan"]["binding"]
    usable = format_cpulist(node_cpus(LOCAL_NODE)[1:])
    assert (binding["mode"], binding["by_node"], binding["cpus"]) == ("per_worker", False, usable)
    assert [w["cpus"] for w in binding["workers"]] == [usable, usable]
    assert split_numactl(entry["unit"]["argv"])[1] == [("physcpubind", usable), ("membind", str(LOCAL_NODE))]
    report = check_workers_bound_as_planned(processes, entry)
    assert [w["numactl_args"] for w in report["workers"]] == [["--physcpubind=" + usable, "--membind=0"]] * 2


def test_per_worker_cpus_outside_the_api_servers_are_refused(processes, per_worker_units):
    """Why the API server of a by-CPU-list unit gets all the instance's CPUs:
    numactl refuses a --physcpubind outside its parent's CPUs. The same
    ExecStart= with the API server narrowed to the CPU the workers do not
    have (the argv edited here, not the plan) leaves every worker's numactl
    failing, which the checks above would catch. The stub's workers are
    children of the API server (vLLM's are children of its EngineCore)."""
    entry = by_cpu_list_unit(per_worker_units)
    workers = entry["plan"]["binding"]["workers"]
    numactl, options, program = split_numactl(entry["unit"]["argv"])
    outside = sorted(set(node_cpus(LOCAL_NODE)) - set(cpu for w in workers for cpu in parse_cpulist(w["cpus"])))
    assert outside, workers
    narrowed = [numactl] + ["--%s=%s" % (name, outside[0] if name == "physcpubind" else value)
                            for name, value in options] + program
    assert narrowed != entry["unit"]["argv"] and "--physcpubind=%d" % outside[0] in narrowed
    report = start_unit(processes, entry, narrowed)
    assert report["cpus"] == str(outside[0])
    assert [w["numactl_args"] for w in report["workers"]] == planned_worker_args(entry["plan"]["binding"])
    for worker, planned in zip(report["workers"], workers):
        assert worker["returncode"] == 1, worker
        assert worker["stdout"].startswith("<%s> is invalid" % planned["cpus"]), worker
        assert (worker["cpus"], worker["memory_policy"]) == (None, None), worker


# --- a multi-node instance: one pipeline stage on each of two hosts -------

MULTINODE_ADDRESSES = {"gpu-a": "127.0.0.29", "gpu-b": "127.0.0.30"}


def exec_lines(unit_file, key, environment):
    """argv of every KEY= (ExecStartPre, ExecStartPost) of a rendered unit, as systemd would run them."""
    with open(unit_file) as unit:
        sections = read_unit(unit.read(), str(unit_file))
    return [parse_exec_line(value, environment, key)[1] for value in unit_values(sections, "Service", key)]


def wait_ready_lines(unit_file, key, environment):
    """The gpufleet-wait-ready lines among a unit's KEY= lines."""
    return [argv for argv in exec_lines(unit_file, key, environment)
            if os.path.basename(argv[0]) == "gpufleet-wait-ready"]


def test_multinode_units_start_worker_first_then_head_and_fail_together(processes, tmp_path):
    """One tp 1, pp 2 instance over two hosts, planned by the real planner
    for two machines like this one and rendered by the role for each host:
    the worker's unit starts first and waits (its ExecStartPre) until the
    head's rendezvous port opens, then joins as rank 1; the head serves only
    then; when the head stops, the worker fails."""
    head_address = MULTINODE_ADDRESSES["gpu-a"]
    master_port = free_port(head_address)
    plan = placement.plan_fleet({"gpu-a": this_machine_facts(), "gpu-b": this_machine_facts()}, tp_size=1,
                                pp_size=2, nodes_per_instance=2, master_port=master_port)
    plan = move_ports(plan, MULTINODE_ADDRESSES)
    entries = dict((instance["host"], instance) for instance in plan["instances"])
    assert sorted(entries) == ["gpu-a", "gpu-b"]
    head_plan, worker_plan = entries["gpu-a"], entries["gpu-b"]
    assert head_plan["multinode"]["node_rank"] == 0 and worker_plan["multinode"]["node_rank"] == 1
    assert head_plan["multinode"]["master_port"] == master_port != head_plan["port"]
    gateway = {"address": "127.0.0.1", "port": free_port(), "stats_port": free_port()}
    render_with_roles(tmp_path, plan, MULTINODE_ADDRESSES, gateway)
    head_file, worker_file = unit_path(tmp_path, head_plan), unit_path(tmp_path, worker_plan)
    head = service_process(str(head_file), SYSTEMD_BASE_ENVIRONMENT)
    worker = service_process(str(worker_file), SYSTEMD_BASE_ENVIRONMENT)
    master = "%s:%d" % (head_address, master_port)
    for unit in (head, worker):
        dummy, dummy, program = split_numactl(unit["argv"])
        assert program[0] == str(STUB), unit["argv"]

    # Command lines: the head serves, rank 1 runs headless, both name the head's address.
    head_args, worker_args = split_numactl(head["argv"])[2], split_numactl(worker["argv"])[2]
    for args, rank in ((head_args, "0"), (worker_args, "1")):
        assert args[args.index("--nnodes") + 1] == "2", args
        assert args[args.index("--node-rank") + 1] == rank, args
        assert args[args.index("--master-addr") + 1] == head_address, args
        assert args[args.index("--master-port") + 1] == str(master_port), args
    assert "--headless" not in head_args
    assert head_args[head_args.index("--host") + 1:head_args.index("--host") + 4] == [
        head_address, "--port", str(head_plan["port"])]
    assert "--headless" in worker_args and "--host" not in worker_args and "--port" not in worker_args

    # The worker waits for the head's rendezvous port before it starts (and has no
    # ExecStartPost: it serves no /health); the head waits for its own /health.
    (worker_pre,) = wait_ready_lines(worker_file, "ExecStartPre", worker["environment"])
    assert worker_pre[1:] == ["tcp://%s" % master, worker["environment"]["VLLM_ENGINE_READY_TIMEOUT_S"]], worker_pre
    assert wait_ready_lines(worker_file, "ExecStartPost", worker["environment"]) == []
    assert wait_ready_lines(head_file, "ExecStartPre", head["environment"]) == []
    (head_post,) = wait_ready_lines(head_file, "ExecStartPost", head["environment"])
    assert head_post[1] == "http://%s:%d/health" % (head_address, head_plan["port"]), head_post

    # The worker's unit first: its ExecStartPre waits while no head listens.
    processes.start("gpu-b-pre", worker_pre, worker["environment"], cwd=worker["working_directory"])
    time.sleep(1.5)
    assert processes.processes["gpu-b-pre"][0].poll() is None, processes.log("gpu-b-pre")
    processes.start("gpu-a", head["argv"], head["environment"], cwd=head["working_directory"])
    assert processes.processes["gpu-b-pre"][0].wait(30) == 0, processes.log("gpu-b-pre")
    # The head's port is open, but it does not serve before its rank joins.
    assert http_request(head_address, head_plan["port"], "GET", "/health")[0] == 503
    processes.start("gpu-b", worker["argv"], worker["environment"], cwd=worker["working_directory"])
    wait_for_health(processes, "gpu-a", head_address, head_plan["port"])
    post = subprocess.run(head_post, env=head["environment"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False, timeout=60)
    assert post.returncode == 0, post.stdout
    assert "vllm-stub: node rank 1 of 2 joined head %s\n" % master in processes.log("gpu-b")

    report = json.loads(http_request(head_address, head_plan["port"], "GET", "/debug/binding")[2])
    assert report["multinode"] == {"nnodes": 2, "node_rank": 0, "master": master}
    (rank,) = report["ranks"]
    assert (rank["node_rank"], rank["nnodes"], rank["master"]) == (1, 2, master), rank
    assert rank["cuda_visible_devices"] == ",".join(str(i) for i in worker_plan["gpu_indices"]), rank
    assert rank["pid"] == processes.processes["gpu-b"][0].pid, rank
    assert report["environment"]["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in head_plan["gpu_indices"])
    status, dummy, body = http_request(head_address, head_plan["port"], "POST", "/v1/completions",
                                       {"model": SERVED_NAME, "max_tokens": 2},
                                       {"Authorization": "Bearer " + API_KEY})
    assert status == 200, body

    # Stopping the head (systemd's SIGTERM) fails its rank: systemd restarts it.
    assert processes.stop("gpu-a") == 0, processes.log("gpu-a")
    assert processes.processes["gpu-b"][0].wait(15) == 1, processes.log("gpu-b")
    assert "head %s closed the connection" % master in processes.log("gpu-b")
