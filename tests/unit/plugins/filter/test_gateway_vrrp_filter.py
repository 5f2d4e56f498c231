# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters gateway_vrrp and gateway_rollout: the other gateways' variables as the role takes them, from hostvars."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter.gateway import gateway_rollout, gateway_vrrp
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import vrrp
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_files

DEFAULTS = role_files.defaults("gateway")
GATEWAY = {"listen_address": "0.0.0.0", "listen_port": 8080, "monitor_uri": "/gateway/health", "tls_certificate": ""}
SHARED = {"gateway_vrrp_address": "10.0.0.100/24", "gateway_vrrp_interface": "eth0", "gateway_vrrp_password": "pw"}
HOSTVARS = {
    "gw1": dict(SHARED, gateway_vrrp_priority=200, gateway_vrrp_unicast_address="10.0.0.11"),
    "gw2": dict(SHARED, gateway_vrrp_priority=100, gateway_vrrp_unicast_address="10.0.0.12"),
    "gw3": dict(SHARED, gateway_vrrp_priority=150, gateway_vrrp_unicast_address="10.0.0.13"),
}
GROUPS = {"gateways": ["gw1", "gw2", "gw3"]}


def own(host):
    """The role's variables of HOST: its defaults, the host's own over them."""
    return dict((name, HOSTVARS[host].get(name, DEFAULTS[name])) for name in vrrp.VARIABLES)


def test_peers_come_from_the_other_hosts_with_the_roles_defaults():
    s = gateway_vrrp(own("gw2"), GATEWAY, HOSTVARS, GROUPS, "gw2")
    assert [(p["host"], p["address"], p["priority"]) for p in s["peers"]] == [
        ("gw1", "10.0.0.11", 200), ("gw3", "10.0.0.13", 150)]
    # The router id is the role's default on every host (none sets it).
    assert s["router_id"] == DEFAULTS["gateway_vrrp_router_id"]


def test_a_peers_bad_value_is_named_without_a_traceback():
    hostvars = dict(HOSTVARS, gw3=dict(HOSTVARS["gw3"], gateway_vrrp_priority=200))
    with pytest.raises(AnsibleFilterError, match="must differ on every gateway of group gateways: gw1 and gw3 both"):
        gateway_vrrp(own("gw1"), GATEWAY, hostvars, GROUPS, "gw1")


def test_off_reads_no_peer():
    variables = dict((name, DEFAULTS[name]) for name in vrrp.VARIABLES)
    assert gateway_vrrp(variables, GATEWAY, {}, {}, "alone")["enabled"] is False


def test_rollout_backups_first_and_without_hostvars_the_inventory_order():
    assert gateway_rollout(["gw1", "gw2", "gw3"], HOSTVARS) == ["gw2", "gw3", "gw1"]
    assert gateway_rollout(["gw1", "gw2", "gw3"], {}) == ["gw1", "gw2", "gw3"]
    assert gateway_rollout(["gw1"], {"gw1": {}}) == ["gw1"]
    with pytest.raises(AnsibleFilterError, match="expects hostvars"):
        gateway_rollout(["gw1"], None)
