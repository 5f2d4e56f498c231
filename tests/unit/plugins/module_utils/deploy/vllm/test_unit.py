# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""vllm_unit: the plan-to-unit contract, on plans fleet_plan makes for recorded machines.

Each unit's command line is read back the way numactl reads it and compared
with the machine's own topology (which CPUs a node holds, which node a GPU
sits on), not with a second copy of the binding rule.
"""

import glob
import os
import re

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import assemble as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import unit as vllm_unit
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
CAPTURES = sorted(glob.glob(os.path.join(MACHINES, "*", "capture.yml")))

VARIABLES = {
    "vllm_model": "meta-llama/Llama-3.1-70B-Instruct",
    "vllm_numactl": "/usr/bin/numactl",
    "vllm_venv": "/opt/vllm",
    "vllm_state_dir": "/var/lib/vllm",
    "vllm_hf_home": "/var/lib/vllm/hf",
    "vllm_cache_dir": "/var/lib/vllm/cache",
    "vllm_config_dir": "/etc/vllm",
    "vllm_unit_dir": "/etc/systemd/system",
    "vllm_libexec_dir": "/usr/local/libexec/gpufleet",
}


def machine_plans():
    """(machine, facts, plan) for every recorded machine and tp/pp/reservation that plans."""
    out = []
    for capture in CAPTURES:
        machine = os.path.basename(os.path.dirname(capture))
        facts = topology.facts_from_capture(capture)
        for options in ({"tp_size": 1}, {"tp_size": 2}, {"tp_size": 4}, {"tp_size": 8, "allow_span": True},
                        {"tp_size": 2, "reserved_cpus_per_socket": 1}, {"tp_size": 2, "pp_size": 2}):
            try:
                plan = placement.plan_fleet({machine: facts}, **options)
            except ValueError:
                continue
            if plan["instances"] and all(i is not None for inst in plan["instances"] for i in inst["gpu_indices"]):
                out.append(("%s-%s" % (machine, "-".join("%s%s" % kv for kv in sorted(options.items()))),
                            facts, plan))
    return out


PLANS = machine_plans()


def node_cpus(facts, nodes):
    cpus = set()
    for node in facts["numa_nodes"]:
        if node["id"] in nodes:
            cpus.update(parse_cpulist(node["cpus"]))
    return cpus


def numactl_reading(argv):
    """What numactl makes of its options: {cpunodebind|physcpubind|membind|interleave: value}, program argv."""
    assert os.path.basename(argv[0]) == "numactl"
    options = {}
    rest = argv[1:]
    while rest[0].startswith("--"):
        name, dummy, value = rest.pop(0)[2:].partition("=")
        options[name] = value
    return options, rest


def test_recorded_machines_give_plans():
    assert len(PLANS) >= 20


def test_gpu_without_a_device_index_is_refused():
    # amd_4gpu_pcie_4numa's capture has no device indices: no CUDA_VISIBLE_DEVICES can be written.
    facts = topology.facts_from_capture(os.path.join(MACHINES, "amd_4gpu_pcie_4numa", "capture.yml"))
    plan = placement.plan_fleet({"amd": facts}, tp_size=1)
    with pytest.raises(ValueError, match=r"^vllm_instances\[0\] \(vllm-0\)\.gpu_indices\[0\]: must be an integer"):
        vllm_unit.host_units(plan["instances"], VARIABLES)


def vllm_options(words):
    """vllm serve's options as argparse reads them: {--name: [values]}."""
    options = {}
    for word in words:
        if word.startswith("--"):
            name = word
            options[name] = []
        else:
            options[name].append(word)
    return options


