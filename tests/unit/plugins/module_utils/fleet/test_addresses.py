# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Where the gateway and Prometheus reach a host's instances
(fleet/addresses.py): the address the record keeps, else today's, which
only the hosts without a kept address need."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.fleet import addresses


def record(**hosts):
    return {"hosts": dict((h, ({"address": a} if a else {})) for h, a in hosts.items()),
            "instances": [{"host": h, "name": "vllm-0"} for h in hosts]}


def test_current_is_the_listen_address_or_the_host_where_it_listens_on_a_wildcard():
    assert addresses.current("gpu-a", "10.0.0.1", "192.0.2.1") == "10.0.0.1"
    assert addresses.current("gpu-a", "0.0.0.0", "192.0.2.1") == "192.0.2.1"
    assert addresses.current_of(["gpu-a", "gpu-b"], {"gpu-a": "::", "gpu-b": "10.0.0.2"}, {}) == {
        "gpu-a": "gpu-a", "gpu-b": "10.0.0.2"}
    with pytest.raises(ValueError, match="host gpu-a vllm_listen_host"):
        addresses.current("gpu-a", "not an address!", "gpu-a")


def test_deployed_takes_the_recorded_address_over_todays():
    kept = record(**{"gpu-a": "10.0.0.1", "gpu-b": None})
    today = {"gpu-a": "10.9.9.1", "gpu-b": "10.9.9.2"}
    assert addresses.deployed(kept, today, {}) == {"gpu-a": "10.0.0.1", "gpu-b": "10.9.9.2"}
    # a host today's inventory lacks, without a recorded address, is left out (the caller names it)
    assert addresses.deployed(kept, {"gpu-a": "10.9.9.1"}, {}) == {"gpu-a": "10.0.0.1"}


def test_only_the_hosts_whose_entry_keeps_no_address_need_todays():
    kept = record(**{"gpu-a": "10.0.0.1", "gpu-b": None, "gpu-c": None})
    assert addresses.unaddressed(kept, ["gpu-a", "gpu-b", "gpu-c"]) == ["gpu-b", "gpu-c"]
    assert addresses.unaddressed(kept, ["gpu-a", "gpu-c", "gpu-x"]) == ["gpu-c"]
    # what deployed() reads of today's is exactly theirs
    today = {"gpu-b": "10.9.9.2", "gpu-c": "10.9.9.3"}
    assert addresses.deployed(kept, today, {}) == {"gpu-a": "10.0.0.1", "gpu-b": "10.9.9.2", "gpu-c": "10.9.9.3"}
    assert addresses.unaddressed({"instances": [{"host": "gpu-a"}]}, ["gpu-a"]) == ["gpu-a"]
