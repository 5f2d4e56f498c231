# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Topology export: golden gres.conf and NCCL files for recorded machines;
the NCCL file against RCCL's own dumps of the same machines (by structure);
Cores= against hwloc's logical core numbering and Slurm's own parser
(`slurmd -G`, hwloc reading the recorded machine). slurmd or lstopo
missing is a failure (scripts/setup installs them), not a skip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import export as topology_export
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpumask
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture

from ansible_collections.gpufleet.numa.tests.fixtures import hwloc_oracle

FIXTURES = fixture_paths.FIXTURES
GOLDEN = os.path.join(FIXTURES, "topology_export")
GOLDEN_MACHINES = ["mi300x_8gpu_xgmi", "power8_minsky_p100", "dgx2_v100_16gpu_nvswitch", "azure_ndv4_like",
                   "mi50_8gpu_nps4"]
RCCL_DUMPS = [
    ("13_mi300x_8gpu_xgmi_2numa_8nic_rcclxml.xml", "mi300x_8gpu_xgmi"),
    ("14_mi250_8gcd_xgmi_partialmesh_1numa_rcclxml.xml", "mi250_8gcd"),
    ("15_mi50_8gpu_nps4_8numa_xgmi_rings_rcclxml.xml", "mi50_8gpu_nps4"),
]
# Machines whose recorded tree has the per-CPU topology hwloc and slurmd need.
CORE_MACHINES = ["mi300x_8gpu_xgmi", "mi50_8gpu_nps4", "mi250_8gcd", "power8_minsky_p100", "gh200_grace_hopper",
                 "dgx2_v100_16gpu_nvswitch"]


def _facts(machine):
    return facts_from_capture(os.path.join(FIXTURES, "machines", machine, "capture.yml"))


def _tool(name):
    path = shutil.which(name) or (os.path.exists("/usr/sbin/" + name) and "/usr/sbin/" + name)
    if not path:
        pytest.fail("%s is not installed (scripts/setup installs it)" % name)
    return path


@pytest.mark.parametrize("machine", GOLDEN_MACHINES)
@pytest.mark.parametrize("kind", ["gres.conf", "nccl-topo.xml"])
def test_export_recorded_machine_matches_golden(machine, kind):
    make = topology_export.gres_conf if kind == "gres.conf" else topology_export.nccl_topology_xml
    got = make(_facts(machine), machine)["text"]
    path = os.path.join(GOLDEN, "%s.%s" % (machine, kind))
    if os.environ.get("GPUFLEET_WRITE_GOLDEN"):
        with open(path, "w") as handle:
            handle.write(got)
    with open(path) as handle:
        assert got == handle.read()


def _shape(root):
    """What NCCL takes from a topology file, per <cpu>: its CPUs, the GPU
    bus ids with their class and XGMI links, the RDMA names, and which
    devices share the cpu's top-level PCI subtree (one switch)."""
    out = {}
    for cpu in root.findall("cpu"):
        gpus, nets, groups = {}, set(), set()
        for top in cpu.findall("pci"):
            members = set()
            for pci in top.iter("pci"):
                for gpu in pci.findall("gpu"):
                    gpus[pci.get("busid")] = (pci.get("class"), sorted(
                        (x.get("target"), x.get("count"), x.get("tclass")) for x in gpu.findall("xgmi")))
                    members.add(pci.get("busid"))
                for net in (n for nic in pci.findall("nic") for n in nic.findall("net")):
                    nets.add(net.get("name"))
                    members.add(pci.get("busid"))
            if members:
                groups.add(frozenset(members))
        out[int(cpu.get("numaid"))] = {"cpus": sorted(parse_cpumask(cpu.get("affinity"))), "gpus": gpus,
                                       "nets": nets, "groups": groups}
    return out


def _read_dump(path):
    with open(path) as handle:
        return ET.fromstring(re.sub(r"<!--.*?-->", "", handle.read(), flags=re.S))


