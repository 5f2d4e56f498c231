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
    ({"vllm_unit_prefix": "-x"}, r"^vllm_unit_prefix: must start with 'gpufleet-'"),
    # An empty prefix made every *.service file with the marker the role's.
    ({"vllm_unit_prefix": ""}, r"^vllm_unit_prefix: must not be empty"),
    ({"vllm_unit_prefix": "ssh"}, r"^vllm_unit_prefix: must start with 'gpufleet-'"),
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
    with pytest.raises(Exception, match="gpufleet.numa.vllm_removal_variables: vllm_manage_service: is required"):
        vllm_removal_variables({})


# The red-team probe: a kept plan whose hosts.HOST.files named another
# directory and prefix made the take-down stop, disable and delete planted
# ssh.service and haproxy.service as root, never touch the host's real unit,
# and forget the host.
TAMPERED = {"unit_dir": "/etc/systemd/system", "config_dir": "/etc/vllm", "unit_prefix": ""}


@pytest.mark.parametrize("files, message", [
    (dict(TAMPERED), r"^vllm_remove_files\.unit_prefix: must not be empty"),
    (dict(TAMPERED, unit_prefix="haproxy"), r"^vllm_remove_files\.unit_prefix: must start with 'gpufleet-'"),
    (dict(TAMPERED, unit_dir="/etc/systemd/system/../../tmp", unit_prefix="gpufleet-"),
     r"^vllm_remove_files\.unit_dir: must not contain '\.\.'"),
    ({"unit_dir": "/etc/systemd/system"}, r"^vllm_remove_files: must be a mapping of exactly")])
def test_the_record_cannot_point_the_take_down_elsewhere(files, message):
    with pytest.raises(ValueError, match=message):
        removal(recorded_files=files)


def test_the_record_says_where_the_units_are_by_the_roles_rules():
    # A host out of gpu_servers may have lost the variables that said where.
    files = {"unit_dir": "/usr/lib/systemd/system/", "config_dir": "/srv/vllm", "unit_prefix": "gpufleet-a-"}
    v = removal(recorded_files=files, recorded_instances=["vllm-1", "vllm-0"])
    assert (v["vllm_unit_dir"], v["vllm_config_dir"], v["vllm_unit_prefix"]) == (
        "/usr/lib/systemd/system", "/srv/vllm", "gpufleet-a-")
    assert v["recorded_units"] == ["gpufleet-a-vllm-0.service", "gpufleet-a-vllm-1.service"]
    with pytest.raises(ValueError, match=r"^vllm_remove_instances\[0\]: must be \[A-Za-z0-9_.-\]"):
        removal(recorded_instances=["../ssh"])


def test_only_gpufleet_units_of_instance_names_are_ever_retired():
    v = dict(removal(), vllm_unit_prefix="gpufleet-")
    found = ["/u/ssh.service", "/u/haproxy.service", "/u/gpufleet-.service", "/u/gpufleet-vllm-0.service",
             "/u/gpufleet-.hidden.service"]
    assert [u["unit"] for u in retire.retiring_units(found, v, "gpu-a")] == ["gpufleet-vllm-0.service"]
    # A prefix that slipped past the checks still retires nothing that is not gpufleet-*.
    assert retire.retiring_units(["/u/ssh.service"], dict(v, vllm_unit_prefix=""), "gpu-a") == []


SHOWN = """Id=gpufleet-vllm-0.service
LoadState=not-found
FragmentPath=

Id=gpufleet-vllm-1.service
LoadState=loaded
FragmentPath=/usr/lib/systemd/system/gpufleet-vllm-1.service
"""


def test_a_host_leaves_the_record_only_when_its_units_are_gone():
    assert retire.units_left("", []) == []
    assert retire.units_left(SHOWN.replace("LoadState=loaded", "LoadState=not-found"), []) == []
    assert retire.units_left(SHOWN, ["/etc/systemd/system/gpufleet-vllm-0.service"]) == [
        "gpufleet-vllm-0.service (a unit file is still at /etc/systemd/system/gpufleet-vllm-0.service)",
        "gpufleet-vllm-1.service (systemd still has it loaded, from /usr/lib/systemd/system/gpufleet-vllm-1.service)"]