@pytest.mark.parametrize("case,facts,plan", PLANS, ids=[p[0] for p in PLANS])
def test_numactl_binding_covers_exactly_the_planned_cpus_and_gpu_nodes(case, facts, plan):
    units = vllm_unit.host_units(plan["instances"], VARIABLES)["units"]
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
        assert environment["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in instance["gpu_indices"])
        assert environment["VLLM_PORT"] == str(instance["dist_port"])
        assert unit["numa"] == []


@pytest.mark.parametrize("case,facts,plan", PLANS[::3], ids=[p[0] for p in PLANS[::3]])
def test_systemd_binding_writes_the_same_placement_as_directives(case, facts, plan):
    units = vllm_unit.host_units(plan["instances"], dict(VARIABLES, vllm_binding="systemd"))["units"]
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
    argv = vllm_unit.host_units([instance], VARIABLES)["units"][0]["argv"]
    assert argv[1] == "--physcpubind=3-5"
    instance["binding"] = dict(instance["binding"], by_node=True, mems=[1])
    argv = vllm_unit.host_units([instance], VARIABLES)["units"][0]["argv"]
    assert argv[1:3] == ["--cpunodebind=1", "--membind=1"]


def test_options_file_and_shutdown_timeout():
    instance = PLANS[0][2]["instances"][0]
    variables = dict(VARIABLES, vllm_extra_args={"max-model-len": 8192}, vllm_shutdown_timeout=0)
    result = vllm_unit.host_units([instance], variables)
    argv = result["units"][0]["argv"]
    assert argv[-2:] == ["--config", "/etc/vllm/gpufleet-%s.yaml" % instance["name"]]
    assert "--shutdown-timeout" not in argv
    assert [f["label"] for f in result["files"]] == [
        "secrets.env", "gpufleet-%s.yaml" % instance["name"], "gpufleet-%s.service" % instance["name"]]


def test_strict_hardening_adds_to_the_syscall_filter():
    instance = PLANS[0][2]["instances"][0]
    hardening = {"SystemCallFilter": "@system-service", "UMask": "0027", "NoNewPrivileges": True}
    unit = vllm_unit.host_units([instance], dict(VARIABLES, vllm_hardening=hardening,
                                                 vllm_hardening_strict=True))["units"][0]
    filters = [v for k, v in unit["hardening"] if k == "SystemCallFilter"]
    assert filters[0] == "@system-service" and filters[1] == "~@privileged"
    assert ["UMask", "0077"] in unit["hardening"] and ["UMask", "0027"] not in unit["hardening"]
    assert ["NoNewPrivileges", "yes"] in unit["hardening"]
    denied = " ".join(f for f in filters if f.startswith("~"))
    for call in ("set_mempolicy", "mbind", "sched_setaffinity", "get_mempolicy", "migrate_pages"):
        assert call not in denied


def test_readiness_and_gpu_preparation_are_part_of_the_unit():
    unit = vllm_unit.host_units([dict(INSTANCE, port=8123)], dict(VARIABLES, vllm_engine_ready_timeout=42,
                                                                  vllm_timeout_start_sec=100))["units"][0]
    assert unit["exec_start_post"] == [["", ["/usr/local/libexec/gpufleet/gpufleet-wait-ready",
                                             "http://127.0.0.1:8123/health", "42"]]]
    # Full privileges (+) to load nvidia-uvm and make the device nodes; a
    # failure, a missing program included, is not one of the unit (-).
    assert unit["exec_start_pre"] == [["-+", ["/usr/bin/nvidia-modprobe", "-u", "-c=0"]]]
    for services in (unit["wants"], unit["after"]):
        assert "nvidia-persistenced.service" in services and "nvidia-fabricmanager.service" in services
    unit = vllm_unit.host_units([INSTANCE], dict(VARIABLES, vllm_nvidia_modprobe=""))["units"][0]
    assert unit["exec_start_pre"] == []


@pytest.mark.parametrize("listen,url", [
    ("127.0.0.1", "http://127.0.0.1:8000/health"), ("0.0.0.0", "http://127.0.0.1:8000/health"),
    ("::", "http://[::1]:8000/health"), ("fd00::5", "http://[fd00::5]:8000/health"),
    ("10.0.0.7", "http://10.0.0.7:8000/health")])
def test_health_is_asked_where_the_instance_listens(listen, url):
    unit = vllm_unit.host_units([INSTANCE], dict(VARIABLES, vllm_listen_host=listen, vllm_api_key="sk-test-0123456789"))["units"][0]
    assert unit["health_url"] == url
    assert unit["exec_start_post"][0][1][1] == url


def test_each_instance_is_drained_on_every_gateway_with_a_socket():
    backends = [{"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.0.0.1", "port": 8000},
                {"name": "gpu-a-vllm-1", "host": "gpu-a", "address": "10.0.0.1", "port": 8001, "backend": "llama"},
                {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "10.0.0.2", "port": 8000}]
    variables = dict(VARIABLES, host="gpu-a", vllm_gateway_backends=backends,
                     vllm_gateways={"gw-1": "/run/haproxy/admin.sock", "gw-2": "/run/h2.sock", "gw-3": ""})
    units = vllm_unit.host_units([INSTANCE, dict(INSTANCE, name="vllm-1", port=8001, dist_port=29100)],
                                 variables)["units"]
    assert units[0]["drain"] == [
        {"gateway": "gw-1", "socket": "/run/haproxy/admin.sock", "backend": "vllm", "server": "gpu-a-vllm-0"},
        {"gateway": "gw-2", "socket": "/run/h2.sock", "backend": "vllm", "server": "gpu-a-vllm-0"}]
    assert [(d["backend"], d["server"]) for d in units[1]["drain"]] == [("llama", "gpu-a-vllm-1")] * 2
    # Another host's server of the same instance name is not this one's.
    assert all(d["server"].startswith("gpu-a-") for u in units for d in u["drain"])
    # No gateways, or no backends: nothing to drain.
    assert vllm_unit.host_units([INSTANCE], dict(variables, vllm_gateways={}))["units"][0]["drain"] == []
    assert vllm_unit.host_units([INSTANCE], dict(variables, vllm_gateway_backends=[]))["units"][0]["drain"] == []


# --- hostile input: every probe names the variable and the rule ------------

INSTANCE = {"name": "vllm-0", "tp_size": 2, "pp_size": 1, "gpu_indices": [0, 1], "port": 8000, "dist_port": 29000,
            "binding": {"cpus": "0-7", "mems": [0], "policy": "bind", "by_node": True}, "reason": "test"}


def with_binding(**changes):
    return dict(INSTANCE, binding=dict(INSTANCE["binding"], **changes))


BAD_VARIABLES = [
    ({"vllm_model": "--trust-remote-code"}, "vllm_model: must not start with '-'"),
    ({"vllm_model": "evil\nExecStartPre=/bin/sh"}, "vllm_model: must not contain control characters"),
    ({"vllm_model": ""}, "vllm_model: must not be empty"),
    ({"vllm_served_model_name": "-x"}, "vllm_served_model_name: must not start with '-'"),
    ({"vllm_extra_args": {"api-key\n": "x"}}, "vllm_extra_args key: must not contain control characters"),
    ({"vllm_extra_args": {"api_key": "x"}}, "vllm_extra_args key: must not set options the unit sets itself"),
    ({"vllm_extra_args": {"--port": 1}}, "vllm_extra_args key: must be a long option name"),
    ({"vllm_extra_args": {"chat-template": "a\nb"}}, "vllm_extra_args.chat-template: must not contain control"),
    ({"vllm_extra_args": ["port"]}, "vllm_extra_args: must be a mapping"),
    ({"vllm_environment": {"VLLM_PORT": "1"}}, "vllm_environment key: must not set what the role sets"),
    ({"vllm_environment": {"A B": "1"}}, "vllm_environment key: must be a variable name"),
    ({"vllm_environment": {"NCCL_DEBUG": "INFO\n"}}, "vllm_environment.NCCL_DEBUG: must not contain control"),
    ({"vllm_environment": {"FLAG": True}}, "vllm_environment.FLAG: must be a string or a number"),
    ({"vllm_user": "root\n"}, "vllm_user: must not contain control characters"),
    ({"vllm_user": "-o"}, "vllm_user: must be a user or group name"),
    ({"vllm_group": "vllm group"}, "vllm_group: must be a user or group name"),
    ({"vllm_unit_prefix": "../x"}, "vllm_unit_prefix: must be [A-Za-z0-9_.-]"),
    ({"vllm_unit_prefix": "a\n"}, "vllm_unit_prefix: must not contain control characters"),
    ({"vllm_listen_host": "127.0.0.1 --trust-remote-code"}, "vllm_listen_host: must be an IPv4 or IPv6 address"),
    ({"vllm_binding": "cgroup"}, "vllm_binding: must be one of numactl, systemd"),
    ({"vllm_state_dir": "/var/lib/vllm\n"}, "vllm_state_dir: must not contain control characters"),
    ({"vllm_state_dir": "relative"}, "vllm_state_dir: must be an absolute path"),
    ({"vllm_numactl": "/usr/bin/../bin/numactl"}, "vllm_numactl: must not contain '..'"),
    ({"vllm_executable": "/opt/my vllm"}, "vllm_executable: must be an absolute path"),
    ({"vllm_version": "1.0 --index-url=http://x"}, "vllm_version: must be a version"),
    ({"vllm_python": "-c"}, "vllm_python: must be a program name or path"),
    ({"vllm_packages": ["numactl", "-y"]}, "vllm_packages[1]: must be a package name"),
    ({"vllm_api_key": "sk-secret\nX=1"},
     "vllm_api_key: must be 16-512 printable ASCII characters, not starting or ending with a space, with no two "
     "spaces in a row (value hidden)"),
    ({"vllm_api_key": "sk-short"}, "vllm_api_key: must be 16-512 printable ASCII characters"),
    ({"vllm_hardening": {"ExecStartPre": "/bin/sh"}}, "vllm_hardening key: must be a sandboxing directive"),
    ({"vllm_hardening": {"User": "root"}}, "vllm_hardening key: must be a sandboxing directive"),
    ({"vllm_hardening": {"PrivateTmp": "yes\nUser=root"}}, "vllm_hardening.PrivateTmp: must not contain control"),
    ({"vllm_timeout_start_sec": 600}, "vllm_timeout_start_sec: must be above vllm_engine_ready_timeout (600)"),
    ({"vllm_shutdown_timeout": 100, "vllm_timeout_stop_sec": 90},
     "vllm_timeout_stop_sec: must be above vllm_shutdown_timeout (100)"),
    ({"vllm_health_delay": 0}, "vllm_health_delay: must be at least 1"),
    ({"vllm_manage_service": "sometimes"}, "vllm_manage_service: must be auto, true or false"),
    ({"vllm_limit_nofile": True}, "vllm_limit_nofile: must be an integer, not a boolean"),
    ({"vllm_nvidia_modprobe": "nvidia-modprobe"}, "vllm_nvidia_modprobe: must be an absolute path"),
    ({"vllm_drain_timeout": -1}, "vllm_drain_timeout: must be at least 0"),
    ({"vllm_gateways": ["gw-1"]}, "vllm_gateways: must be a mapping"),
    ({"vllm_gateways": {"gw 1": "/run/a.sock"}}, "vllm_gateways key: must be an inventory host name"),
    ({"vllm_gateways": {"gw-1": "run/a.sock"}}, "vllm_gateways.gw-1: must be an absolute path"),
    ({"vllm_gateway_backends": [{"host": "a"}]}, "vllm_gateway_backends[0]: lacks name"),
    ({"vllm_gateway_backends": [{"name": "a b"}]}, "vllm_gateway_backends[0].name: must be 1-64 letters"),
    ({"vllm_gateway_backends": [{"name": "a", "backend": "x\ny"}]},
     "vllm_gateway_backends[0].backend: must not contain control"),
    # Beyond loopback, a key or an explicit opt-out.
    ({"vllm_listen_host": "10.0.0.5"}, "vllm_api_key: is required when vllm_listen_host is not a loopback address"),
    ({"vllm_listen_host": "0.0.0.0", "vllm_api_key": ""}, "vllm_api_key: is required when vllm_listen_host"),
    ({"vllm_listen_host": "gpu-a.internal"}, "vllm_api_key: is required when vllm_listen_host"),
    ({"vllm_listen_host": "10.0.0.5", "vllm_allow_unauthenticated": "maybe"},
     "vllm_allow_unauthenticated: must be a boolean"),
]


BAD_VARIABLE_IDS = [m.split(":")[0] + "-%d" % i for i, (c, m) in enumerate(BAD_VARIABLES)]


@pytest.mark.parametrize("changes,message", BAD_VARIABLES, ids=BAD_VARIABLE_IDS)
def test_bad_variable_is_refused_naming_it_and_the_rule(changes, message):
    with pytest.raises(ValueError) as info:
        vllm_unit.host_units([INSTANCE], dict(VARIABLES, **changes))
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
    assert "sk-secret" not in str(info.value)


BAD_INSTANCES = [
    ([{k: v for k, v in INSTANCE.items() if k != "binding"}], "vllm_instances[0] (vllm-0): lacks binding"),
    ([dict(INSTANCE, name="vllm 0")], "vllm_instances[0].name: must be [A-Za-z0-9_.-]"),
    ([dict(INSTANCE, name="-vllm")], "vllm_instances[0].name: must be [A-Za-z0-9_.-]"),
    ([dict(INSTANCE, tp_size=4)], "vllm_instances[0] (vllm-0).gpu_indices: must list tp_size * pp_size = 4"),
    ([dict(INSTANCE, gpu_indices=[0, 0])], "vllm_instances[0] (vllm-0).gpu_indices: must list"),
    ([with_binding(cpus="0-7\n")], "vllm_instances[0] (vllm-0).binding.cpus: must not contain control"),
    ([with_binding(cpus="7-0")], "vllm_instances[0] (vllm-0).binding.cpus: bad range"),
    ([with_binding(cpus="0-7 --all")], "vllm_instances[0] (vllm-0).binding.cpus: must be a cpulist"),
    ([with_binding(mems=[])], "vllm_instances[0] (vllm-0).binding.mems: must be a non-empty sorted list"),
    ([with_binding(policy="preferred")], "vllm_instances[0] (vllm-0).binding.policy: must be one of bind"),
    ([with_binding(by_node="yes")], "vllm_instances[0] (vllm-0).binding.by_node: must be a boolean"),
    ([dict(INSTANCE, port=70000)], "vllm_instances[0] (vllm-0).port: must be at most 65535"),
    ([INSTANCE, dict(INSTANCE, name="vllm-1", dist_port=29100)], "vllm_instances: vllm-0 and vllm-1 collide on port"),
    ([INSTANCE, dict(INSTANCE, port=8001, dist_port=29100)], "vllm_instances: vllm-0 and vllm-0 collide on name"),
    ([INSTANCE, dict(INSTANCE, name="vllm-1", port=29000, dist_port=29100)], "vllm_instances: vllm-0 and vllm-1 collide on port 29000"),
    ("vllm-0", "vllm_instances: must be a list"),
]


@pytest.mark.parametrize("instances,message", BAD_INSTANCES, ids=[str(i) for i in range(len(BAD_INSTANCES))])
def test_bad_instance_is_refused_naming_the_field(instances, message):
    with pytest.raises(ValueError) as info:
        vllm_unit.host_units(instances, VARIABLES)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("changes", [
    {"vllm_listen_host": "127.0.0.1"}, {"vllm_listen_host": "127.0.0.2"}, {"vllm_listen_host": "::1"},
    {"vllm_listen_host": "localhost"},
    {"vllm_listen_host": "10.0.0.5", "vllm_api_key": "sk-secret-0123456789"},
    {"vllm_listen_host": "0.0.0.0", "vllm_allow_unauthenticated": True},
])
def test_loopback_key_or_opt_out_lets_an_instance_listen(changes):
    units = vllm_unit.host_units([INSTANCE], dict(VARIABLES, **changes))
    argv = units["units"][0]["argv"]
    assert argv[argv.index("--host") + 1] == changes["vllm_listen_host"]
    # The key reaches secrets.env only, never the command line.
    assert "sk-secret" not in repr(units["units"])


def test_reason_cannot_add_lines_or_continue_the_comment():
    unit = vllm_unit.host_units([dict(INSTANCE, reason="a\nExecStartPre=/bin/sh\\")], VARIABLES)["units"][0]
    assert unit["header"].endswith("a ExecStartPre=/bin/sh") and "\n" not in unit["header"]


def test_missing_programs_are_named_unless_the_role_installs_them():
    # What find (file_type any) reports: numactl is there but not executable.
    found = [{"path": "/opt/vllm/bin/vllm", "isreg": True, "xusr": True},
             {"path": "/usr/bin/numactl", "isreg": True, "xusr": False, "xgrp": False, "xoth": False}]
    variables = dict(VARIABLES, vllm_install=False, vllm_download_weights=False, existing=found, host="gpu-a")
    with pytest.raises(ValueError, match=r"^vllm_numactl: /usr/bin/numactl does not exist or is not executable "
                                         r"on gpu-a: install numactl"):
        vllm_unit.host_units([INSTANCE], variables)
    vllm_unit.host_units([INSTANCE], dict(variables, vllm_binding="systemd"))
    vllm_unit.host_units([INSTANCE], dict(variables, vllm_install=True))


def test_what_already_matches_is_marked_so_the_role_skips_it():
    found = [
        {"path": "/etc/vllm", "isdir": True, "mode": "0755"},
        {"path": "/etc/systemd/system", "isdir": True, "mode": "0700"},
        {"path": "/var/lib/vllm", "isdir": True, "mode": "0750", "pw_name": "vllm", "gr_name": "vllm"},
        {"path": "/var/lib/vllm/hf", "isdir": True, "mode": "0750", "pw_name": "root", "gr_name": "vllm"},
        {"path": "/etc/vllm/secrets.env", "isreg": True, "mode": "0600", "pw_name": "vllm", "gr_name": "vllm",
         "checksum": "abc"},
        {"path": "/etc/systemd/system/gpufleet-vllm-0.service", "isreg": True, "mode": "0640", "checksum": "def"},
        {"path": "/usr/local/libexec/gpufleet/gpufleet-verify-unit", "isreg": True, "mode": "0755",
         "checksum": "123"},
    ]
    result = vllm_unit.host_units([INSTANCE], dict(VARIABLES, existing=found, vllm_install=True))
    directories = {d["path"]: d["as_planned"] for d in result["directories"]}
    assert directories == {"/etc/vllm": True, "/etc/systemd/system": False, "/usr/local/libexec/gpufleet": False,
                           "/var/lib": False, "/var/lib/vllm": True, "/var/lib/vllm/hf": False,
                           "/var/lib/vllm/cache": False}
    files = {f["label"]: (f["as_planned"], f["checksum"]) for f in result["files"]}
    assert files == {"secrets.env": (True, "abc"), "gpufleet-vllm-0.service": (False, "def")}
    assert result["checker"] == {"path": "/usr/local/libexec/gpufleet/gpufleet-verify-unit", "as_planned": True,
                                 "checksum": "123"}


# --- model weights before start ---------------------------------------------

SNAPSHOTS = "/var/lib/vllm/hf/hub/models--meta-llama--Llama-3.1-70B-Instruct/snapshots"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def environment_of(variables):
    return dict(vllm_unit.host_units([INSTANCE], variables)["units"][0]["environment"])


@pytest.mark.parametrize("model, source", [
    ("meta-llama/Llama-3.1-70B-Instruct", "hub"), ("gpt2", "hub"), ("Qwen/Qwen2.5-0.5B", "hub"),
    ("/srv/models/llama", "path"), ("/", "path"),
    ("org/sub/name", "other"), ("./models/llama", "other"), ("org--x/name", "other"), ("-org/name", "other"),
    ("org/name.", "other"), ("org/na..me", "other"), ("org name/x", "other"), ("", "other"),
])
def test_model_source_tells_hub_ids_from_paths(model, source):
    assert vllm_unit.model_source(model) == source


def test_hub_models_are_downloaded_and_served_offline():
    result = vllm_unit.host_units([INSTANCE], dict(VARIABLES, existing=[], vllm_install=True, host="gpu-a"))
    download = result["download"]
    assert download["needed"] is True
    assert download["folder"] == SNAPSHOTS[:-len("/snapshots")]
    assert download["snapshots"] == SNAPSHOTS
    assert download["python"] == "/opt/vllm/bin/python"
    assert (download["timeout"], download["poll"], download["ignore_patterns"]) == (14400, 10, ["original/*"])
    assert environment_of(VARIABLES)["HF_HUB_OFFLINE"] == "1"
    # Without the step, vLLM downloads on start as before: no offline flag.
    off = dict(VARIABLES, vllm_download_weights=False)
    assert "HF_HUB_OFFLINE" not in environment_of(off)
    assert vllm_unit.host_units([INSTANCE], off)["download"]["needed"] is False
    # ...and the operator may set it for a cache seeded by hand.
    assert environment_of(dict(off, vllm_environment={"HF_HUB_OFFLINE": "1"}))["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(ValueError, match=r"^vllm_environment key: must not set HF_HUB_OFFLINE while "
                                         r"vllm_download_weights is true"):
        vllm_unit.host_units([INSTANCE], dict(VARIABLES, vllm_environment={"HF_HUB_OFFLINE": "0"}))


def test_local_paths_are_neither_downloaded_nor_offline():
    # A path is no served model name (placement/contract.served_name): it is served as vllm_served_model_name.
    variables = dict(VARIABLES, vllm_model="/srv/models/llama", vllm_served_model_name="llama", existing=[],
                     vllm_install=False, host="gpu-a")
    result = vllm_unit.host_units([INSTANCE], dict(variables, existing=[
        {"path": "/opt/vllm/bin/vllm", "isreg": True, "xusr": True},
        {"path": "/usr/bin/numactl", "isreg": True, "xusr": True}]))
    assert result["download"]["needed"] is False
    assert result["download"]["reason"] == "the model is a local path"
    assert "HF_HUB_OFFLINE" not in dict(result["units"][0]["environment"])


def test_a_model_that_is_neither_hub_id_nor_path_is_refused_while_downloading():
    with pytest.raises(ValueError, match=r"^vllm_model: must be a Hugging Face repository id \(ORG/NAME\) or an "
                                         r"absolute path while vllm_download_weights is true.*'models/a/b'"):
        vllm_unit.host_units([INSTANCE], dict(VARIABLES, vllm_model="models/a/b"))
    vllm_unit.host_units([INSTANCE], dict(VARIABLES, vllm_model="models/a/b", vllm_download_weights=False))


@pytest.mark.parametrize("entry", [{"isdir": True}, {"islnk": True}])
def test_a_snapshot_in_the_cache_skips_the_download(entry):
    found = [dict(entry, path=SNAPSHOTS + "/" + COMMIT)]
    result = vllm_unit.host_units([INSTANCE], dict(VARIABLES, existing=found, vllm_install=True))
    assert result["download"]["needed"] is False
    assert result["download"]["reason"] == "already in the cache (%s/%s)" % (SNAPSHOTS, COMMIT)
    # Still served offline: the weights are local.
    assert dict(result["units"][0]["environment"])["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize("found", [
    [],  # nothing cached
    [{"path": SNAPSHOTS, "isdir": True}],  # the snapshots folder alone
    [{"path": SNAPSHOTS + "/" + COMMIT, "isreg": True}],  # not a folder
    [{"path": SNAPSHOTS + "/" + COMMIT + "/config.json", "isreg": True}],  # deeper
    [{"path": SNAPSHOTS.replace("70B", "8B") + "/" + COMMIT, "isdir": True}],  # another model
])
def test_anything_but_a_snapshot_folder_downloads(found):
    result = vllm_unit.host_units([INSTANCE], dict(VARIABLES, existing=found, vllm_install=True))
    assert result["download"]["needed"] is True


