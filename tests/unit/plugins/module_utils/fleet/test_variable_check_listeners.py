# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""fleet/variable_check.listener_clashes: a gateway listener on an instance's address:port."""

from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import variable_check

INSTANCES = [
    {"name": "gpu-a-vllm-0", "host": "gpu-a", "address": "10.0.0.11", "listen": "10.0.0.11", "port": 8000},
    {"name": "gpu-a-vllm-1", "host": "gpu-a", "address": "10.0.0.11", "listen": "10.0.0.11", "port": 8001},
    {"name": "gpu-b-vllm-0", "host": "gpu-b", "address": "10.0.0.12", "listen": "0.0.0.0", "port": 8000},
]


def clashes(gateways):
    return variable_check.listener_clashes(INSTANCES, gateways)


def test_a_gateway_elsewhere_on_other_ports_is_fine():
    assert clashes({"lb-1": [("gateway_listen_address", "0.0.0.0", 8080)]}) == []
    # the same port on another machine's address
    assert clashes({"lb-1": [("gateway_listen_address", "10.0.0.5", 8000)]}) == []


def test_a_gateway_on_a_backends_own_address_and_port():
    assert clashes({"lb-1": [("gateway_listen_address", "10.0.0.11", 8001)]}) == [
        "lb-1: gateway_listen_address: listens on 10.0.0.11:8001, where backend gpu-a-vllm-1 serves "
        "(10.0.0.11:8001 on gpu-a): give the gateway another port or address"]


def test_on_the_instances_own_host_overlapping_addresses_clash():
    # the gateway's wildcard takes the instance's address too
    assert clashes({"gpu-a": [("gateway_listen_address", "0.0.0.0", 8000)]}) == [
        "gpu-a: gateway_listen_address: listens on 0.0.0.0:8000, where backend gpu-a-vllm-0 serves "
        "(10.0.0.11:8000 on gpu-a): give the gateway another port or address"]
    # the instance's wildcard takes the gateway's loopback
    assert [e.split(",")[0] for e in clashes({"gpu-b": [("gateway_stats_address", "127.0.0.1", 8000)]})] == [
        "gpu-b: gateway_stats_address: listens on 127.0.0.1:8000"]
    # on the host, another address and neither a wildcard: fine
    assert clashes({"gpu-a": [("gateway_listen_address", "127.0.0.1", 8000)]}) == []


def test_every_clash_is_said_sorted():
    found = clashes({"lb-2": [("gateway_listen_address", "10.0.0.12", 8000)],
                     "gpu-a": [("gateway_listen_address", "0.0.0.0", 8000), ("gateway_stats_address", "::", 8001)]})
    assert [e.split(":")[0] for e in found] == ["gpu-a", "gpu-a", "lb-2"]
    assert "gpu-a-vllm-1" in found[1] and "gpu-b-vllm-0" in found[2]


def test_every_form_of_a_wildcard_clashes_on_the_instances_own_host():
    """A gateway on any address checks.address_scope calls unspecified takes
    the instance's port as 0.0.0.0 does (the forms the old list missed)."""
    for wildcard in ("::ffff:0.0.0.0", "0.0.0.5", "::"):
        assert clashes({"gpu-a": [("gateway_listen_address", wildcard, 8000)]}) == [
            "gpu-a: gateway_listen_address: listens on %s:8000, where backend gpu-a-vllm-0 serves (10.0.0.11:8000 on "
            "gpu-a): give the gateway another port or address" % wildcard]
    # and an instance listening on such a form takes the gateway's loopback on its host
    instances = [dict(INSTANCES[2], listen="::ffff:0.0.0.0")]
    assert len(variable_check.listener_clashes(instances, {"gpu-b": [("gateway_stats_address", "127.0.0.1", 8000)]})) == 1
    # elsewhere a wildcard is no clash
    assert clashes({"lb-1": [("gateway_listen_address", "::ffff:0.0.0.0", 8000)]}) == []
