# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""plugin_utils/plain_values.py: ansible-core's tagged and unsafe values in,
plain dict, list, str, int, float, bool and None out (keys too), both for
values built directly and for what a real filter call through Ansible's
Templar hands the filter."""

from __future__ import annotations

import inspect

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader
from ansible.template import Templar
from ansible.utils.unsafe_proxy import AnsibleUnsafeText, wrap_var

from ansible_collections.gpufleet.numa.plugins.plugin_utils import plain_values
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import host_list, plain, plain_data

try:  # ansible-core 2.19: templates must be trusted to be rendered
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - older ansible-core renders any string
    def trust_as_template(text):
        return text

PLAIN = (dict, list, str, int, float, bool, type(None))


def shape(value):
    """The value with every container and scalar replaced by its exact type's name (keys as 'type:key')."""
    if isinstance(value, dict):
        return [type(value).__name__, dict(("%s:%s" % (type(k).__name__, k), shape(v)) for k, v in value.items())]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [shape(v) for v in value]]
    return type(value).__name__


def assert_plain(value):
    assert type(value) in PLAIN, type(value)
    if isinstance(value, dict):
        for key, item in value.items():
            assert_plain(key)
            assert_plain(item)
    if isinstance(value, list):
        for item in value:
            assert_plain(item)


def test_unsafe_text_comes_back_as_str():
    value = plain(AnsibleUnsafeText("gpu-a"))
    assert value.__class__ is str and value == "gpu-a"


def test_wrapped_nested_values_come_back_plain_keys_too():
    given = wrap_var({"gpu-a": {"vllm_model": "m", "ports": [8000, 8001], "flag": True, "ratio": 0.5, "none": None},
                      AnsibleUnsafeText("gpu-b"): [AnsibleUnsafeText("x"), ("t", 1)]})
    value = plain(given)
    assert value == {"gpu-a": {"vllm_model": "m", "ports": [8000, 8001], "flag": True, "ratio": 0.5, "none": None},
                     "gpu-b": ["x", ["t", 1]]}
    assert_plain(value)


@pytest.mark.parametrize("value", [True, False])
def test_bool_stays_bool(value):
    assert plain(value) is value
    assert plain({"k": value})["k"] is value and plain([value])[0] is value


def test_tagged_values_from_yaml_come_back_plain():
    loaded = DataLoader().load("gpu-a: {tp: 4, span: false, ratio: 0.5, cpus: '0-3', none: null, ports: [8000]}\n")
    assert loaded.__class__ is not dict and next(iter(loaded)).__class__ is not str  # tagged on 2.19
    value = plain(loaded)
    assert value == {"gpu-a": {"tp": 4, "span": False, "ratio": 0.5, "cpus": "0-3", "none": None, "ports": [8000]}}
    assert_plain(value)
    assert value["gpu-a"]["span"] is False


def test_what_a_filter_is_handed_through_the_templar_comes_back_plain(tmp_path):
    """A real filter call: a filter plugin that reports the types it was handed and what plain() made of them."""
    (tmp_path / "plain_probe.py").write_text(
        "from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain\n\n\n"
        + inspect.getsource(shape) + "\n\n"
        "class FilterModule(object):\n"
        "    def filters(self):\n"
        "        return {'gpufleet_plain_probe': lambda value: {'given': shape(value), 'plain': shape(plain(value)),\n"
        "                                                       'same': plain(value) == value}}\n")
    filter_loader.add_directory(str(tmp_path))
    loader = DataLoader()
    hosts = loader.load("gpu-a: {tp: 4, span: true, ratio: 1.5, none: null, ports: [8000, x]}\n")
    templar = Templar(loader=loader, variables={"hosts": hosts})
    report = templar.template(trust_as_template("{{ hosts | gpufleet_plain_probe }}"))
    assert report["same"] is True
    assert report["plain"] == ["dict", {"str:gpu-a": ["dict", {
        "str:tp": "int", "str:span": "bool", "str:ratio": "float", "str:none": "NoneType",
        "str:ports": ["list", ["int", "str"]]}]}]
    # What the templar handed over was not plain (else this test would prove nothing on this ansible-core).
    assert report["given"] != report["plain"]


def test_data_the_filters_made_comes_back_as_plain_makes_it_without_templating_each_item(tmp_path):
    """plain_data, for the run (a fact only the collection's filters made):
    what a real filter call is handed, read raw, equals plain()'s reading,
    every container and scalar plain; on ansible-core 2.19 the filter is
    handed a lazy container, which plain_data reads without the templar."""
    (tmp_path / "plain_data_probe.py").write_text(
        "from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain, plain_data\n\n\n"
        "class FilterModule(object):\n"
        "    def filters(self):\n"
        "        return {'gpufleet_plain_data_probe': lambda value: {'given': type(value).__name__,\n"
        "                                                            'raw': plain_data(value), 'plain': plain(value)}}\n")
    filter_loader.add_directory(str(tmp_path))
    run = {"record": {"hosts": {"gpu-a": {"instances": [{"name": "vllm-0", "port": 8000, "gpus": [0, 1],
                                                        "multinode": None, "span": False, "ratio": 0.5}]}}},
           "converged": ["gpu-a"], "gateway": None, "slices": {"gpu-a": {"instances": [], "text": "{{ not a template }}"}}}
    templar = Templar(loader=DataLoader(), variables={"run": run})
    report = templar.template(trust_as_template("{{ run | gpufleet_plain_data_probe }}"))
    assert report["raw"] == report["plain"] == run
    assert_plain(report["raw"])
    if plain_values._LazyDict is not None:  # ansible-core 2.19 on: the fast path was taken
        assert report["given"] == plain_values._LazyDict.__name__
    assert plain_data(wrap_var(run)) == run and plain_data([AnsibleUnsafeText("x"), (1, 2)]) == ["x", [1, 2]]


def test_host_list_takes_a_list_of_names_and_refuses_the_rest():
    assert host_list("fleet", ["gpu-a", "gpu-b"]) == ["gpu-a", "gpu-b"]
    assert host_list("fleet", ("gpu-a",)) == ["gpu-a"]
    for bad in ("gpu-a", None, {"gpu-a": 1}, 3):
        with pytest.raises(ValueError, match="^fleet must be a list of inventory hosts$"):
            host_list("fleet", bad)
