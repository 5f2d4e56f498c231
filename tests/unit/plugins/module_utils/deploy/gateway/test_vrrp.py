# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/gateway/vrrp.py: keepalived's settings of two or more gateways sharing one address."""

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import vrrp

GATEWAY = {"listen_address": "0.0.0.0", "listen_port": 8080, "monitor_uri": "/gateway/health", "tls_certificate": ""}
OFF = {
    "gateway_vrrp_address": "", "gateway_vrrp_interface": "", "gateway_vrrp_router_id": 51,
    "gateway_vrrp_priority": 0, "gateway_vrrp_password": "", "gateway_vrrp_unicast_address": "",
    "gateway_vrrp_group": "gateways", "gateway_vrrp_preempt": False, "gateway_vrrp_preempt_delay": 30,
    "gateway_vrrp_config_path": "/etc/keepalived/keepalived.conf", "gateway_vrrp_package": "keepalived",
    "gateway_vrrp_keepalived": "/usr/sbin/keepalived", "gateway_vrrp_service_name": "keepalived",
}
SHARED = dict(OFF, gateway_vrrp_address="10.0.0.100/24", gateway_vrrp_interface="eth0", gateway_vrrp_router_id=51,
              gateway_vrrp_password="s3cret")
GW1 = dict(SHARED, gateway_vrrp_priority=150, gateway_vrrp_unicast_address="10.0.0.11")
GW2 = dict(SHARED, gateway_vrrp_priority=100, gateway_vrrp_unicast_address="10.0.0.12")
GW3 = dict(SHARED, gateway_vrrp_priority=50, gateway_vrrp_unicast_address="10.0.0.13")


def check(own=None, members=None, gateway=None, host="gw1"):
    own = GW1 if own is None else own
    members = {"gw1": own, "gw2": GW2} if members is None else members
    return vrrp.check_vrrp(own, GATEWAY if gateway is None else gateway, host, members)


def test_off_decides_nothing_but_the_paths():
    s = check(OFF, {"gw1": OFF})
    assert s == {"enabled": False, "group": "gateways", "config_path": "/etc/keepalived/keepalived.conf",
                 "package": "keepalived", "keepalived": "/usr/sbin/keepalived", "service_name": "keepalived",
                 "check_script": "/etc/keepalived/gpufleet-haproxy-check"}
    # Off, a gateway alone in no group is fine: nothing reads the peers.
    assert check(OFF, {}, host="alone")["enabled"] is False


def test_two_gateways():
    s = check()
    assert s["enabled"] is True
    assert s["address"] == "10.0.0.100/24" and s["interface"] == "eth0" and s["router_id"] == 51
    assert s["priority"] == 150 and s["unicast_src_ip"] == "10.0.0.11" and s["password"] == "s3cret"
    assert s["peers"] == [{"host": "gw2", "address": "10.0.0.12", "priority": 100}]
    assert s["check_url"] == "http://127.0.0.1:8080/gateway/health"
    assert s["instance"] == "gpufleet_gateway_51" and s["packages"] == ["keepalived", "curl"]
    assert (s["preempt"], s["preempt_delay"]) == (False, 30)
    assert (s["advert_int"], s["check_interval"], s["check_timeout"], s["check_fall"], s["check_rise"]) == (1, 1, 1, 2, 2)
    assert (s["garp_master_delay"], s["garp_master_repeat"], s["garp_master_refresh"]) == (1, 3, 60)
    assert s["check_statuses"] == "200|503"


def test_three_gateways_each_sees_the_two_others():
    members = {"gw1": GW1, "gw2": GW2, "gw3": GW3}
    s = check(GW2, members, host="gw2")
    assert [p["host"] for p in s["peers"]] == ["gw1", "gw3"]
    assert [p["address"] for p in s["peers"]] == ["10.0.0.11", "10.0.0.13"]


def test_check_url_follows_tls_and_ipv6_wildcard():
    assert check(gateway=dict(GATEWAY, tls_certificate="/etc/gw.pem"))["check_url"].startswith("https://127.0.0.1:8080/")
    assert check(gateway=dict(GATEWAY, listen_address="::"))["check_url"] == "http://[::1]:8080/gateway/health"


def test_canonical_forms():
    own = dict(GW1, gateway_vrrp_router_id="7", gateway_vrrp_priority="254", gateway_vrrp_preempt="yes")
    s = check(own, {"gw1": own, "gw2": dict(GW2, gateway_vrrp_router_id=7, gateway_vrrp_preempt=True)})
    assert (s["router_id"], s["priority"], s["preempt"]) == (7, 254, True)