@pytest.mark.parametrize("dump,machine", RCCL_DUMPS, ids=[m for dummy, m in RCCL_DUMPS])
def test_nccl_xml_has_the_structure_of_rccls_own_dump(dump, machine):
    ours = ET.fromstring(topology_export.nccl_topology_xml(_facts(machine), machine)["text"].split("-->\n", 1)[1])
    theirs = _read_dump(os.path.join(FIXTURES, "topology_xml", dump))
    assert ours.tag == theirs.tag == "system"
    want, got = _shape(theirs), _shape(ours)
    # RCCL dumps a <cpu> per node it found devices on; compare those.
    assert sorted(got) == sorted(want)
    for node in want:
        for key in ("cpus", "gpus", "nets"):
            assert got[node][key] == want[node][key], (node, key)
        # The devices each switch of the dump holds share a bridge in ours.
        for group in want[node]["groups"]:
            assert any(group <= mine for mine in got[node]["groups"]), (node, sorted(group))


@pytest.mark.parametrize("machine", ["mi300x_8gpu_xgmi", "power8_minsky_p100", "mi50_8gpu_nps4"])
def test_nccl_xml_read_back_gives_the_gpus_and_nodes(machine):
    """The written file is a capture the collection reads (topology_xml):
    the same GPUs on the same NUMA nodes."""
    facts = _facts(machine)
    again = facts_from_capture(topology_export.nccl_topology_xml(facts, machine)["text"])
    assert [(g["pci_bus_id"], g["numa_node"]) for g in again["gpus"]] == [
        (g["pci_bus_id"], g["numa_node"]) for g in facts["gpus"]]


def _hwloc_xml(machine, where):
    capture = load_capture(os.path.join(FIXTURES, "machines", machine, "capture.yml"))
    hwloc_oracle.write_tree(capture, where / "root")
    return hwloc_oracle.lstopo_xml(where / "root", _tool("lstopo"))


@pytest.mark.parametrize("machine", CORE_MACHINES)
def test_logical_cores_are_hwlocs_core_logical_index(machine, tmp_path):
    xml = ET.fromstring(_hwloc_xml(machine, tmp_path).split("\n", 2)[2])
    hwloc = {}
    for index, core in enumerate(o for o in xml.iter("object") if o.get("type") == "Core"):
        for pu in core.iter("object"):
            if pu.get("type") == "PU":
                hwloc[int(pu.get("os_index"))] = index
    assert topology_export.logical_cores(_facts(machine)) == hwloc


