# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The end of a deploy run: per host what happened, what the gateway routes, and a partial run said out loud."""

from __future__ import annotations

import copy

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import record as plan_record
from ansible_collections.gpufleet.numa.plugins.module_utils.plan import report as plan_report

SHA1, SHA2 = "1" * 40, "2" * 40


def instance(host, ordinal, gpus, engine="vllm==0.11.0", sha=SHA1, model="llama"):
    return {"host": host, "name": "vllm-%d" % ordinal, "ordinal": ordinal, "gpu_indices": gpus, "gpus": gpus,
            "port": 8000 + ordinal, "binding": {"cpus": "0"}, "served_model_name": model,
            "deployed": {"engine": engine, "unit_sha1": sha}}


def plan(*instances):
    out = plan_record.empty_record()
    out["instances"] = list(instances)
    out["hosts"] = dict((i["host"], {"gpus": 8}) for i in instances)
    return out


def context(**more):
    out = {"fleet": ["a", "b"], "in_run": ["a", "b"], "failed": [], "converged": [], "removed": [],
           "gateways": ["gw"], "gateway_configured": True, "finish": "FINISH"}
    out.update(more)
    return out


BEFORE = plan(instance("a", 0, [0, 1]), instance("a", 1, [2, 3]), instance("b", 0, [0, 1]))


def test_a_deployed_host_says_what_changed():
    after = copy.deepcopy(BEFORE)
    after["instances"][0] = instance("a", 0, [0, 1], engine="vllm==0.12.0", sha=SHA2)
    after["instances"][1] = instance("a", 1, [4, 5])
    after["instances"].insert(2, instance("a", 2, [6, 7]))
    lines = plan_report.run_report(BEFORE, after, context(converged=["a"]))
    assert lines[0] == ("deployed: a: vllm-0 upgraded (vllm==0.12.0, was vllm==0.11.0); vllm-1 re-formed "
                        "(GPUs 4,5, :8001, was GPUs 2,3, :8001); vllm-2 new (GPUs 6,7, :8002)")
    assert lines[1] == "kept: b: not deployed in this run (--tags, or nothing to plan); it keeps its recorded " \
                       "instances vllm-0 :8000"
    assert lines[2] == "gateway routes llama: a-vllm-0 :8000, a-vllm-1 :8001, a-vllm-2 :8002, b-vllm-0 :8000"


def test_cpu_instances_are_said_by_their_nodes_not_by_gpus():
    def cpu(ordinal, nodes):
        return dict(instance("c", ordinal, []), device="cpu", numa_nodes=nodes)
    before = plan(cpu(0, [0]), cpu(1, [1]))
    after = plan(cpu(0, [0, 1]), cpu(2, [2]))
    lines = plan_report.run_report(before, after, context(fleet=["c"], in_run=["c"], converged=["c"]))
    assert lines[0] == ("deployed: c: vllm-0 re-formed (CPU on NUMA nodes 0,1, :8000, was CPU on NUMA node 0, :8000); "
                        "vllm-1 removed (CPU on NUMA node 1, :8001); vllm-2 new (CPU on NUMA node 2, :8002)")


def test_unchanged_restarted_and_removed_instances():
    after = copy.deepcopy(BEFORE)
    after["instances"][0]["deployed"]["unit_sha1"] = SHA2
    del after["instances"][1]
    lines = plan_report.run_report(BEFORE, after, context(converged=["a", "b"]))
    assert lines[0] == "deployed: a: vllm-0 restarted (its unit changed); vllm-1 removed (GPUs 2,3, :8001)"
    assert lines[1] == "deployed: b: 1 instance unchanged"


def test_failed_kept_removed_and_to_remove_hosts():
    before = plan(instance("a", 0, [0]), instance("b", 0, [0]), instance("c", 0, [0]), instance("d", 0, [0]))
    after = plan_record.forget_hosts(before, ["c"])
    lines = plan_report.run_report(before, after, context(fleet=["a", "b"], in_run=["a"], failed=["a", "d"],
                                                          removed=["c"]))
    assert lines[:4] == [
        "failed: a: not deployed (its errors are above); it keeps its recorded instances vllm-0 :8000",
        "kept: b: not in this run (--limit); it keeps its recorded instances vllm-0 :8000",
        "removed: c: no longer in gpu_servers; its instances were drained, stopped and their files removed",
        "to remove: d: no longer in gpu_servers and not taken down in this run (failed or unreachable); the gateway "
        "no longer routes it, but its units may still run"]
    # the gateway routes only hosts of the fleet
    assert lines[4] == "gateway routes llama: a-vllm-0 :8000, b-vllm-0 :8000"


def test_a_host_the_record_holds_nothing_of_is_never_said_to_keep_instances():
    lines = plan_report.run_report(None, BEFORE, context(fleet=["a", "b", "e", "f"], in_run=["a", "e", "f"],
                                                         converged=["a", "b"], failed=["e"],
                                                         unplannable={"f": "host f: tp_size 16 exceeds the 8 GPUs"}))
    assert lines[2:4] == [
        "failed: e: not deployed (its errors are above); it has no recorded instances: nothing was deployed on it",
        "unplannable: f: tp_size 16 exceeds the 8 GPUs; it has no recorded instances: nothing was deployed on it"]