@pytest.mark.parametrize("changes, message", [
    ({"gateway_vrrp_address": "10.0.0.100"}, "gateway_vrrp_address: must be an IPv4 address with its prefix length"),
    ({"gateway_vrrp_address": "10.0.0.0/24"}, "gateway_vrrp_address: must be a host address of its network"),
    ({"gateway_vrrp_address": "10.0.0.255/24"}, "gateway_vrrp_address: must be a host address of its network"),
    ({"gateway_vrrp_address": "fd00::1/64"}, "gateway_vrrp_address: must be an IPv4 address"),
    ({"gateway_vrrp_address": "10.0.0.100/33"}, "gateway_vrrp_address: must be an IPv4 address"),
    ({"gateway_vrrp_address": "10.0.0.100/24\n}"}, "gateway_vrrp_address: must not contain control characters"),
    ({"gateway_vrrp_interface": ""}, "gateway_vrrp_interface: must not be empty"),
    ({"gateway_vrrp_interface": "eth0 }"}, "gateway_vrrp_interface: must be a network interface name"),
    ({"gateway_vrrp_interface": "a" * 16}, "gateway_vrrp_interface: must be a network interface name"),
    ({"gateway_vrrp_router_id": 0}, "gateway_vrrp_router_id: must be at least 1 (got 0)"),
    ({"gateway_vrrp_router_id": 256}, "gateway_vrrp_router_id: must be at most 255 (got 256)"),
    ({"gateway_vrrp_priority": 0}, "gateway_vrrp_priority: must be at least 1 (got 0)"),
    ({"gateway_vrrp_priority": 255}, "gateway_vrrp_priority: must be at most 254 (got 255)"),
    ({"gateway_vrrp_priority": True}, "gateway_vrrp_priority: must be an integer, not a boolean"),
    ({"gateway_vrrp_password": ""}, "gateway_vrrp_password: is required when gateway_vrrp_address is set"),
    ({"gateway_vrrp_password": "123456789"}, "gateway_vrrp_password: must be at most 8 characters"),
    ({"gateway_vrrp_password": "a b"}, "gateway_vrrp_password: must be letters, digits"),
    ({"gateway_vrrp_password": "ab#c"}, "gateway_vrrp_password: must be letters, digits"),
    ({"gateway_vrrp_unicast_address": ""}, "gateway_vrrp_unicast_address: is required when gateway_vrrp_address"),
    ({"gateway_vrrp_unicast_address": "gw1.example"}, "gateway_vrrp_unicast_address: must be an IPv4 address"),
    ({"gateway_vrrp_unicast_address": "10.0.0.100"}, "must be this gateway's own address, not the floating"),
    ({"gateway_vrrp_preempt_delay": 1001}, "gateway_vrrp_preempt_delay: must be at most 1000"),
    ({"gateway_vrrp_group": "gate ways"}, "gateway_vrrp_group: must be an inventory group name"),
    ({"gateway_vrrp_config_path": "keepalived.conf"}, "gateway_vrrp_config_path: must be an absolute path"),
    ({"gateway_vrrp_keepalived": "keepalived"}, "gateway_vrrp_keepalived: must be an absolute path"),
    ({"gateway_vrrp_package": "keep alived"}, "gateway_vrrp_package: must be a package name"),
    ({"gateway_vrrp_service_name": "a b"}, "gateway_vrrp_service_name: must be a systemd unit name"),
])
def test_refused(changes, message):
    own = dict(GW1, **changes)
    with pytest.raises(ValueError) as error:
        check(own, {"gw1": own, "gw2": GW2})
    assert message in str(error.value)
    assert "s3cret" not in str(error.value)


def test_password_never_shown():
    for password in ("123456789", "a b", "x'y"):
        own = dict(GW1, gateway_vrrp_password=password)
        with pytest.raises(ValueError, match="value hidden") as error:
            check(own)
        assert password not in str(error.value)


