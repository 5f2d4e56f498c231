# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Role gpufleet.numa.vllm: its own check refuses every value that
meta/argument_specs.yml refuses.

The deploy playbook imports the role without Ansible's argument check
(rolespec_validate: false; its first play checked every variable of the
fleet with the role's own check, and the role checks them again in its
first task): a value that only Ansible's check refused would pass
unnoticed. For each option of the spec, values of another type than its
`type` (that Ansible's check cannot convert) and a value outside its
`choices` must fail the role's check (host_state.host_units, as the role's
first task runs it), naming the option. `str`, `path` and `raw` options are
left out: Ansible's check converts any value to text for them.
"""

import os

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import PLANS, VARIABLES

ROLE = os.path.join(fixture_paths.REPO, "roles", "vllm")
DEPLOY = os.path.join(fixture_paths.REPO, "playbooks", "deploy_inference.yml")
with open(os.path.join(ROLE, "meta", "argument_specs.yml")) as source:
    OPTIONS = yaml.safe_load(source)["argument_specs"]["main"]["options"]

# Values each type refuses (ansible.module_utils.common.validation: check_type_*).
REFUSED = {"int": ["many", [8000], 1.5, {"a": 1}], "bool": ["perhaps", [True], 2, {"a": 1}],
           "list": [{"a": 1}], "dict": [5, ["a"], True]}
CASES = [(name, bad) for name, option in sorted(OPTIONS.items()) for bad in REFUSED.get(option.get("type", "str"), [])]
CASES += [(name, "none-of-them") for name, option in sorted(OPTIONS.items()) if option.get("choices")]
INSTANCE = PLANS[0][2]["instances"][0]


def test_every_typed_option_and_every_choice_is_probed():
    typed = set(name for name, option in OPTIONS.items() if option.get("type", "str") in REFUSED or option.get("choices"))
    assert typed and typed == set(name for name, dummy in CASES)
    assert len(typed) > 20, sorted(typed)


@pytest.mark.parametrize("name,bad", CASES, ids=["%s=%r" % case for case in CASES])
def test_the_roles_check_refuses_what_the_argument_spec_refuses(name, bad):
    instances = bad if name == "vllm_instances" else [INSTANCE]
    with pytest.raises(ValueError, match=r"^%s\b" % name):
        host_state.host_units(instances, dict(VARIABLES, **{name: bad}))


def test_the_deploy_playbook_runs_the_role_without_ansibles_argument_check():
    with open(DEPLOY) as source:
        plays = yaml.safe_load(source)
    imports = [task["ansible.builtin.import_role"] for play in plays for task in play.get("tasks", [])
               if "ansible.builtin.import_role" in task]
    assert imports == [{"name": "gpufleet.numa.vllm", "tasks_from": "converge", "rolespec_validate": False}]
