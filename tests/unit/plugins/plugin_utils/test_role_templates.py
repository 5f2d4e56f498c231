# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""role_templates renders role vllm's templates exactly as Ansible's
template lookup renders them: every template entry role vllm writes for
the recorded machines' plans, with plain, nasty (quotes, backslashes,
specifiers, $, shell syntax, Unicode) and empty values, and with both
secrets set and unset, rendered both ways and compared byte for byte.
And each template is compiled once per process, by its text."""

from __future__ import annotations

import os

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import lookup_loader
from ansible.release import __version__ as ANSIBLE_CORE_VERSION
from ansible.template import Templar

from ansible_collections.gpufleet.numa.plugins.action.vllm_files import TEMPLATE_UNITS_KEYS
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.plugins.plugin_utils import role_templates
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import NASTY, PLANS, VARIABLES

VARIANTS = {
    "plain": {},
    "nasty": {"vllm_model": 'org/model "quoted" back\\slash 100% $HOME `tick`', "vllm_download_weights": False,
              "vllm_served_model_name": "org/served.model_v1:8b@rev+x=y~z-",
              "vllm_environment": dict(NASTY, EMPTY=""),
              "vllm_extra_args": {"max-model-len": 8192, "enforce-eager": True, "chat-template": 'a "b" \\ $c ü',
                                  "hf-overrides": {"rope_scaling": None, "list": ["x", 1, {"y": "ü"}]}},
              "vllm_api_key": 'sk-"quoted"-$dollar-\\back-`tick`', "vllm_hf_token": "hf_abc%def"},
    "hardened": {"vllm_hardening_strict": True, "vllm_manage_user": False, "vllm_hf_token": "hf_token"},
}

# The template lookup's convert_data: needed before ansible-core 2.19 (text
# that looks like YAML would come back as data), deprecated from 2.19 on.
LOOKUP_OPTIONS = {} if tuple(int(p) for p in ANSIBLE_CORE_VERSION.split(".")[:2]) >= (2, 19) else {"convert_data": False}


def lookup_render(path, variables):
    """What the vllm_files action rendered before: Ansible's template lookup."""
    loader = DataLoader()
    templar = Templar(loader=loader)
    lookup = lookup_loader.get("template", loader=loader, templar=templar)
    (text,) = lookup.run([path], variables=variables, **LOOKUP_OPTIONS)
    return text


def template_renders(machine, plan, overrides):
    """(path, variables) of every template entry role vllm writes on MACHINE."""
    instances = [i for i in plan["instances"] if i["host"] == machine]
    variables = dict(VARIABLES, host=machine, service_mgr="systemd", vllm_api_key="", vllm_hf_token="")
    if instances[0]["device"] == "amd":  # vLLM for ROCm is installed by the operator
        variables.update(vllm_executable="/opt/rocm-vllm/bin/vllm", vllm_version="0.33.0")
    variables.update(overrides)
    units = host_state.host_units(instances, variables)
    given = {"__vllm": dict((key, units[key]) for key in TEMPLATE_UNITS_KEYS),
             "vllm_api_key": variables["vllm_api_key"], "vllm_hf_token": variables["vllm_hf_token"]}
    return [(os.path.join(role_templates.TEMPLATES_DIR, entry["template"]), dict(given, __vllm_file=entry))
            for entry in units["writes"] if entry["kind"] == "template"]


def cases():
    out = []
    for name, dummy, plan in PLANS[::4]:
        machine = plan["instances"][0]["host"]
        for variant in VARIANTS:
            out.append(pytest.param(machine, plan, VARIANTS[variant], id="%s-%s" % (name, variant)))
    return out


@pytest.mark.parametrize("machine, plan, overrides", cases())
def test_every_template_renders_as_the_template_lookup_renders_it(machine, plan, overrides):
    renders = template_renders(machine, plan, overrides)
    # Every template of the role (the option file only with vllm_extra_args).
    expected = {name for name in os.listdir(role_templates.TEMPLATES_DIR) if name.endswith(".j2")}
    if not overrides.get("vllm_extra_args"):
        expected.discard("instance-config.yaml.j2")
    assert {os.path.basename(path) for path, dummy in renders} == expected
    for path, variables in renders:
        assert role_templates.render(path, variables) == lookup_render(path, variables), path


def test_each_template_is_compiled_once_per_process_by_its_text():
    role_templates.compiled.cache_clear()
    role_templates.preload()
    templates = [name for name in os.listdir(role_templates.TEMPLATES_DIR) if name.endswith(".j2")]
    assert role_templates.compiled.cache_info().currsize == len(templates) > 0
    name, dummy, plan = PLANS[0]
    for path, variables in template_renders(plan["instances"][0]["host"], plan, {}):
        role_templates.render(path, variables)
    assert role_templates.compiled.cache_info().misses == len(templates)


def test_an_undefined_name_is_an_error_not_empty_text(tmp_path):
    path = tmp_path / "t.j2"
    path.write_text("{{ __vllm_file.unit.missing }}\n")
    with pytest.raises(Exception, match="missing"):
        role_templates.render(str(path), {"__vllm_file": {"unit": {}}})