@pytest.mark.parametrize("members, message", [
    ({"gw2": GW2}, "gateway_vrrp_group: this gateway (gw1) is not in group gateways"),
    ({"gw1": GW1}, "gateway_vrrp_group: group gateways holds no other gateway: VRRP needs at least two"),
    ({"gw1": GW1, "gw2": dict(GW2, gateway_vrrp_priority=150)},
     "gateway_vrrp_priority: must differ on every gateway of group gateways: gw1 and gw2 both have 150"),
    ({"gw1": GW1, "gw2": GW2, "gw3": dict(GW3, gateway_vrrp_priority=100)},
     "gateway_vrrp_priority: must differ on every gateway of group gateways: gw2 and gw3 both have 100"),
    ({"gw1": GW1, "gw2": dict(GW2, gateway_vrrp_unicast_address="10.0.0.11")},
     "gateway_vrrp_unicast_address: must differ on every gateway of group gateways: gw1 and gw2 both have 10.0.0.11"),
    ({"gw1": GW1, "gw2": OFF}, "gw2 (in group gateways): gateway_vrrp_address is not set on that gateway"),
    ({"gw1": GW1, "gw2": dict(GW2, gateway_vrrp_router_id=52)},
     "gw2 (in group gateways): gateway_vrrp_router_id: must be the same on every gateway of group gateways (51 here, 52"),
    ({"gw1": GW1, "gw2": dict(GW2, gateway_vrrp_address="10.0.0.101/24")},
     "gw2 (in group gateways): gateway_vrrp_address: must be the same"),
    ({"gw1": GW1, "gw2": dict(GW2, gateway_vrrp_preempt=True)}, "gateway_vrrp_preempt: must be the same"),
    ({"gw1": GW1, "gw2": dict(GW2, gateway_vrrp_preempt_delay=5)}, "gateway_vrrp_preempt_delay: must be the same"),
    ({"gw1": GW1, "gw2": dict(GW2, gateway_vrrp_priority=0)},
     "gw2 (in group gateways): gateway_vrrp_priority: must be at least 1 (got 0)"),
])
def test_group_refused(members, message):
    with pytest.raises(ValueError) as error:
        check(members.get("gw1", GW1), members)
    assert message in str(error.value)


def test_another_password_is_named_never_shown():
    with pytest.raises(ValueError) as error:
        check(GW1, {"gw1": GW1, "gw2": dict(GW2, gateway_vrrp_password="other")})
    assert "gateway_vrrp_password: must be the same on every gateway of group gateways (value hidden)" in str(error.value)
    assert "other" not in str(error.value) and "s3cret" not in str(error.value)


@pytest.mark.parametrize("gateway, message", [
    (dict(GATEWAY, listen_address="10.0.0.11"), "gateway_listen_address: must be 0.0.0.0 or :: when gateway_vrrp_address"),
    (dict(GATEWAY, listen_address="127.0.0.1"), "gateway_listen_address: must be 0.0.0.0 or ::"),
    (dict(GATEWAY, monitor_uri=""), "gateway_monitor_uri: must be set when gateway_vrrp_address is set"),
])
def test_haproxy_settings_it_needs(gateway, message):
    with pytest.raises(ValueError, match=message):
        check(gateway=gateway)
    # Off, the same HAProxy settings are fine.
    assert check(OFF, {"gw1": OFF}, gateway=gateway)["enabled"] is False


def test_exact_variables():
    with pytest.raises(ValueError, match="missing variable\\(s\\) gateway_vrrp_priority"):
        check(dict((k, v) for k, v in GW1.items() if k != "gateway_vrrp_priority"))
    with pytest.raises(ValueError, match="unknown variable\\(s\\) gateway_vrrp_typo"):
        check(dict(GW1, gateway_vrrp_typo=1))


def test_rollout_order_backups_first():
    members = {"gw1": GW1, "gw2": GW2, "gw3": GW3}
    assert vrrp.rollout_order(["gw1", "gw2", "gw3"], members) == ["gw3", "gw2", "gw1"]
    # Without VRRP: the inventory's order, unchanged.
    assert vrrp.rollout_order(["b", "a", "c"], {"a": OFF, "b": OFF, "c": OFF}) == ["b", "a", "c"]
    # A priority the role will refuse sorts first, as 0; ties keep the order.
    bad = dict(GW1, gateway_vrrp_priority="high")
    assert vrrp.rollout_order(["gw1", "gw2", "x"], {"gw1": bad, "gw2": GW2, "x": OFF}) == ["gw1", "x", "gw2"]
    assert vrrp.rollout_order(["gw2", "gw1"], {"gw1": dict(GW1, gateway_vrrp_priority=True), "gw2": GW2}) == [
        "gw1", "gw2"]
    assert vrrp.rollout_order(["gw1"], {}) == ["gw1"]


def test_enabled():
    assert not vrrp.enabled(OFF) and not vrrp.enabled({}) and not vrrp.enabled({"gateway_vrrp_address": None})
    assert vrrp.enabled(GW1)
