# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""benchmarks/bench_fleet_scale.py without running Ansible: the inventory
it builds (the demo's captures in turn, a name and a loopback address per
host, one gateway), the recap's task results per host, and the growth fit."""

import argparse
import importlib.util
import pathlib

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

REPO = pathlib.Path(fixture_paths.REPO)
SPEC = importlib.util.spec_from_file_location("bench_fleet_scale", REPO / "benchmarks" / "bench_fleet_scale.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_the_inventory_cycles_through_the_demo_captures_one_name_and_address_per_host():
    demo = yaml.safe_load((REPO / "inventories" / "demo" / "hosts.yml").read_text())
    captures = [h["numa_capture"] for h in demo["all"]["children"]["gpu_servers"]["hosts"].values()]
    text = bench.inventory(300)
    hosts = text["all"]["children"]["gpu_servers"]["hosts"]
    assert len(hosts) == 300
    assert [h["numa_capture"] for h in hosts.values()][:2 * len(captures)] == captures * 2
    addresses = [h["ansible_host"] for h in hosts.values()]
    assert len(set(addresses)) == 300 and "127.0.0.1" not in addresses
    assert all(address.startswith("127.") and 0 < int(address.split(".")[-1]) < 255 for address in addresses)
    assert text["all"]["children"]["gateways"]["hosts"] == {"bench-gateway": {"ansible_host": "127.0.0.1"}}
    assert text["all"]["vars"] == demo["all"]["vars"]


def test_task_results_per_host_count_ok_skipped_and_failures_once():
    recap = {"gpu-0001": {"ok": 20, "changed": 3, "skipped": 9, "failures": 0, "unreachable": 0, "rescued": 0,
                          "ignored": 0},
             "gpu-0002": {"ok": 8, "changed": 1, "skipped": 6, "failures": 1, "unreachable": 0, "rescued": 0,
                          "ignored": 0}}
    assert bench.results_per_host(recap, ["gpu-0001", "gpu-0002", "gpu-0003"]) == {
        "gpu-0001": 29, "gpu-0002": 15, "gpu-0003": 0}
    assert bench.results_cell([15, 41]) == "15+26"
    assert bench.results_cell([15, 16, 16, 41]) == "16+25"
    assert bench.results_cell([10, 10]) == "10"


def test_the_fit_recovers_the_fixed_cost_the_per_host_part_and_the_growth():
    points = [(n, 3.0 + 0.8 * n + 0.002 * n * n) for n in (10, 30, 100)]
    a, b, c = bench.fit(points)
    assert (a, b, c) == pytest.approx((3.0, 0.8, 0.002))
    assert bench.fit(points[:2]) is None
    assert bench.marginals(points[:2]) == [(10, 30, pytest.approx(0.8 + 0.002 * 40))]


def test_host_counts_and_environment_arguments():
    assert bench.parse_hosts("30,10, 100") == [10, 30, 100]
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_hosts("0,10")
    assert bench.parse_env("ANSIBLE_DISPLAY_OK_HOSTS=false") == ("ANSIBLE_DISPLAY_OK_HOSTS", "false")
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_env("ANSIBLE_DISPLAY_OK_HOSTS")


def test_the_counting_callback_compiles():
    compile(bench.CALLBACK, "bench_counts.py", "exec")
