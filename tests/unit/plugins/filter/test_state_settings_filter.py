# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filter state_settings: the run's store from the controller's variables,
once per run; an error names the filter and the variable, and a password
whose template fails is not shown, nor the reason."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.filter import state_store

ETCD = {"gpufleet_state_backend": "etcd", "gpufleet_etcd_endpoints": "http://127.0.0.1:2379",
        "gpufleet_etcd_prefix": "/gpufleet/demo/", "gpufleet_tp_size": 4}


class Failing(dict):
    """Controller variables where one template fails (its error text holds the secret)."""

    def __init__(self, values, failing):
        super(Failing, self).__init__(values)
        self.failing = failing

    def __getitem__(self, name):
        if name == self.failing:
            raise RuntimeError("template error while templating 'hunter2-secret'")
        return dict.__getitem__(self, name)

    def __contains__(self, name):
        return name == self.failing or dict.__contains__(self, name)


def test_the_file_store_by_default_and_etcd_when_chosen():
    assert state_store.state_settings({"gpufleet_tp_size": 4}, "/srv/p.json") == {
        "backend": "file", "path": "/srv/p.json", "location": "/srv/p.json"}
    settings = state_store.state_settings(ETCD, "/srv/p.json")
    assert settings["backend"] == "etcd" and settings["etcd"]["endpoints"] == ["http://127.0.0.1:2379"]
    assert settings["location"] == "etcd /gpufleet/demo/record at http://127.0.0.1:2379"


def test_an_error_names_the_filter_and_the_variable():
    with pytest.raises(AnsibleFilterError, match=r"^gpufleet.numa.state_settings: gpufleet_etcd_prefix: must be"):
        state_store.state_settings(dict(ETCD, gpufleet_etcd_prefix="gpufleet"))
    with pytest.raises(AnsibleFilterError, match="must be the controller's variables"):
        state_store.state_settings(["not", "variables"])


def test_a_template_that_fails_is_named_its_reason_hidden_for_the_password():
    variables = Failing(dict(ETCD, gpufleet_etcd_username="deploy"), "gpufleet_etcd_password")
    with pytest.raises(AnsibleFilterError) as err:
        state_store.state_settings(variables)
    assert str(err.value) == ("gpufleet.numa.state_settings: gpufleet_etcd_password: cannot be evaluated "
                              "(reason hidden)")
    with pytest.raises(AnsibleFilterError, match=r"gpufleet_etcd_prefix: cannot be evaluated \(.*templating"):
        state_store.state_settings(Failing(ETCD, "gpufleet_etcd_prefix"))
