# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""audit/locality.py: is each process where its GPUs are? Findings on
recorded machines combined with the /proc files of real processes
recorded under numactl (audit_scenarios)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import locality
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result

from ansible_collections.gpufleet.numa.tests.fixtures.audit_scenarios import (
    DGX2, DGX2_BUS, TRAP_HOLDS, audit_scenario as run, capture_with_processes, findings_of as by_code, pid_of)


def for_pid(result, name):
    return [f for f in result["findings"] if pid_of(name) in f["pids"]]


# ------------------------------------------------------------ the trap


def test_trap_right_bindings_have_no_findings():
    result = run(DGX2, TRAP_HOLDS)
    assert for_pid(result, "bound_cpu0_mem0") == []
    assert for_pid(result, "interleave_all") == []


def test_trap_process_bound_to_the_other_socket_is_critical():
    result = run(DGX2, TRAP_HOLDS)
    found = [f for f in for_pid(result, "bound_node0") if f["code"] == "process_locality"]
    assert len(found) == 1
    finding = found[0]
    assert finding["severity"] == "critical"
    assert finding["message"].startswith("python3 (pid %d) uses GPU 8 on node 1 but runs only on CPUs 0-1 (node 0)"
                                         % pid_of("bound_node0"))
    assert "its memory policy is bind:0" in finding["message"]
    assert "100% of its memory is on node 0" in finding["message"]
    assert finding["fix"] == "bind it to node 1 (numactl --cpunodebind=1 --membind=1)"


def test_trap_unbound_process_memory_on_the_wrong_node_and_cuda_order():
    result = run(DGX2, TRAP_HOLDS)
    codes = sorted(f["code"] for f in for_pid(result, "unbound"))
    assert codes == ["cuda_device_order", "process_locality"]
    locality = [f for f in for_pid(result, "unbound") if f["code"] == "process_locality"][0]
    assert "its memory is not bound (policy default)" in locality["message"]


def test_trap_tensor_parallel_group_across_sockets():
    result = run(DGX2, TRAP_HOLDS)
    span = by_code(result, "gpus_span_sockets")
    assert len(span) == 1
    assert span[0]["severity"] == "critical"
    assert span[0]["pids"] == [pid_of("tp_server"), pid_of("tp_server_worker")]
    assert "GPUs 6,7,10,11 across sockets 0,1 (GPUs 6,7 on node 0; GPUs 10,11 on node 1)" in span[0]["message"]
    assert "GPUs 0,1,2,3 (node 0)" in span[0]["fix"]
    group = [g for g in result["groups"] if g["key"] == pid_of("tp_server")][0]
    assert group["misplaced"] is True and group["numa_nodes"] == [0, 1]


def test_trap_counts_and_worst():
    result = run(DGX2, TRAP_HOLDS)
    assert result["worst"] == "critical"
    assert result["counts"] == {"info": 0, "warning": 2, "error": 0, "critical": 4}
    assert [f["severity"] for f in result["findings"]] == sorted(
        (f["severity"] for f in result["findings"]), key=locality.severity_rank, reverse=True)


def test_one_numa_node_host_has_no_locality_findings():
    # MI250: one NUMA node; the unbound recorded process can be nowhere wrong.
    # Its CUDA_VISIBLE_DEVICES=9 is no AMD variable to judge (ROCR_VISIBLE_DEVICES is).
    result = run("mi250_8gcd", {"unbound": ["0000:c1:00.0"]})
    assert by_code(result, "process_locality") == []
    assert result["findings"] == []


def _rocr(visible):
    def edit(facts, processes):
        processes["processes"][0]["environment"] = {"ROCR_VISIBLE_DEVICES": visible}
    return edit


def test_an_amd_process_is_judged_by_rocr_visible_devices():
    # GCD 0 (0000:c1:00.0) held; ROCR_VISIBLE_DEVICES names KFD indices.
    assert run("mi250_8gcd", {"unbound": ["0000:c1:00.0"]}, edit=_rocr("0"))["findings"] == []
    found = run("mi250_8gcd", {"unbound": ["0000:c1:00.0"]}, edit=_rocr("3"))["findings"]
    assert [f["code"] for f in found] == ["rocr_visible_mismatch"]
    assert "which its ROCR_VISIBLE_DEVICES=3 does not name (in KFD order)" in found[0]["message"]