def _slurmd_check(gres_text, hwloc_xml, tmp_path):
    """slurmd -G on gres_text, hwloc reading the recorded machine: (rc, output).
    Device files become symlinks to /dev/null (slurmd wants character devices)."""
    slurmd = _tool("slurmd")
    (tmp_path / "spool").mkdir()
    (tmp_path / "dev").mkdir()
    (tmp_path / "hwloc.xml").write_text(hwloc_xml)
    lines = []
    for line in gres_text.splitlines():
        for word in line.split():
            if word.startswith("File=/dev/"):
                link = tmp_path / "dev" / os.path.basename(word[len("File="):])
                os.symlink("/dev/null", str(link))
                line = line.replace(word, "File=%s" % link)
        lines.append(line)
    (tmp_path / "gres.conf").write_text("\n".join(lines) + "\n")
    env = dict(os.environ, HWLOC_XMLFILE=str(tmp_path / "hwloc.xml"), HWLOC_THISSYSTEM="1",
               SLURM_CONF=str(tmp_path / "slurm.conf"), LC_ALL="C")
    conf = "ClusterName=check\nSlurmctldHost=localhost\nSlurmdSpoolDir=%s\nGresTypes=gpu\n" % (tmp_path / "spool")
    (tmp_path / "slurm.conf").write_text(conf)
    node = subprocess.run([slurmd, "-C"], check=False, env=env, capture_output=True, text=True, timeout=60).stdout.splitlines()[0]
    count = sum(1 for line in lines if line.startswith("Name=gpu"))
    (tmp_path / "slurm.conf").write_text(conf + "%s Gres=gpu:%d\n" % (node, count))
    done = subprocess.run([slurmd, "-G", "-N", node.split()[0].split("=")[1]], check=False, env=env, capture_output=True,
                          text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("machine", CORE_MACHINES)
def test_gres_conf_is_accepted_by_slurmds_own_parser(machine, tmp_path):
    text = topology_export.gres_conf(_facts(machine), machine)["text"]
    rc, output = _slurmd_check(text, _hwloc_xml(machine, tmp_path), tmp_path)
    assert rc == 0 and "error" not in output, output
    parsed = [line.split("Gres ", 1)[1] for line in output.splitlines() if "Gres Name=gpu" in line]
    ours = [line for line in text.splitlines() if line.startswith("Name=gpu")]
    assert len(parsed) == len(ours)
    for theirs, mine in zip(parsed, ours):
        cores = [w for w in mine.split() if w.startswith("Cores=")]
        assert cores and cores[0] + " " in theirs + " ", (theirs, mine)


def test_slurmd_refuses_os_cpu_ids_as_cores(tmp_path):
    """The check has teeth: OS CPU ids (node 1 of the MI300X box is CPUs
    56-111,168-223) are not Slurm core indices, and slurmd says so."""
    machine = "mi300x_8gpu_xgmi"
    text = topology_export.gres_conf(_facts(machine), machine)["text"].replace("Cores=56-111", "Cores=56-111,168-223")
    rc, output = _slurmd_check(text, _hwloc_xml(machine, tmp_path), tmp_path)
    assert "Invalid GRES data for gpu, Cores=56-111,168-223" in output


def test_gres_conf_gpu_without_numa_node_has_no_cores_and_a_warning():
    facts = _facts("power8_minsky_p100")
    facts["gpus"][1]["numa_node"] = None
    result = topology_export.gres_conf(facts, "gpu-a")
    lines = [line for line in result["text"].splitlines() if line.startswith("Name=gpu")]
    assert "Cores=" not in lines[1] and "Cores=0-3" in lines[0]
    assert result["warnings"] == ["gpu-a: GPU 0003:01:00.0 has no known NUMA node: its line has no Cores="]
    assert "# warning: gpu-a: GPU 0003:01:00.0" in result["text"]


# (change, function, field, reason): the facts lack what the format needs
# (Unexportable, with its reason), or are not numa_facts facts (reason None).
UNEXPORTABLE = [
    (lambda f: f["gpus"][0].update(index=None), "gres_conf", "gpus[0].index",
     "GPU 0002:01:00.0 has no index (it names the device file)"),
    (lambda f: f["gpus"][0].update(index="0"), "gres_conf", "gpus[0].index", None),
    (lambda f: f["gpus"][0].update(vendor="intel"), "gres_conf", "gpus[0].vendor",
     "GPU 0 is neither NVIDIA nor AMD (vendor 'intel')"),
    (lambda f: f.update(schema_version=2), "gres_conf", "schema_version", None),
    (lambda f: f["smt_siblings"].append("x"), "gres_conf", "smt_siblings[8]", None),
    (lambda f: f["gpus"][1].update(pci_bus_id=None), "nccl_topology_xml", "gpus[1].pci_bus_id",
     "GPU 1 has no PCI bus id"),
    (lambda f: f["gpus"][0].update(numa_node=None), "nccl_topology_xml", "gpus[0].numa_node",
     "GPU 0 has no known NUMA node"),
    (lambda f: f["gpus"][0].update(numa_node="0"), "nccl_topology_xml", "gpus[0].numa_node", None),
    (lambda f: f["gpus"][0].update(vendor="amd", pci_class=None), "nccl_topology_xml", "gpus[0].pci_class",
     "GPU 0 has no PCI class"),
    (lambda f: f["numa_nodes"][0].update(cpus=""), "nccl_topology_xml", "numa_nodes",
     "NUMA node 0, where a GPU or NIC sits, has no known CPUs"),
    (lambda f: f["numa_nodes"].pop(0), "nccl_topology_xml", "numa_nodes", None),
    (lambda f: f["numa_nodes"][0].update(cpus="0-x"), "nccl_topology_xml", "numa_nodes[0].cpus", None),
]


@pytest.mark.parametrize("change,function,field,reason", UNEXPORTABLE)
def test_export_unexportable_facts_fail_naming_host_and_field(change, function, field, reason):
    facts = _facts("power8_minsky_p100")
    change(facts)
    with pytest.raises(ValueError, match=r"^gpu-a: numa_topology\.%s" % field.replace("[", r"\[").replace("]", r"\]")) as caught:
        getattr(topology_export, function)(facts, "gpu-a")
    assert isinstance(caught.value, topology_export.Unexportable) == (reason is not None)
    assert getattr(caught.value, "reason", None) == reason


@pytest.mark.parametrize("change,function,field,reason", UNEXPORTABLE)
def test_host_exports_skips_the_format_the_facts_lack_and_writes_the_other(change, function, field, reason):
    facts = _facts("power8_minsky_p100")
    change(facts)
    if reason is None:
        with pytest.raises(ValueError, match=r"^gpu-a: numa_topology") as caught:
            topology_export.host_exports(facts, "gpu-a")
        assert not isinstance(caught.value, topology_export.Unexportable)
        return
    result = topology_export.host_exports(facts, "gpu-a")
    skipped = "gres.conf" if function == "gres_conf" else "nccl-topo.xml"
    written = "nccl-topo.xml" if function == "gres_conf" else "gres.conf"
    assert result["skipped"] == ["gpu-a: %s not written: %s" % (skipped, reason)]
    assert result["files"][skipped] is None
    make = topology_export.nccl_topology_xml if function == "gres_conf" else topology_export.gres_conf
    assert result["files"][written] == make(facts, "gpu-a")["text"]


@pytest.mark.parametrize("machine,skipped", [
    # nvidia-smi pastes: no bus ids
    ("h100_sxm_8gpu_nvswitch", ["gpu-a: nccl-topo.xml not written: GPU 0 has no PCI bus id"]),
    ("rtxa6000_8gpu_nvlink_pairs", ["gpu-a: nccl-topo.xml not written: GPU 0 has no PCI bus id"]),
    # a paste whose NUMA column says N/A
    ("rtx3090_2gpu_threadripper_numa_na", ["gpu-a: nccl-topo.xml not written: GPU 0 has no known NUMA node"]),
    # sysfs without the ROCm index
    ("amd_4gpu_pcie_4numa", ["gpu-a: gres.conf not written: GPU 0000:03:00.0 has no index (it names the device file)"]),
    ("mi300x_8gpu_xgmi", []),
])
def test_host_exports_of_recorded_machines(machine, skipped):
    """Recorded hosts that lack a bus id, a NUMA node or an index: the file
    that needs it is skipped with one line, the other is written."""
    facts = _facts(machine)
    result = topology_export.host_exports(facts, "gpu-a")
    assert result["skipped"] == skipped
    assert sorted(result["files"]) == ["gres.conf", "nccl-topo.xml"]
    for kind, make in (("gres.conf", topology_export.gres_conf), ("nccl-topo.xml", topology_export.nccl_topology_xml)):
        if any(" %s not written" % kind in line for line in skipped):
            assert result["files"][kind] is None
        else:
            assert result["files"][kind] == make(facts, "gpu-a")["text"]


def test_nccl_xml_hostile_names_are_escaped():
    facts = _facts("mi300x_8gpu_xgmi")
    facts["nics"][0]["rdma_devices"] = ['mlx5_0"/><evil a="']
    text = topology_export.nccl_topology_xml(facts, "gpu-a -->\n<x>")["text"]
    root = ET.fromstring(text.split("-->\n", 1)[1])
    assert [n.get("name") for n in root.iter("net")][0] == 'mlx5_0"/><evil a="'
    assert text.count("-->") == 1  # the name cannot end the header comment


@pytest.mark.parametrize("nic_id", ["x---><evil/><!--", "x--><evil/><!--", "a--b", "trailing-", "-", "\x01--\ufffe"])
def test_nccl_xml_warning_comments_hold_any_nic_id(nic_id):
    """A NIC left out is named in a warning comment: no '--' of its id
    (nor '--->', which a '--' -> '- -' replacement left as '- -->') may end
    or break that comment, and the whole file stays one XML document."""
    facts = _facts("mi300x_8gpu_xgmi")
    facts["nics"][0].update(id=nic_id, numa_node=None)
    text = topology_export.nccl_topology_xml(facts, "gpu-a")["text"]
    comments = re.findall(r"<!--(.*?)-->", text, flags=re.S)
    assert len(comments) == 2 and "is left out" in comments[1], comments
    assert all("--" not in body and not body.endswith("-") for body in comments), comments
    root = ET.fromstring(text)  # comments before the root are part of the document
    assert root.tag == "system" and not list(root.iter("evil"))