def test_no_python_for_the_download_is_named_with_the_host():
    programs = [{"path": "/srv/vllm", "isreg": True, "xusr": True},
                {"path": "/usr/bin/numactl", "isreg": True, "xusr": True}]
    variables = dict(VARIABLES, vllm_executable="/srv/vllm", existing=programs, host="gpu-a")
    with pytest.raises(ValueError, match=r"^vllm_download_python: /opt/vllm/bin/python does not exist or is not "
                                         r"executable on gpu-a, and meta-llama/Llama-3.1-70B-Instruct is not in "):
        vllm_unit.host_units([INSTANCE], variables)
    python = {"path": "/usr/bin/python3", "isreg": True, "xusr": True}
    result = vllm_unit.host_units([INSTANCE], dict(variables, existing=programs + [python],
                                                   vllm_download_python="/usr/bin/python3"))
    assert result["download"]["needed"] is True
    # Cached: no Python needed.
    cached = {"path": SNAPSHOTS + "/" + COMMIT, "isdir": True}
    result = vllm_unit.host_units([INSTANCE], dict(variables, existing=programs + [cached]))
    assert result["download"]["needed"] is False


@pytest.mark.parametrize("name, value, message", [
    ("vllm_download_weights", "maybe", "vllm_download_weights: must be"),
    ("vllm_download_python", "python3", "vllm_download_python: must be an absolute path"),
    ("vllm_download_timeout", 0, "vllm_download_timeout: must be"),
    ("vllm_download_poll", 0, "vllm_download_poll: must be"),
    ("vllm_download_ignore_patterns", "original/*", "vllm_download_ignore_patterns: must be a list"),
    ("vllm_download_ignore_patterns", ["a\nb"], "vllm_download_ignore_patterns[0]: must not contain control"),
])
def test_download_variables_are_checked(name, value, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        vllm_unit.host_units([INSTANCE], dict(VARIABLES, **{name: value}))
