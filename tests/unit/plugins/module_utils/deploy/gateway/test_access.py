# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/gateway/access.py through the checked settings: the Prometheus
exporter is open on loopback, behind the gateway's key beyond it (or open
with gateway_allow_unauthenticated), never on a port another listener has;
errors name the variable."""

from __future__ import annotations

import hashlib

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import settings as gateway_settings
from ansible_collections.gpufleet.numa.tests.fixtures.gateway_inputs import variables

KEY = "sk-gw-0123456789abcdef"
DIGEST = hashlib.sha256(("Bearer " + KEY).encode()).hexdigest().upper()


def test_on_loopback_the_exporter_is_open():
    s = gateway_settings.check_settings(variables())
    assert (s["metrics_socket"], s["metrics_key_digest"]) == ("127.0.0.1:8405", "")


@pytest.mark.parametrize("address", ["10.0.0.5", "0.0.0.0", "::"])
def test_beyond_loopback_the_exporter_needs_the_key(address):
    with pytest.raises(ValueError, match="gateway_metrics_address: needs gateway_api_key"):
        gateway_settings.check_settings(variables(gateway_metrics_address=address))
    s = gateway_settings.check_settings(variables(gateway_metrics_address=address, gateway_api_key=KEY))
    assert s["metrics_key_digest"] == DIGEST
    s = gateway_settings.check_settings(variables(gateway_metrics_address=address, gateway_allow_unauthenticated=True))
    assert s["metrics_key_digest"] == ""


def test_off_needs_nothing():
    s = gateway_settings.check_settings(variables(gateway_metrics_address="10.0.0.5", gateway_metrics_port=0))
    assert s["metrics_port"] == 0


@pytest.mark.parametrize("changes", [
    {"gateway_metrics_port": 8080},                                 # the listener's
    {"gateway_metrics_port": 8404, "gateway_stats_port": 8404},     # the statistics page's
])
def test_the_exporter_has_its_own_port(changes):
    with pytest.raises(ValueError, match="gateway_metrics_port: must differ"):
        gateway_settings.check_settings(variables(**changes))


@pytest.mark.parametrize("name, value", [("gateway_metrics_port", 70000), ("gateway_metrics_port", "84 05"),
                                         ("gateway_metrics_address", "127.0.0.1 backup"),
                                         ("gateway_metrics_address", "")])
def test_bad_values_are_named(name, value):
    with pytest.raises(ValueError, match=name):
        gateway_settings.check_settings(variables(**{name: value}))
