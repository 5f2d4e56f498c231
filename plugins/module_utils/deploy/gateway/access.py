# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Who may reach the gateway's listeners: the digest of gateway_api_key the
configuration checks clients against, and the rules for the statistics
page and the Prometheus exporter beyond loopback. Pure functions over the
checked settings (settings.py), standard library only.
"""

from __future__ import annotations

import hashlib

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks as vc


def gateway_key(variables, listen_address):
    """The SHA-256 (upper-case hex, as HAProxy's sha2(256),hex writes it) of
    'Bearer KEY': the configuration holds the digest, never the key. ''
    when no key is set, which a gateway beyond loopback may only be with
    gateway_allow_unauthenticated."""
    key = variables["gateway_api_key"]
    allow = vc.boolean("gateway_allow_unauthenticated", variables["gateway_allow_unauthenticated"])
    if key is None or key == "":
        if not vc.is_loopback(listen_address) and not allow:
            raise ValueError(
                "gateway_api_key: is required when the gateway listens beyond loopback "
                "(gateway_listen_address %s); set it (from a vault), or listen on 127.0.0.1, or set "
                "gateway_allow_unauthenticated: true to let anyone in" % listen_address)
        return ""
    vc.api_key("gateway_api_key", key)
    return hashlib.sha256(("Bearer " + key).encode("ascii")).hexdigest().upper()


def stats_access(s):
    """The statistics page has no login and shows every backend, its state
    and counters: it listens on loopback (reach it over SSH), unless the
    gateway itself lets anyone in (gateway_allow_unauthenticated)."""
    if s["stats_port"] == 0 or s["allow_unauthenticated"] or vc.is_loopback(s["stats_address"]):
        return
    vc.fail("gateway_stats_address",
            "must be a loopback address (127.0.0.1 or ::1) while gateway_stats_port is set: the statistics "
            "page has no login and shows every backend; reach it through an SSH tunnel, or set "
            "gateway_allow_unauthenticated: true to let anyone in", s["stats_address"])


def metrics_access(s):
    """The Prometheus exporter shows every backend's counters: on loopback
    (a Prometheus on the gateway host) it is open, beyond loopback it takes
    the gateway's own key (Authorization: Bearer gateway_api_key), unless
    the gateway lets anyone in (gateway_allow_unauthenticated)."""
    if s["metrics_port"] == 0 or s["allow_unauthenticated"] or vc.is_loopback(s["metrics_address"]):
        return ""
    if not s["api_key_digest"]:
        vc.fail("gateway_metrics_address",
                "needs gateway_api_key while the exporter listens beyond loopback (gateway_metrics_port set): "
                "Prometheus then sends it as a bearer token (prometheus_gateway_api_key); or listen on "
                "127.0.0.1, or set gateway_allow_unauthenticated: true to let anyone in", s["metrics_address"])
    return s["api_key_digest"]