def test_a_check_run_says_what_it_would_do_never_that_it_did():
    before = plan(instance("a", 0, [0, 1]), instance("b", 0, [0, 1], model="qwen"), instance("c", 0, [0]))
    after = plan(instance("a", 0, [0, 1]), instance("a", 1, [2, 3]))
    lines = plan_report.run_report(before, after, context(converged=["a"], removed=["c"], fleet=["a", "b"],
                                                          failed=["b"], check_mode=True))
    assert lines == [
        "check mode: nothing was deployed, recorded or removed; this is what the run would do",
        "would deploy: a: vllm-1 new (GPUs 2,3, :8001); 1 instance unchanged",
        "failed: b: not deployed (its errors are above); it has no recorded instances: nothing was deployed on it",
        "would remove: c: no longer in gpu_servers; its instances would be drained, stopped and their files removed",
        "gateway would route llama: a-vllm-0 :8000, a-vllm-1 :8001",
        "qwen: would no longer be routed (no recorded instance serves it; the gateway answers 404 for it)"]
    assert not any(line.startswith(("deployed", "removed", "gateway routes")) for line in lines)
    real = plan_report.run_report(before, after, context(converged=["a"], removed=["c"], fleet=["a", "b"], failed=["b"]))
    assert real[0].startswith("deployed: a: ") and real[2].startswith("removed: c: ")


def test_a_partial_run_names_what_the_gateway_lacks_and_still_sends_to():
    after = copy.deepcopy(BEFORE)
    after["instances"][1] = instance("a", 1, [2, 3], model="qwen")
    after["instances"].append(instance("a", 2, [4, 5]))
    lines = plan_report.run_report(BEFORE, after, context(converged=["a"], gateway_configured=False))
    assert lines[-2] == "gateway (not in this run) still routes llama: a-vllm-0 :8000, a-vllm-1 :8001, b-vllm-0 :8000"
    assert lines[-1] == ("partial run: the gateways (gw) were not in this run, so HAProxy does not route a-vllm-1, "
                         "a-vllm-2 yet, and it still sends requests to a-vllm-1: finish with FINISH")
    # a run that changed nothing the gateway routes says nothing more
    quiet = plan_report.run_report(BEFORE, copy.deepcopy(BEFORE), context(converged=["a"], gateway_configured=False))
    assert not any(line.startswith("partial run") for line in quiet)


def test_only_gone_routes():
    after = copy.deepcopy(BEFORE)
    del after["instances"][1]
    lines = plan_report.run_report(BEFORE, after, context(converged=["a"], gateway_configured=False))
    assert lines[-1] == ("partial run: the gateways (gw) were not in this run, and HAProxy still sends requests to "
                         "a-vllm-1: finish with FINISH")


def test_a_model_the_gateway_no_longer_routes_is_said_once():
    before = plan(instance("a", 0, [0, 1]), instance("b", 0, [0, 1], model="qwen"))
    after = plan(instance("a", 0, [0, 1]))
    lines = plan_report.run_report(before, after, context(converged=["a"], removed=["b"], fleet=["a"]))
    assert lines[-2:] == ["gateway routes llama: a-vllm-0 :8000",
                          "qwen: no longer routed (no recorded instance serves it; the gateway answers 404 for it)"]
    # a model still routed somewhere, or one that only moved, says nothing
    moved = plan(instance("a", 0, [0, 1]), instance("a", 1, [2, 3], model="qwen"))
    assert not any("no longer routed" in line
                   for line in plan_report.run_report(before, moved, context(converged=["a", "b"])))


def test_no_gateway_and_nothing_routed():
    assert plan_report.run_report(None, None, context(fleet=[], in_run=[], gateways=[])) == [
        "gateway: none in the inventory"]
    assert plan_report.run_report(None, None, context(fleet=[], in_run=[])) == ["gateway routes no instance"]


def test_a_model_change_is_said():
    after = copy.deepcopy(BEFORE)
    after["instances"][2]["served_model_name"] = "qwen"
    assert plan_report.host_changes(BEFORE, after, "b") == ["vllm-0 serves qwen now"]
    assert plan_report.host_changes(plan(), plan(), "b") == ["no instances"]


def test_decommission_says_what_it_takes_down_and_what_comes_back():
    assert plan_report.decommission_lines(["a", "b", "c"], ["a", "b", "gw"], ["b"]) == [
        "taking down: a, b",
        "not in the inventory (they stay recorded until they can be reached): c",
        "still in gpu_servers: b: the next deploy_inference run deploys it again as new (new instance names and "
        "ports); take it out of gpu_servers to keep it down"]
    assert plan_report.decommission_lines(["a"], ["gw"], []) == [
        "taking down: none", "not in the inventory (they stay recorded until they can be reached): a"]
