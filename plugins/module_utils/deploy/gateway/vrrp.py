# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Two or more gateways, one address: keepalived (VRRP) settings of role gateway.

check_vrrp() takes this gateway's gateway_vrrp_* variables, the checked
HAProxy settings (settings.check_settings) and the gateway_vrrp_* variables
of every host of the VRRP group (gateway_vrrp_group, `gateways` by
default), and returns what keepalived.conf places: {"enabled": False} when
gateway_vrrp_address is "" (nothing of keepalived is installed or
written). Every value is checked as a whole; the first that breaks a rule
raises ValueError("VARIABLE: RULE (got VALUE)"); the password is never
shown. rollout_order() orders the gateways for the deploy playbook: one
at a time, lowest priority (the backups) first. Pure, standard library only.

The choices, against keepalived's known failure modes:
- unicast only (unicast_src_ip/unicast_peer, every other host of the
  group a peer): no multicast, whose loss on some networks with nopreempt
  left two MASTERs (keepalived#2370);
- every gateway starts as BACKUP with its own priority, so the highest one
  that runs becomes MASTER after the first master-down interval, and a
  rebooted gateway never starts as MASTER beside a running one
  (keepalived#2649);
- no preemption by default (nopreempt): a gateway that comes back (HAProxy
  up again, keepalived restarted, link back) stays BACKUP, so the address
  moves only when its holder fails, once, never back. gateway_vrrp_preempt
  true takes it back after gateway_vrrp_preempt_delay seconds instead;
- the track script has no weight: a gateway whose HAProxy does not answer
  its health URI goes to FAULT and gives the address up, whatever the
  priorities (no weight arithmetic to get wrong);
- the new MASTER sends gratuitous ARP at once, again after
  GARP_MASTER_DELAY seconds, and every GARP_MASTER_REFRESH seconds while
  it holds the address, so a switch or client that missed the first ones
  (after a recovery: keepalived#166) learns where the address is.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks

VARIABLES = (
    "gateway_vrrp_address", "gateway_vrrp_interface", "gateway_vrrp_router_id", "gateway_vrrp_priority",
    "gateway_vrrp_password", "gateway_vrrp_unicast_address", "gateway_vrrp_group", "gateway_vrrp_preempt",
    "gateway_vrrp_preempt_delay", "gateway_vrrp_config_path", "gateway_vrrp_package", "gateway_vrrp_keepalived",
    "gateway_vrrp_service_name",
)
# What must be the same on every gateway of the group.
SHARED = ("gateway_vrrp_address", "gateway_vrrp_router_id", "gateway_vrrp_password", "gateway_vrrp_preempt",
          "gateway_vrrp_preempt_delay")
# Linux interface names: at most 15 characters (IFNAMSIZ - 1).
INTERFACE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}"
INTERFACE_RULE = "must be a network interface name: 1-15 letters, digits, '_', '.' or '-'"
GROUP = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
PACKAGE = r"[A-Za-z0-9][A-Za-z0-9+._-]{0,127}"
SERVICE = r"[A-Za-z0-9][A-Za-z0-9@_.:-]{0,127}"
# auth_type PASS sends at most 8 characters (keepalived cuts longer ones);
# no space, quote, backslash or comment character ('#', '!'): one word.
PASSWORD = r"[A-Za-z0-9_.,:;+=@%^*/~?-]{1,8}"
# 255 is the address owner's priority (the host whose own address it is).
PRIORITY_MAX = 254
# VRRPv2 (authentication needs it): adverts every second, integers only.
ADVERT_INT = 1
# The track script: every second, FAULT after 2 failures, back after 2 good.
CHECK_INTERVAL, CHECK_TIMEOUT, CHECK_FALL, CHECK_RISE = 1, 1, 2, 2
GARP_MASTER_DELAY, GARP_MASTER_REPEAT, GARP_MASTER_REFRESH = 1, 3, 60
# The check script, beside keepalived.conf; it needs curl.
CHECK_SCRIPT = "gpufleet-haproxy-check"
CHECK_PACKAGES = ("curl",)
CURL = "/usr/bin/curl"
# HAProxy's own answers of its monitor URI: up, or a model without an
# instance; either says HAProxy serves (both gateways see the same backends).
CHECK_STATUSES = (200, 503)


def enabled(variables):
    """Whether VARIABLES (one host's) turn VRRP on: gateway_vrrp_address set."""
    return variables.get("gateway_vrrp_address") not in (None, "")


def floating_address(name, value):
    """An IPv4 address with its prefix length (CIDR), canonical; a host address of its network."""
    checks.text(name, value)
    rule = "must be an IPv4 address with its prefix length, e.g. 10.0.0.100/24"
    if "/" not in value:
        checks.fail(name, rule, value)
    try:
        interface = ipaddress.IPv4Interface(value)
    except ValueError:
        checks.fail(name, rule, value)
    network = interface.network
    if network.prefixlen < 31 and interface.ip in (network.network_address, network.broadcast_address):
        checks.fail(name, "must be a host address of its network, not its network or broadcast address", value)
    return str(interface)


def unicast_address(name, value):
    checks.text(name, value, allow_empty=True)
    if value == "":
        raise ValueError("%s: is required when gateway_vrrp_address is set: this gateway's own IPv4 address on "
                         "gateway_vrrp_interface, to which the other gateways send VRRP (got '')" % name)
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        checks.fail(name, "must be an IPv4 address (this gateway's own, on gateway_vrrp_interface)", value)


def password(name, value):
    if not isinstance(value, str) or value == "":
        raise ValueError("%s: is required when gateway_vrrp_address is set (value hidden)" % name)
    if len(value) > 8:
        raise ValueError("%s: must be at most 8 characters: VRRP's auth_type PASS sends only 8 (value hidden)" % name)
    if not re.fullmatch(PASSWORD, value):
        raise ValueError("%s: must be letters, digits or _.,:;+=@%%^*/~?- (no space, quote, backslash, '#' or '!') "
                         "(value hidden)" % name)
    return value


def own_settings(v):
    """One host's gateway_vrrp_* variables, each checked (VRRP on)."""
    s = {"address": floating_address("gateway_vrrp_address", v["gateway_vrrp_address"])}
    s["interface"] = checks.text("gateway_vrrp_interface", v["gateway_vrrp_interface"], INTERFACE, INTERFACE_RULE)
    s["router_id"] = checks.integer("gateway_vrrp_router_id", v["gateway_vrrp_router_id"], 1, 255)
    s["priority"] = checks.integer("gateway_vrrp_priority", v["gateway_vrrp_priority"], 1, PRIORITY_MAX)
    s["password"] = password("gateway_vrrp_password", v["gateway_vrrp_password"])
    s["unicast_src_ip"] = unicast_address("gateway_vrrp_unicast_address", v["gateway_vrrp_unicast_address"])
    if s["unicast_src_ip"] == s["address"].split("/", maxsplit=1)[0]:
        checks.fail("gateway_vrrp_unicast_address", "must be this gateway's own address, not the floating "
                    "gateway_vrrp_address", v["gateway_vrrp_unicast_address"])
    s["preempt"] = checks.boolean("gateway_vrrp_preempt", v["gateway_vrrp_preempt"])
    s["preempt_delay"] = checks.integer("gateway_vrrp_preempt_delay", v["gateway_vrrp_preempt_delay"], 0, 1000)
    return s


def files(v):
    """Where keepalived and its files are (checked whether VRRP is on or not)."""
    s = {"group": checks.text("gateway_vrrp_group", v["gateway_vrrp_group"], GROUP,
                              "must be an inventory group name (letters, digits, '_')")}
    s["config_path"] = checks.absolute_path("gateway_vrrp_config_path", v["gateway_vrrp_config_path"])
    s["package"] = checks.text("gateway_vrrp_package", v["gateway_vrrp_package"], PACKAGE,
                               "must be a package name (letters, digits, '+', '.', '_', '-')")
    s["keepalived"] = checks.absolute_path("gateway_vrrp_keepalived", v["gateway_vrrp_keepalived"])
    s["service_name"] = checks.text("gateway_vrrp_service_name", v["gateway_vrrp_service_name"], SERVICE,
                                    "must be a systemd unit name (letters, digits, '@', '_', '.', ':', '-')")
    s["check_script"] = s["config_path"].rsplit("/", 1)[0] + "/" + CHECK_SCRIPT
    return s


def check_url(gateway):
    """The URL of HAProxy's monitor URI on this host, from the checked
    HAProxy settings; the listener must be a wildcard: a BACKUP cannot bind
    the floating address it does not hold."""
    if checks.address_scope(gateway["listen_address"]) != "unspecified":
        checks.fail("gateway_listen_address", "must be 0.0.0.0 or :: when gateway_vrrp_address is set: HAProxy on "
                    "a BACKUP gateway cannot bind the floating address it does not hold", gateway["listen_address"])
    if not gateway["monitor_uri"]:
        checks.fail("gateway_monitor_uri", "must be set when gateway_vrrp_address is set: keepalived's track script "
                    "asks HAProxy there whether it serves", gateway["monitor_uri"])
    host = "127.0.0.1" if ":" not in gateway["listen_address"] else "[::1]"
    scheme = "https" if gateway["tls_certificate"] else "http"
    return "%s://%s:%d%s" % (scheme, host, gateway["listen_port"], gateway["monitor_uri"])


def peers(host, own, members, group):
    """The unicast peers: every other host of the group, its address; the
    group must agree on the shared values and have distinct priorities and addresses."""
    if host not in members:
        raise ValueError("gateway_vrrp_group: this gateway (%s) is not in group %s, whose hosts share "
                         "gateway_vrrp_address" % (host, group))
    found, priorities, addresses = [], {own["priority"]: host}, {own["unicast_src_ip"]: host}
    for other in sorted(members):
        if other == host:
            continue
        variables = members[other]
        where = "%s (in group %s)" % (other, group)
        if not enabled(variables):
            raise ValueError("%s: gateway_vrrp_address is not set on that gateway; every host of group %s shares "
                             "it" % (where, group))
        try:
            theirs = own_settings(variables)
        except ValueError as exc:
            raise ValueError("%s: %s" % (where, exc))
        for name in SHARED:
            key = name[len("gateway_vrrp_"):]
            if theirs[key] != own[key]:
                shown = "(value hidden)" if key == "password" else "(%s here, %s there)" % (own[key], theirs[key])
                raise ValueError("%s: %s: must be the same on every gateway of group %s %s"
                                 % (where, name, group, shown))
        if theirs["priority"] in priorities:
            raise ValueError("gateway_vrrp_priority: must differ on every gateway of group %s: %s and %s both "
                             "have %d" % (group, priorities[theirs["priority"]], other, theirs["priority"]))
        priorities[theirs["priority"]] = other
        if theirs["unicast_src_ip"] in addresses:
            first = addresses[theirs["unicast_src_ip"]]
            raise ValueError("gateway_vrrp_unicast_address: must differ on every gateway of group %s: %s and %s "
                             "both have %s" % (group, first, other, theirs["unicast_src_ip"]))
        addresses[theirs["unicast_src_ip"]] = other
        found.append({"host": other, "address": theirs["unicast_src_ip"], "priority": theirs["priority"]})
    if not found:
        raise ValueError("gateway_vrrp_group: group %s holds no other gateway: VRRP needs at least two (a peer to "
                         "send to; without one keepalived would fall back to multicast)" % group)
    return found


def check_vrrp(variables, gateway, host, members):
    """What keepalived.conf places for HOST. VARIABLES: this host's
    gateway_vrrp_* (exactly VARIABLES); GATEWAY: its checked HAProxy
    settings; MEMBERS: host -> gateway_vrrp_* of every host of the group."""
    v = checks.exact_names("gateway_vrrp_settings", variables, VARIABLES)
    s = files(v)
    if not enabled(v):
        return dict(s, enabled=False)
    if not isinstance(members, dict):
        raise ValueError("gateway_vrrp_settings expects the group's hosts as a mapping")
    s.update(own_settings(v), enabled=True)
    s["check_url"] = check_url(gateway)
    s["peers"] = peers(host, s, members, s["group"])
    s["instance"] = "gpufleet_gateway_%d" % s["router_id"]
    s["packages"] = [s["package"]] + list(CHECK_PACKAGES)
    s.update(advert_int=ADVERT_INT, check_interval=CHECK_INTERVAL, check_timeout=CHECK_TIMEOUT,
             check_fall=CHECK_FALL, check_rise=CHECK_RISE, garp_master_delay=GARP_MASTER_DELAY,
             garp_master_repeat=GARP_MASTER_REPEAT, garp_master_refresh=GARP_MASTER_REFRESH,
             curl=CURL, check_statuses="|".join(str(code) for code in CHECK_STATUSES))
    return s


def rollout_order(hosts, members):
    """HOSTS in the order the deploy playbook configures them, one at a
    time: by gateway_vrrp_priority, lowest first (the BACKUPs before the
    MASTER), hosts without VRRP (or a priority the role will refuse) first
    in their own order; ties keep the inventory's order."""
    def key(item):
        index, host = item
        variables = members.get(host, {})
        priority = variables.get("gateway_vrrp_priority")
        if not enabled(variables) or isinstance(priority, bool):
            return (0, index)
        try:
            return (int(priority), index)
        except (TypeError, ValueError):
            return (0, index)
    return [host for index, host in sorted(enumerate(hosts), key=key)]
