# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Where the gateway and Prometheus reach a GPU server's instances
(docs/deploy.md, "Addresses"; docs/plan.md, hosts.HOST.address), decided
here and nowhere else.

current() is the address the inventory gives a host now: its
vllm_listen_host (as role vllm takes it, over the role's defaults), or the
host's own address (ansible_host, else its name) where it listens on a
wildcard. A host that converges has its units listen there, and its record
entry keeps it (plan/record.record_hosts, `address`). deployed() is where
the record's instances are reached: the address kept in each host's entry
(its units listen there until the host converges again, whatever the
inventory says now), else, for an entry written before the record kept
one, the current address; unaddressed() names the hosts that need it.
Pure functions, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.metrics import targets


def current(host, listen, reach):
    """HOST's address now: LISTEN (its vllm_listen_host), or REACH (its
    ansible_host, else its name) when LISTEN is a wildcard; checked, a
    ValueError naming the host and the variable."""
    return targets.scrape_address("host %s" % host, "vllm_listen_host", listen, reach)


def current_of(hosts, listen, reach):
    """host -> current() of each of HOSTS (LISTEN, REACH: host -> value;
    REACH defaults to the host's name)."""
    return dict((host, current(host, listen.get(host), reach.get(host) or host)) for host in hosts)


def unaddressed(record, hosts):
    """The HOSTS with instances in RECORD whose entry keeps no address: the
    only ones deployed() needs today's LISTEN and REACH of (reading a host's
    role variables costs the controller a pass over them)."""
    entries = record.get("hosts") or {}
    wanted = set(hosts)
    return sorted(set(i["host"] for i in record["instances"]
                      if i["host"] in wanted and not (entries.get(i["host"]) or {}).get("address")))


def deployed(record, listen, reach):
    """host -> where the record's instances of each host are reached: the
    address its entry keeps (hosts[HOST].address), else (a record written
    before the field) current(). Hosts of the record without instances, and
    hosts LISTEN does not name, are left out."""
    hosts = sorted(set(i["host"] for i in record["instances"]))
    entries = record.get("hosts") or {}  # a plan that is no record has none
    out = {}
    for host in hosts:
        kept = (entries.get(host) or {}).get("address")
        if kept:
            out[host] = kept
        elif host in listen:
            out[host] = current(host, listen[host], reach.get(host) or host)
    return out
