# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The published collection: `ansible-galaxy collection build` of this
checkout ships what a user runs and none of the development tree
(galaxy.yml's build_ignore), and the artifact is enough on its own: installed
offline into an empty collections path, with no ansible.cfg, its modules and
filters document themselves and its deploy playbook, called by its fully
qualified name, plans the demo fleet (whose recorded machines come from this
checkout's tests/, through GPUFLEET_REPO)."""

import os
import pathlib
import subprocess
import tarfile

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"

# Top-level paths of the checkout that must never ship.
DEVELOPMENT = ("tests", "extensions", "benchmarks", "scripts", ".ci", ".config", ".collections", ".venv", "staging",
               ".ansible-lint", "pytest.ini", "requirements-test.txt", "constraints.txt", "ansible.cfg", "changelogs/fragments",
               "changelogs/.plugin-cache.yaml", "docs/development.md", "inventories/demo")
# What a user needs: the plugins and roles, the playbooks, the execution
# environment's definition with the files it names (from the collection's root
# and from meta/), the documentation and the release notes.
REQUIRED = ("MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.md", "changelogs/changelog.yaml",
            "requirements.txt", "bindep.txt", "meta/runtime.yml", "meta/execution-environment.yml",
            "meta/requirements.txt", "meta/bindep.txt", "plugins/modules/numa_facts.py",
            "plugins/filter/placement.py", "plugins/filter/fleet_plan.yml", "roles/vllm/tasks/main.yml", "roles/gateway/tasks/main.yml",
            "playbooks/deploy_inference.yml", "docs/deploy.md", "inventories/hetzner/hosts.yml")


def _readme_demo_table():
    """The lines of the plan table the README shows for the demo (the code block after "then prints:")."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text[text.index("then prints:\n\n```\n") + len("then prints:\n\n```\n"):]
    return block[:block.index("```")].splitlines()


def _run(args, env, cwd, timeout=300):
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False, timeout=timeout)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """(the built tarball, an environment whose only collection is the tarball installed, the work folder)."""
    work = tmp_path_factory.mktemp("artifact")
    (work / "empty.cfg").write_text("")
    env = dict(os.environ, ANSIBLE_CONFIG=str(work / "empty.cfg"), ANSIBLE_HOME=str(work / "home"),
               ANSIBLE_COLLECTIONS_PATH=str(work / "installed"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(work / "tmp"))
    built = _run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", work / "build", REPO],
                 env, work)
    assert built.returncode == 0, built.stdout
    tarballs = list((work / "build").glob("gpufleet-numa-*.tar.gz"))
    assert len(tarballs) == 1, tarballs
    installed = _run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", work / "installed",
                      tarballs[0]], env, work)
    assert installed.returncode == 0, installed.stdout
    return tarballs[0], env, work


@pytest.fixture(scope="module")
def members(artifact):
    with tarfile.open(artifact[0]) as tar:
        return {member.name.lstrip("./").rstrip("/"): member for member in tar.getmembers()}


def test_no_development_tree_ships(members):
    leaked = sorted(name for name in members
                    if any(name == path or name.startswith(path + "/") for path in DEVELOPMENT)
                    or "__pycache__" in name or name.endswith(".pyc"))
    assert not leaked, leaked[:20]


def test_what_a_user_runs_ships(members):
    missing = [name for name in REQUIRED if name not in members or not members[name].isfile()]
    assert not missing, missing


def test_every_plugin_and_role_file_ships(members):
    """Nothing under plugins/, roles/ or playbooks/ that git tracks is left out."""
    tracked = subprocess.run(["git", "ls-files", "plugins", "roles", "playbooks", "meta"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    missing = [name for name in tracked if name not in members]
    assert not missing, missing[:20]


def test_execution_environment_files_ship(members):
    with open(REPO / "meta" / "execution-environment.yml") as handle:
        dependencies = yaml.safe_load(handle)["dependencies"]
    for key in ("python", "system"):
        # Read from the collection's root when an image installs the collection, from meta/ by ansible-builder -f.
        assert dependencies[key] in members and "meta/" + dependencies[key] in members, key


def test_the_agents_module_ships_beside_its_load_reader(artifact):
    """roles/vllm/files/gpufleet_agent.py links to deploy/gateway/agent.py
    (the load reader imports it on the host): installed, it reads as that
    module does."""
    tarball, env, work = artifact
    installed = work / "installed" / "ansible_collections" / "gpufleet" / "numa"
    shipped = (installed / "roles" / "vllm" / "files" / "gpufleet_agent.py").read_text()
    assert shipped == (REPO / "plugins" / "module_utils" / "deploy" / "gateway" / "agent.py").read_text()
    assert "def engine_weight(" in shipped


@pytest.mark.parametrize("kind, name", [("module", "numa_facts"), ("filter", "fleet_plan"),
                                        ("filter", "plan_table"), ("role", "vllm")])
def test_installed_documents_itself(artifact, kind, name):
    tarball, env, work = artifact
    shown = _run([BIN / "ansible-doc", "-t", kind, "gpufleet.numa." + name], env, work)
    assert shown.returncode == 0, shown.stdout
    assert "[WARNING]" not in shown.stdout, shown.stdout
    if kind != "role":
        assert str(work / "installed" / "ansible_collections" / "gpufleet" / "numa") in shown.stdout, shown.stdout


def test_installed_playbook_plans_the_demo(artifact):
    """The installed deploy playbook, by its FQCN, with --tags plan: the proposal's table, nothing deployed."""
    tarball, env, work = artifact
    env = dict(env, GPUFLEET_REPO=str(REPO), GPUFLEET_STAGING=str(work / "staging"))
    syntax = _run([BIN / "ansible-playbook", "--syntax-check", "gpufleet.numa.deploy_inference", "-i",
                   REPO / "inventories" / "hetzner"], env, work)
    assert syntax.returncode == 0, syntax.stdout
    planned = _run([BIN / "ansible-playbook", "gpufleet.numa.deploy_inference", "-i", REPO / "inventories" / "demo",
                    "--tags", "plan"], env, work, timeout=600)
    assert planned.returncode == 0, planned.stdout[-8000:]
    assert "proposal (not deployed, not recorded" in planned.stdout, planned.stdout[-8000:]
    # The fleet's variable check says it passed (an ok result, not a skipped task).
    assert '"msg": "all passed: every variable of 3 GPU server(s) and 1 gateway(s)"' in planned.stdout
    assert "gpus 24, gpus unused 0, gpus used 24, hosts 3, instances 6" in planned.stdout, planned.stdout[-8000:]
    # The README's table of the demo is what the playbook prints.
    lines = _readme_demo_table()
    assert lines[0] == "recorded plan (what runs now):" and lines[1].startswith("HOST "), lines
    missing = [line for line in lines[1:] if '"%s"' % line not in planned.stdout]
    assert not missing, (missing, planned.stdout[-8000:])
    assert not list((work / "staging").glob("*/etc/systemd/system/*.service"))