def test_a_deployed_instances_class_decides_the_variable():
    """An instance's device (the kept plan's) picks the variable: an nvidia one
    on AMD GPUs is judged by CUDA_VISIBLE_DEVICES; a CPU instance by none."""
    facts, processes = audit_replay.gather_capture(capture_with_processes("mi250_8gcd", {"unbound": ["0000:c1:00.0"]}))
    view = locality.HostView(facts, "gpu-a")
    proc = processes["processes"][0]
    proc["environment"] = {"CUDA_VISIBLE_DEVICES": "9", "ROCR_VISIBLE_DEVICES": "3"}
    codes = dict((device, [f["code"] for f in locality.check_process(view, proc, device=device)[0]])
                 for device in ("nvidia", "amd", "cpu", None))
    assert codes == {"nvidia": ["cuda_device_order"], "amd": ["rocr_visible_mismatch"], "cpu": [],
                     None: ["rocr_visible_mismatch"]}


def test_group_across_nodes_of_one_socket_is_a_warning():
    # MI50 NPS4: nodes 0-3 are socket 0; GPU 0 is on node 3, GPUs 1,2 on node 2
    result = run("mi50_8gpu_nps4", {"tp_server": ["0000:03:00.0"], "tp_server_worker": ["0000:23:00.0"]})
    span = by_code(result, "gpus_span_nodes")
    assert len(span) == 1 and span[0]["severity"] == "warning"
    assert by_code(result, "gpus_span_sockets") == []


def test_unknown_sockets_count_nodes_as_sockets():
    # Azure NDv4-like: 4 NUMA nodes, no socket data; GPU 0 is on node 1, GPU 2 on node 0
    result = run("azure_ndv4_like", {"tp_server": ["0001:00:00.0"], "tp_server_worker": ["0003:00:00.0"]})
    span = by_code(result, "gpus_span_sockets")
    assert len(span) == 1
    assert "NUMA nodes 0,1 (sockets unknown: taken as separate sockets)" in span[0]["message"]


def test_gpu_unknown_to_the_topology_is_a_warning_not_a_guess():
    # the H100 capture is a bare nvidia-smi matrix: no bus ids to match
    result = run("h100_sxm_8gpu_nvswitch", {"bound_node0": ["0000:9a:00.0"]})
    assert [f["code"] for f in result["findings"]] == ["gpu_not_in_topology"]


def _facts_and_process(cpus_allowed, memory_kb, policy="default"):
    facts, processes = audit_replay.gather_capture(capture_with_processes(DGX2, {"unbound": [DGX2_BUS[8]]}))
    proc = processes["processes"][0]
    proc.update(cpus_allowed=cpus_allowed, mems_allowed="0-1", memory_kb=memory_kb, memory_policy=policy,
                environment={})
    return facts, processes


def test_process_allowed_on_all_cpus_of_two_sockets():
    facts, processes = _facts_and_process("0-1,24-25", {"1": 100})
    result = audit_result.audit_host(facts, processes, host="gpu-a")
    finding = by_code(result, "process_locality")[0]
    assert finding["severity"] == "error"
    assert "may run on all CPUs" in finding["message"]


@pytest.mark.parametrize("remote, threshold, severity", [
    (80, 20, "error"),
    (30, 20, "warning"),
    (10, 20, None),
    (10, 5, "warning"),
])
def test_memory_on_other_nodes_against_the_threshold(remote, threshold, severity):
    facts, processes = _facts_and_process("24-25", {"0": remote, "1": 100 - remote})
    result = audit_result.audit_host(facts, processes, host="gpu-a", memory_threshold=threshold)
    found = by_code(result, "process_locality")
    if severity is None:
        assert found == []
    else:
        assert found[0]["severity"] == severity
        assert "%d%% of its memory is on node 0" % remote in found[0]["message"]


def test_memory_threshold_must_be_a_percentage():
    facts, processes = _facts_and_process("24-25", {"1": 1})
    with pytest.raises(ValueError, match="memory_threshold: must be a percentage"):
        audit_result.audit_host(facts, processes, memory_threshold=101)


def test_cuda_visible_devices_that_do_not_name_the_held_gpu():
    facts, processes = _facts_and_process("24-25", {"1": 1})
    processes["processes"][0]["environment"] = {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    result = audit_result.audit_host(facts, processes, host="gpu-a")
    assert [f["code"] for f in result["findings"]] == ["cuda_visible_mismatch"]


def test_no_process_source_on_an_nvidia_host_is_info():
    facts, dummy = audit_replay.gather_capture(capture_with_processes(DGX2, {}))
    result = audit_result.audit_host(facts, {"source": None, "processes": [], "warnings": []}, host="gpu-a")
    assert [(f["severity"], f["code"]) for f in result["findings"]] == [("info", "processes_unknown")]


def test_severity_helpers():
    assert locality.severity_rank("critical") == 3
    with pytest.raises(ValueError, match=r"^severity: must be one of info, warning, error, critical \(got 'fatal'\)$"):
        locality.severity_rank("fatal")
    findings = [{"severity": "info"}, {"severity": "error"}]
    assert locality.at_or_above(findings, "warning") == [{"severity": "error"}]
