# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/vllm/retire.py: what taking a host down reads (only that), and
each stale unit with the gateway servers it is drained on first."""

import pytest

from ansible_collections.gpufleet.numa.plugins.filter.vllm_retire import vllm_removal_variables, vllm_retiring
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import retire
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import VARIABLES

REMOVAL = dict((k, VARIABLES[k]) for k in ("vllm_config_dir", "vllm_unit_dir", "vllm_unit_prefix",
                                           "vllm_drain_timeout", "vllm_manage_service"))
BACKENDS = [{"name": "gpu-a-vllm-1", "host": "gpu-a", "backend": "model-llama", "model": "llama"},
            {"name": "gpu-b-vllm-1", "host": "gpu-b", "backend": "model-llama", "model": "llama"}]


def removal(**changes):
    variables = dict(REMOVAL, vllm_gateways={"gw": "/run/haproxy/admin.sock"}, vllm_gateway_backends=BACKENDS,
                     service_mgr="systemd")
    variables.update(changes)
    return retire.removal_variables(variables)


def test_taking_down_needs_no_model_or_address():
    v = removal(vllm_manage_service="auto")
    assert v["manage_service"] is True
    assert v["vllm_gateways"] == {"gw": "/run/haproxy/admin.sock"}
    assert v["vllm_gateway_backends"][0] == {"host": "gpu-a", "server": "gpu-a-vllm-1", "backend": "model-llama"}


@pytest.mark.parametrize("changes, message", [
    ({"vllm_unit_dir": "etc/systemd"}, "^vllm_unit_dir: "),
    ({"vllm_unit_prefix": "-x"}, r"^vllm_unit_prefix: must be \[A-Za-z0-9_.-\]"),
    ({"vllm_drain_timeout": -1}, "^vllm_drain_timeout: "),
    ({"vllm_manage_service": "maybe"}, "^vllm_manage_service: must be auto, true or false"),
    ({"vllm_gateways": {"gw": "relative"}}, r"^vllm_gateways\.gw: ")])
def test_taking_down_checks_what_it_reads(changes, message):
    with pytest.raises(ValueError, match=message):
        removal(**changes)


def test_a_missing_variable_is_named():
    with pytest.raises(ValueError, match="^vllm_unit_dir: is required"):
        retire.removal_variables(dict((k, v) for k, v in REMOVAL.items() if k != "vllm_unit_dir"))


def test_each_stale_unit_is_drained_on_every_gateway_first():
    v = removal()
    units = retire.retiring_units(["/u/gpufleet-vllm-1.service", "/c/gpufleet-vllm-1.yaml", "/u/other.service",
                                   "/u/gpufleet-.service"], dict(v, vllm_unit_prefix="gpufleet-"), "gpu-a")
    assert units == [{"path": "/u/gpufleet-vllm-1.service", "unit": "gpufleet-vllm-1.service", "instance": "vllm-1",
                      "drain": [{"gateway": "gw", "socket": "/run/haproxy/admin.sock", "backend": "model-llama",
                                 "server": "gpu-a-vllm-1"}]}]
    # another host's server of the same instance name is not drained
    assert retire.retiring_units(["/u/gpufleet-vllm-1.service"], dict(v, vllm_unit_prefix="gpufleet-"),
                                 "gpu-c")[0]["drain"] == []


def test_instance_of_unit():
    assert retire.instance_of_unit("/etc/systemd/system/gpufleet-vllm-0.service", "gpufleet-") == "vllm-0"
    assert retire.instance_of_unit("/etc/systemd/system/vllm-0.service", "") == "vllm-0"
    assert retire.instance_of_unit("/etc/vllm/gpufleet-vllm-0.yaml", "gpufleet-") is None


def test_filters_name_themselves():
    assert vllm_retiring([], removal(), "gpu-a") == []
    with pytest.raises(Exception, match="gpufleet.numa.vllm_retiring: input must be the list of stale file paths"):
        vllm_retiring("/u/x.service", removal(), "gpu-a")
    with pytest.raises(Exception, match="gpufleet.numa.vllm_removal_variables: vllm_config_dir: is required"):
        vllm_removal_variables({})
