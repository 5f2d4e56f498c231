# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""placement/host_settings.py: each GPU server's own placement variables, checked and grouped."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import host_settings


def test_host_settings_defaults_and_per_host_values():
    settings = host_settings.host_settings({"a": {}, "b": {"gpufleet_tp_size": 4, "gpufleet_allow_span": True}}, ["a", "b"])
    assert settings["a"]["tp_size"] == 1 and settings["a"]["pp_size"] == 1 and settings["a"]["allow_span"] is False
    assert settings["b"]["tp_size"] == 4 and settings["b"]["allow_span"] is True


def test_host_settings_bad_value_names_host_and_variable():
    with pytest.raises(ValueError, match=r"^host b: gpufleet_tp_size: .*got 0"):
        host_settings.host_settings({"b": {"gpufleet_tp_size": 0}}, ["b"])


def test_host_settings_exclude_gpus_mapping_takes_the_hosts_own_list():
    hostvars = {"a": {"gpufleet_exclude_gpus": {"a": ["0000:18:00.0"], "b": ["GPU-x"]}}}
    assert host_settings.host_settings(hostvars, ["a"])["a"]["exclude_gpus"] == ["0000:18:00.0"]


def test_plan_groups_one_call_per_distinct_settings_excluded_gpus_do_not_split():
    settings = host_settings.host_settings({
        "a": {"gpufleet_tp_size": 2},
        "b": {"gpufleet_tp_size": 2, "gpufleet_exclude_gpus": ["GPU-1"]},
        "c": {"gpufleet_tp_size": 4},
    }, ["a", "b", "c"])
    groups = host_settings.plan_groups(settings)
    assert [hosts for _options, hosts in groups] == [["a", "b"], ["c"]]
    assert groups[0][0]["exclude_gpus"] == {"b": ["GPU-1"]}


def test_check_option_refuses_unknown_options():
    with pytest.raises(ValueError, match="must be a placement option"):
        host_settings.check_option("tensor_parallel", 2, "a", "hosts.a.options")


def test_host_models_served_name_defaults_to_the_model():
    models = host_settings.host_models({"a": {"vllm_model": "org/model"}, "b": {}}, ["a", "b"])
    assert models == {"a": {"model": "org/model", "served_model_name": "org/model"}}


def test_host_settings_device_class_defaults_to_auto_and_is_checked():
    settings = host_settings.host_settings({"a": {}, "b": {"gpufleet_device_class": "cpu"}}, ["a", "b"])
    assert settings["a"]["device_class"] == "auto" and settings["b"]["device_class"] == "cpu"
    with pytest.raises(ValueError, match=r"^host b: gpufleet_device_class: must be one of auto, nvidia, amd, cpu "
                                         r"\(got 'tpu'\)"):
        host_settings.host_settings({"b": {"gpufleet_device_class": "tpu"}}, ["b"])
    assert host_settings.check_option("device_class", "amd", "a", "hosts.a.options.device_class") == "amd"
