# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A compromised host must not take over the controller, with the real
ansible-playbook on the demo fleet:

- a GPU host whose numa_facts result claims vllm_served_model_name,
  vllm_listen_host and gpufleet_plan_file changes neither the gateway's
  servers nor where the plan is kept (its python3 is replaced, which is
  what a host that is not ours can do), and an existing plan directory
  keeps its mode;
- record_topology refuses a host named "../group_vars/all" and writes
  nothing outside record_dir.
"""

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import textwrap

import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import playbook_output

REPO = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
H100_CAPTURE = REPO / "tests" / "fixtures" / "machines" / "h100_sxm_8gpu_nvswitch" / "capture.yml"


def playbook(tmp_path, name, inventory, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", GPUFLEET_REPO=str(REPO),
               GPUFLEET_STAGING=str(tmp_path / "staging"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible-tmp"))
    return subprocess.run([str(ANSIBLE_PLAYBOOK), "playbooks/%s" % name, "-i", str(inventory)] + list(args),
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False, timeout=600)


def hostile_python(path, claims):
    """A host's python3 that answers numa_facts with the h100 capture's real
    facts plus `claims` as extra facts, and runs every other module."""
    path.write_text(textwrap.dedent("""\
        #!{python}
        import json, subprocess, sys
        payload = sys.stdin.buffer.read()
        if b"numa_facts" in payload or any("AnsiballZ_numa_facts" in arg for arg in sys.argv[1:]):
            sys.path.insert(0, {collections!r})
            from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture, load_capture
            from ansible_collections.gpufleet.numa.plugins.module_utils.topology.summary import summary
            facts = facts_from_capture(load_capture({capture!r}), hostname="h100-sxm-8gpu")
            print(json.dumps({{"changed": False, "summary": summary(facts),
                              "ansible_facts": dict({claims!r}, numa_topology=facts)}}))
            sys.exit(0)
        sys.exit(subprocess.run([sys.executable] + sys.argv[1:], input=payload).returncode)
        """).format(python=sys.executable, collections=str(REPO / ".collections"), capture=str(H100_CAPTURE),
                    claims=claims))
    path.chmod(0o755)


def test_deploy_ignores_what_a_gpu_host_claims_about_itself(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventories" / "demo", inventory)
    private = tmp_path / "private"     # the host points the plan here: it must stay untouched
    kept = tmp_path / "kept"           # the controller's own plan directory, already there
    private.mkdir(mode=0o700)
    kept.mkdir(mode=0o700)
    claims = {"vllm_served_model_name": "beta", "vllm_listen_host": "10.9.9.9",
              "gpufleet_plan_file": str(private / "plan.json")}
    hostile_python(tmp_path / "python3", claims)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    first = hosts["all"]["children"]["gpu_servers"]["hosts"]["demo-h100-nvswitch"]
    del first["numa_capture"]      # gathered live, through the host's own python3
    # The host preflight replays the same machine's capture: read live, this
    # machine's cgroup allows NUMA node 0 only, and the preflight would
    # rightly refuse the H100 plan's node-1 instance (test_host_preflight.py).
    first["numa_preflight_capture"] = str(H100_CAPTURE)
    first["ansible_python_interpreter"] = str(tmp_path / "python3")
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))

    result = playbook(tmp_path, "deploy_inference.yml", inventory, "-e", "gpufleet_plan_file=%s" % (kept / "plan.json"))
    assert result.returncode == 0, playbook_output.failures(result.stdout)
    assert "dropped (a result from a host is data, never a variable)" in result.stdout

    config = (tmp_path / "staging" / "demo-gateway" / "etc" / "haproxy" / "haproxy.cfg").read_text()
    assert "10.9.9.9" not in config and "beta" not in config
    assert "server demo-h100-nvswitch-" in config and " 127.0.0.2:" in config
    assert sorted(os.listdir(str(private))) == [] and stat.S_IMODE(private.stat().st_mode) == 0o700
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    plan = json.loads((kept / "plan.json").read_text())
    h100 = [i for i in plan["instances"] if i["host"] == "demo-h100-nvswitch"]
    assert h100 and {i["served_model_name"] for i in h100} == {"llama-3.1-70b"}


def test_deploy_refuses_a_relative_plan_file_naming_it(tmp_path):
    result = playbook(tmp_path, "deploy_inference.yml", REPO / "inventories" / "demo",
                      "-e", "gpufleet_plan_file=state/plan.json", "--tags", "plan")
    assert result.returncode != 0
    assert "gpufleet_plan_file: must be an absolute path on the controller" in result.stdout
    assert "(got 'state/plan.json')" in result.stdout
    assert not (REPO / "state").exists() and not (REPO / "playbooks" / "state").exists()


def test_record_topology_refuses_a_host_named_after_group_vars(tmp_path):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    planted = "# the inventory's own group_vars\nsome_setting: 1\n"
    (inventory / "group_vars" / "all.yml").write_text(planted)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"hosts": {"gpu-a": dict(local), "../group_vars/all": dict(local)}}}))
    before = sorted(p for p in tmp_path.rglob("*") if ".ansible-tmp" not in p.parts)

    # (captures beside the inventory: a record_dir inside it is refused)
    result = playbook(tmp_path, "record_topology.yml", inventory, "-e", "record_dir=%s" % (tmp_path / "captures"))
    assert result.returncode != 0, result.stdout[-4000:]
    assert "inventory_hostname: must be a plain file name" in result.stdout
    assert "(got '../group_vars/all')" in result.stdout
    assert (inventory / "group_vars" / "all.yml").read_text() == planted
    written = sorted(p for p in tmp_path.rglob("*") if ".ansible-tmp" not in p.parts and p not in before)
    assert written == [tmp_path / "captures", tmp_path / "captures" / "gpu-a.yml"]


def test_deploy_takes_the_plan_file_from_the_controller_not_a_gpu_host(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventories" / "demo", inventory)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (inventory / "host_vars").mkdir()
    (inventory / "host_vars" / "demo-h100-nvswitch.yml").write_text("gpufleet_plan_file: %s\n" % (private / "plan.json"))
    result = playbook(tmp_path, "deploy_inference.yml", inventory, "--tags", "plan")
    assert result.returncode != 0
    assert ("demo-h100-nvswitch: gpufleet_plan_file: is read from the controller's variables (group_vars/all, "
            "host_vars/localhost or -e)") in result.stdout
    assert sorted(os.listdir(str(private))) == [] and stat.S_IMODE(private.stat().st_mode) == 0o700
