# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""playbooks/export_topology.yml on a copy of the demo fleet: files land in
exports/ beside the plan record (<inventory directory>.gpufleet/, never in
the inventory), check mode writes nothing, a second run changes nothing, a
recorded host without PCI bus ids gets its gres.conf and a line saying why
its NCCL file is not written, and a host name that is not a plain file name
is refused."""

import os
import pathlib
import re
import shutil
import subprocess

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
# The demo hosts replay nvidia-smi pastes (no bus ids: no NCCL file can be
# written); here they replay recorded sysfs trees instead, but for
# demo-h100-nvswitch in test_export_playbook_skips_what_a_host_lacks_and_writes_the_rest.
CAPTURES = {"demo-h100-nvswitch": "dgx2_v100_16gpu_nvswitch", "demo-rtx4090-pcie": "mi300x_8gpu_xgmi",
            "demo-a6000-nvlink": "power8_minsky_p100"}


def _inventory(tmp_path, hosts=None, captures=None):
    inventory = tmp_path / "fleet" / "inventory"
    shutil.copytree(REPO / "inventories" / "demo", inventory)
    data = yaml.safe_load((inventory / "hosts.yml").read_text())
    servers = data["all"]["children"]["gpu_servers"]["hosts"]
    for name, machine in (CAPTURES if captures is None else captures).items():
        servers[name]["numa_capture"] = "{{ gpufleet_fixtures }}/%s/capture.yml" % machine
    for name in hosts or []:
        servers[name] = {"ansible_host": "127.0.0.9", "numa_capture": servers["demo-a6000-nvlink"]["numa_capture"]}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(data))
    return inventory


def _run(inventory, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", GPUFLEET_REPO=str(REPO),
               ANSIBLE_LOCAL_TEMP=str(inventory.parent / ".ansible-tmp"))
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "playbooks/export_topology.yml", "-i", str(inventory)] + list(extra), check=False,
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return done.returncode, done.stdout


def _changed(output):
    return sum(int(n) for n in re.findall(r"changed=(\d+)", output.split("PLAY RECAP", 1)[1]))


def test_export_playbook_writes_beside_the_plan_record_then_changes_nothing(tmp_path):
    inventory = _inventory(tmp_path)
    exports = inventory.parent / "inventory.gpufleet" / "exports"
    rc, output = _run(inventory, "--check")
    assert rc == 0, output[-6000:]
    assert not exports.exists()
    rc, output = _run(inventory)
    assert rc == 0, output[-6000:]
    names = sorted(p.name for p in exports.iterdir())
    assert names == sorted("%s.%s" % (h, k) for h in CAPTURES for k in ("gres.conf", "nccl-topo.xml"))
    assert not list(inventory.glob("**/*.gres.conf")) and not (inventory / "exports").exists()
    assert not (inventory.parent / "exports").exists()
    assert "Cores=56-111" in (exports / "demo-rtx4090-pcie.gres.conf").read_text()
    assert '<cpu numaid="1"' in (exports / "demo-a6000-nvlink.nccl-topo.xml").read_text()
    rc, output = _run(inventory)
    assert rc == 0 and _changed(output) == 0, output[-6000:]


def test_export_playbook_refuses_a_host_name_that_is_no_plain_file_name(tmp_path):
    inventory = _inventory(tmp_path, hosts=["..hidden"])
    rc, output = _run(inventory, "--limit", "..hidden")
    assert rc != 0 and "is not a plain file name" in output, output[-4000:]
    assert not (inventory.parent / "inventory.gpufleet").exists()


def test_export_playbook_skips_what_a_host_lacks_and_writes_the_rest(tmp_path):
    """demo-h100-nvswitch replays its nvidia-smi paste: no PCI bus ids, so no
    NCCL file, one line saying so, and its gres.conf; the other hosts get
    both files; the run succeeds, and the second one changes nothing."""
    inventory = _inventory(tmp_path, captures=dict((h, m) for h, m in CAPTURES.items() if h != "demo-h100-nvswitch"))
    exports = inventory.parent / "inventory.gpufleet" / "exports"
    rc, output = _run(inventory)
    assert rc == 0, output[-6000:]
    names = sorted(p.name for p in exports.iterdir())
    assert names == sorted(["demo-h100-nvswitch.gres.conf"] + ["%s.%s" % (h, k) for h in CAPTURES if h != "demo-h100-nvswitch"
                                                               for k in ("gres.conf", "nccl-topo.xml")])
    assert output.count("demo-h100-nvswitch: nccl-topo.xml not written: GPU 0 has no PCI bus id") == 1, output[-6000:]
    assert output.count("not written") == 1, output[-6000:]
    assert "File=/dev/nvidia7" in (exports / "demo-h100-nvswitch.gres.conf").read_text()
    rc, output = _run(inventory)
    assert rc == 0 and _changed(output) == 0, output[-6000:]


def test_export_dir_overrides_the_default(tmp_path):
    inventory = _inventory(tmp_path, hosts=[], captures={})
    rc, output = _run(inventory, "--limit", "demo-rtx4090-pcie", "-e", "export_dir=%s" % (tmp_path / "elsewhere"))
    assert rc == 0, output[-6000:]
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["demo-rtx4090-pcie.gres.conf"]
    assert "demo-rtx4090-pcie: nccl-topo.xml not written: GPU 0 has no PCI bus id" in output
    assert not (inventory.parent / "inventory.gpufleet").exists()
