# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/command.py: what one instance's unit runs, on plans fleet_plan
makes for recorded machines.

Each unit's command line is read back the way numactl reads it and compared
with the machine's own topology (which CPUs a node holds, which node a GPU
sits on), not with a second copy of the binding rule.
"""

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import (
    INSTANCE,
    PLANS,
    VARIABLES,
    node_cpus,
    numactl_reading,
    vllm_options,
)

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist


# The variable that names an instance's GPUs, per device class (docs/deploy.md).
VISIBLE = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "ROCR_VISIBLE_DEVICES"}


def plan_variables(plan, **variables):
    """VARIABLES for a recorded plan: vLLM for ROCm is the operator's, not
    installed by the role, so AMD plans (MI250, MI300X, MI50) render with
    an existing install in the venv."""
    amd = any(i.get("device") == "amd" for i in plan["instances"])
    return dict(VARIABLES, vllm_install=not amd, **variables)


def test_recorded_machines_give_plans():
    assert len(PLANS) >= 20


@pytest.mark.parametrize("case,facts,plan", PLANS, ids=[p[0] for p in PLANS])
def test_numactl_binding_covers_exactly_the_planned_cpus_and_gpu_nodes(case, facts, plan):
    units = host_state.host_units(plan["instances"], plan_variables(plan))["units"]
    assert [u["name"] for u in units] == [i["name"] for i in plan["instances"]]
    gpu_nodes = {g["index"]: g["numa_node"] for g in facts["gpus"]}
    nodes_with_cpus = {n["id"] for n in facts["numa_nodes"] if n["cpus"]}
    for instance, unit in zip(plan["instances"], units):
        options, program = numactl_reading(unit["argv"])
        per_worker = instance["pp_size"] > 1  # worker_binding auto
        assert instance["binding"]["mode"] == ("per_worker" if per_worker else "process")
        # CPUs: by node means every CPU of those nodes; by list, the list.
        if "cpunodebind" in options:
            cpus = node_cpus(facts, parse_cpulist(options["cpunodebind"]))
        else:
            cpus = set(parse_cpulist(options["physcpubind"]))
        assert len(options) == 2, options
        memory_option = "membind" if instance["binding"]["policy"] == "bind" else "interleave"
        mems = parse_cpulist(options[memory_option])
        assert program[:3] == ["/opt/vllm/bin/vllm", "serve", VARIABLES["vllm_model"]]
        flags = vllm_options(program[3:])
        # Memory comes from the nodes the instance's GPUs sit on (when known);
        # per worker, the API server's from the first stage's.
        known = [gpu_nodes[i] for i in instance["gpu_indices"] if gpu_nodes.get(i) in nodes_with_cpus]
        if per_worker:
            first = instance["stages"][0]["numa_nodes"]
            assert mems == first, case
            by_node = "cpunodebind" in options
            assert cpus == (node_cpus(facts, first) if by_node else set(parse_cpulist(instance["cpus"]))), case
            assert flags["--numa-bind"] == []
            worker_nodes = [int(n) for n in flags["--numa-bind-nodes"]]
            assert len(worker_nodes) == len(instance["gpu_indices"])
            if len(known) == len(worker_nodes):
                assert worker_nodes == known, case
            if by_node:
                assert "--numa-bind-cpus" not in flags
            else:
                worker_cpus = [set(parse_cpulist(c)) for c in flags["--numa-bind-cpus"]]
                for node, each in zip(worker_nodes, worker_cpus):
                    assert each and each <= node_cpus(facts, [node]) & cpus, case
                assert set().union(*worker_cpus) == set(parse_cpulist(instance["cpus"])), case
            assert dict(unit["environment"])["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
        else:
            assert cpus == set(parse_cpulist(instance["cpus"])), case
            if known:
                assert set(known) <= set(mems), case
            assert mems == instance["numa_nodes"]
            assert not {"--numa-bind", "--numa-bind-nodes", "--numa-bind-cpus"} & set(flags)
            assert "VLLM_WORKER_MULTIPROC_METHOD" not in dict(unit["environment"])
        assert flags["--tensor-parallel-size"] == [str(instance["tp_size"])]
        assert flags.get("--pipeline-parallel-size", ["1"]) == [str(instance["pp_size"])]
        assert flags["--port"] == [str(instance["port"])]
        environment = dict(unit["environment"])
        assert environment[VISIBLE[instance["device"]]] == ",".join(str(i) for i in instance["gpu_indices"])
        assert environment["VLLM_PORT"] == str(instance["dist_port"])
        assert unit["numa"] == []


@pytest.mark.parametrize("case,facts,plan", PLANS[::3], ids=[p[0] for p in PLANS[::3]])
def test_systemd_binding_writes_the_same_placement_as_directives(case, facts, plan):
    units = host_state.host_units(plan["instances"], plan_variables(plan, vllm_binding="systemd"))["units"]
    for instance, unit in zip(plan["instances"], units):
        numa = dict(unit["numa"])
        binding = instance["binding"]
        assert set(parse_cpulist(numa["CPUAffinity"])) == set(parse_cpulist(binding["cpus"]))
        assert numa["NUMAPolicy"] == binding["policy"]
        assert parse_cpulist(numa["NUMAMask"]) == binding["mems"]
        if binding["mode"] == "process":
            assert (binding["cpus"], binding["policy"], binding["mems"]) == (
                instance["cpus"], instance["memory_policy"], instance["numa_nodes"])
        assert unit["argv"][0] == "/opt/vllm/bin/vllm"


def test_by_node_comes_from_the_plan_not_from_other_fields():
    instance = dict(PLANS[0][2]["instances"][0])
    instance["binding"] = dict(instance["binding"], by_node=False, cpus="3-5")
    instance["cpus_whole_nodes"] = True
    argv = host_state.host_units([instance], VARIABLES)["units"][0]["argv"]
    assert argv[1] == "--physcpubind=3-5"
    instance["binding"] = dict(instance["binding"], by_node=True, mems=[1])
    argv = host_state.host_units([instance], VARIABLES)["units"][0]["argv"]
    assert argv[1:3] == ["--cpunodebind=1", "--membind=1"]


def test_options_file_and_shutdown_timeout():
    instance = PLANS[0][2]["instances"][0]
    variables = dict(VARIABLES, vllm_extra_args={"max-model-len": 8192}, vllm_shutdown_timeout=0)
    result = host_state.host_units([instance], variables)
    argv = result["units"][0]["argv"]
    assert argv[-2:] == ["--config", "/etc/vllm/gpufleet-%s.yaml" % instance["name"]]
    assert "--shutdown-timeout" not in argv
    assert [f["label"] for f in result["files"]] == [
        "secrets.env", "gpufleet-%s.yaml" % instance["name"], "gpufleet-%s.service" % instance["name"],
        "gpufleet-agent.socket", "gpufleet-agent@.service", "gpufleet-agent-weights.service"]


def test_readiness_and_gpu_preparation_are_part_of_the_unit():
    unit = host_state.host_units([dict(INSTANCE, port=8123)], dict(VARIABLES, vllm_engine_ready_timeout=42,
                                                                   vllm_timeout_start_sec=100))["units"][0]
    # Ready is a completion for the served model, after /health (vllm_ready_request).
    assert unit["exec_start_post"] == [["", ["/usr/local/libexec/gpufleet/gpufleet-wait-ready",
                                             "http://127.0.0.1:8123/health", "42", VARIABLES["vllm_model"]]],
                                       ["", ["/usr/local/libexec/gpufleet/gpufleet-agent-state", "ready",
                                             "/run/gpufleet-%s/agent" % INSTANCE["name"],
                                             "http://127.0.0.1:8123/metrics"]]]
    # Whoever stops it: the agent answers 0%, the gateways read it (3 s),
    # the requests end (vllm_drain_timeout), then systemd's SIGTERM.
    assert unit["exec_stop"] == [["", ["/usr/local/libexec/gpufleet/gpufleet-agent-state", "drain",
                                       "/run/gpufleet-%s/agent" % INSTANCE["name"], "http://127.0.0.1:8123/metrics",
                                       "3", str(VARIABLES["vllm_drain_timeout"])]]]
    assert unit["runtime_directory"] == "gpufleet-" + INSTANCE["name"]
    # Never past TimeoutStopSec= (each ExecStop= has it): a second before.
    short = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_drain_timeout=60, vllm_shutdown_timeout=0,
                                                   vllm_timeout_stop_sec=20))["units"][0]
    assert short["exec_stop"][0][1][-1] == "19"
    unit = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_ready_request=False,
                                                  vllm_served_model_name="llama"))["units"][0]
    assert unit["exec_start_post"][0][1][3:] == []
    # Full privileges (+) to load nvidia-uvm and make the device nodes; a
    # failure, a missing program included, is not one of the unit (-).
    assert unit["exec_start_pre"] == [["-+", ["/usr/bin/nvidia-modprobe", "-u", "-c=0"]]]
    for services in (unit["wants"], unit["after"]):
        assert "nvidia-persistenced.service" in services and "nvidia-fabricmanager.service" in services
    unit = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_nvidia_modprobe=""))["units"][0]
    assert unit["exec_start_pre"] == []


@pytest.mark.parametrize("listen,url", [
    ("127.0.0.1", "http://127.0.0.1:8000/health"), ("0.0.0.0", "http://127.0.0.1:8000/health"),
    ("::", "http://[::1]:8000/health"), ("fd00::5", "http://[fd00::5]:8000/health"),
    ("10.0.0.7", "http://10.0.0.7:8000/health"), ("::ffff:0.0.0.0", "http://127.0.0.1:8000/health"),
    ("localhost", "http://localhost:8000/health")])
def test_health_is_asked_where_the_instance_listens(listen, url):
    unit = host_state.host_units([INSTANCE], dict(VARIABLES, vllm_listen_host=listen, vllm_api_key="sk-test-0123456789"))["units"][0]
    assert unit["health_url"] == url
    assert unit["exec_start_post"][0][1][1] == url


def test_each_instance_is_drained_on_every_gateway_with_a_socket():
    backends = [{"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.0.0.1", "port": 8000},
                {"name": "gpu-a-vllm-1", "host": "gpu-a", "address": "10.0.0.1", "port": 8001, "backend": "llama"},
                {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "10.0.0.2", "port": 8000}]
    variables = dict(VARIABLES, host="gpu-a", vllm_gateway_backends=backends,
                     vllm_gateways={"gw-1": "/run/haproxy/admin.sock", "gw-2": "/run/h2.sock", "gw-3": ""})
    units = host_state.host_units([INSTANCE, dict(INSTANCE, name="vllm-1", port=8001, dist_port=29100)],
                                  variables)["units"]
    assert units[0]["drain"] == [
        {"gateway": "gw-1", "socket": "/run/haproxy/admin.sock", "backend": "vllm", "server": "gpu-a-vllm-0"},
        {"gateway": "gw-2", "socket": "/run/h2.sock", "backend": "vllm", "server": "gpu-a-vllm-0"}]
    assert [(d["backend"], d["server"]) for d in units[1]["drain"]] == [("llama", "gpu-a-vllm-1")] * 2
    # Another host's server of the same instance name is not this one's.
    assert all(d["server"].startswith("gpu-a-") for u in units for d in u["drain"])
    # No gateways, or no backends: nothing to drain.
    assert host_state.host_units([INSTANCE], dict(variables, vllm_gateways={}))["units"][0]["drain"] == []
    assert host_state.host_units([INSTANCE], dict(variables, vllm_gateway_backends=[]))["units"][0]["drain"] == []


def test_reason_cannot_add_lines_or_continue_the_comment():
    unit = host_state.host_units([dict(INSTANCE, reason="a\nExecStartPre=/bin/sh\\")], VARIABLES)["units"][0]
    assert unit["header"].endswith("a ExecStartPre=/bin/sh") and "\n" not in unit["header"]


def test_every_unit_records_its_engine_so_a_version_bump_changes_every_unit():
    """One name from one place: the install installs what each unit's GPUFLEET_ENGINE says."""
    instances = [INSTANCE, dict(INSTANCE, name="vllm-1", port=8001, dist_port=29100)]
    old = host_state.host_units(instances, dict(VARIABLES, vllm_version="0.32.0"))
    new = host_state.host_units(instances, dict(VARIABLES, vllm_version="0.34.0"))
    assert old["engine"] == "vllm==0.32.0" and new["engine"] == "vllm==0.34.0"
    for before, after in zip(old["units"], new["units"]):
        assert dict(before["environment"])["GPUFLEET_ENGINE"] == "vllm==0.32.0"
        assert dict(after["environment"])["GPUFLEET_ENGINE"] == "vllm==0.34.0"
        # Nothing else of the unit differs.
        assert [pair for pair in after["environment"] if pair[0] != "GPUFLEET_ENGINE"] == [
            pair for pair in before["environment"] if pair[0] != "GPUFLEET_ENGINE"]


def test_the_engine_variable_is_the_units_own():
    with pytest.raises(ValueError, match="^vllm_environment key: must not set"):
        host_state.host_units([INSTANCE], dict(VARIABLES, vllm_environment={"GPUFLEET_ENGINE": "vllm==0.1"}))
