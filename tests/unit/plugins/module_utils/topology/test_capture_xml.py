# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""hwloc XML and NCCL/RCCL topology dumps are captures: replayed through
the same sysfs reading and assembly, with the limits of untrusted input."""

from __future__ import annotations

import os
import re
import shutil

import pytest
import yaml

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture_xml import XML_MAX_DEPTH

from ansible_collections.gpufleet.numa.tests.fixtures import hwloc_oracle

FIXTURES = fixture_paths.FIXTURES
XML_DIR = os.path.join(FIXTURES, "topology_xml")
# RCCL's own dumps, and the recorded machine derived from the same dump.
RCCL_DUMPS = [
    ("13_mi300x_8gpu_xgmi_2numa_8nic_rcclxml.xml", "mi300x_8gpu_xgmi"),
    ("14_mi250_8gcd_xgmi_partialmesh_1numa_rcclxml.xml", "mi250_8gcd"),
    ("15_mi50_8gpu_nps4_8numa_xgmi_rings_rcclxml.xml", "mi50_8gpu_nps4"),
]


def _expected(machine):
    with open(os.path.join(FIXTURES, "machines", machine, "expected.yml")) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("dump,machine", RCCL_DUMPS, ids=[m for dummy, m in RCCL_DUMPS])
def test_rccl_topology_dump_gives_the_machines_gpus_nodes_and_xgmi_links(dump, machine):
    facts = facts_from_capture(os.path.join(XML_DIR, dump))
    expected = _expected(machine)
    gpus = dict((g["id"], g) for g in facts["gpus"])
    assert sorted(gpus) == sorted(expected["gpus"])
    for gid, want in expected["gpus"].items():
        assert gpus[gid]["numa_node"] == want["numa_node"], gid
    # The ROCm index is the dump's own `dev` (the recorded machines made
    # their KFD order up from the bus order where RCCL's dump says otherwise).
    with open(os.path.join(XML_DIR, dump)) as handle:
        devs = dict(re.findall(r'busid="([0-9a-f:.]+)"[^>]*>\s*<gpu dev="(\d+)"', handle.read()))
    assert dict((gid, g["index"]) for gid, g in gpus.items()) == dict((b, int(d)) for b, d in devs.items())
    for a, row in expected["links"].items():
        for b, cls in row.items():
            if cls.startswith("XGMI"):
                assert facts["links"][a][b] == cls, (a, b)
    assert "capture" in facts["sources"] and "sysfs" in facts["sources"]


def test_rccl_dump_nics_carry_their_rdma_names_for_nccl_ib_hca():
    facts = facts_from_capture(os.path.join(XML_DIR, RCCL_DUMPS[0][0]))
    names = sorted(name for nic in facts["nics"] for name in nic["rdma_devices"])
    assert names == ["mlx5_%d" % i for i in range(8)]
    nic0 = [n for n in facts["nics"] if n["rdma_devices"] == ["mlx5_0"]][0]
    assert nic0["gpu_links"]["0000:0c:00.0"] == "PXB"  # one Mellanox switch, as RCCL's model says


@pytest.mark.parametrize("machine", ["dgx2_v100_16gpu_nvswitch", "mi300x_8gpu_xgmi", "power8_minsky_p100",
                                     "gh200_grace_hopper"])
def test_lstopo_export_replays_to_the_facts_of_its_tree(machine, tmp_path):
    """An `lstopo --of xml` export (made here by the real lstopo from the
    recorded tree) gives the same nodes, sockets, SMT and GPU locality as
    the tree itself."""
    lstopo = shutil.which("lstopo")
    if lstopo is None:
        pytest.fail("lstopo is not installed: install Debian's hwloc package (scripts/setup does)")
    path = os.path.join(FIXTURES, "machines", machine, "capture.yml")
    hwloc_oracle.write_tree(load_capture(path), tmp_path / "root")
    xml_path = tmp_path / "export.xml"
    xml_path.write_text(hwloc_oracle.lstopo_xml(tmp_path / "root", lstopo))
    from_tree = facts_from_capture(path)
    from_xml = facts_from_capture(str(xml_path))

    def shape(facts):
        return ([(n["id"], n["cpus"], n["memory_mb"] or 0) for n in facts["numa_nodes"]],
                [(s["id"], s["cpus"]) for s in facts["sockets"]], facts["smt_siblings"],
                [(g["id"], g["vendor"], g["numa_node"], g["local_cpus"]) for g in facts["gpus"]])

    assert shape(from_xml) == shape(from_tree)


_ENTITY_BOMB = ('<?xml version="1.0"?>\n<!DOCTYPE system [<!ENTITY a "aaaaaaaaaa">'
                '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n<system version="2">&b;</system>\n')


@pytest.mark.parametrize("text,problem", [
    (_ENTITY_BOMB, "DTD or entity"),
    ('<!DOCTYPE topology SYSTEM "http://example.invalid/x.dtd">\n<topology/>\n', "DTD or entity"),
    ("<system>" * (XML_MAX_DEPTH + 1) + "</system>" * (XML_MAX_DEPTH + 1) + "\n", "nested deeper"),
    ("<system version='2'><cpu affinity='ff'/></system>\n", "without a numaid"),
    ("<system version='2'><cpu numaid='0' affinity='zz'/></system>\n", "cpu affinity"),
    ("<topology><object type='NUMANode' os_index='0' cpuset='0xq'/></topology>\n", "NUMANode cpuset"),
    ("<html><body/></html>\n", "neither hwloc"),
    ("<system version='2'>\n", "not well-formed"),
])
def test_xml_capture_hostile_or_broken_is_refused_naming_it(text, problem):
    with pytest.raises(ValueError, match=problem):
        load_capture(text, name="pasted.xml")


def test_xml_capture_size_limit_applies():
    text = "<system version='2'>" + " " * 2000 + "</system>\n"
    with pytest.raises(ValueError, match="larger than 1000 bytes"):
        load_capture(text, max_bytes=1000)


def test_hwloc_header_doctype_is_accepted():
    text = ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n<topology version="2.0">'
            '<object type="Machine" cpuset="0x00000003"><object type="NUMANode" os_index="0" cpuset="0x00000003" '
            'local_memory="1073741824"/></object></topology>\n')
    facts = facts_from_capture(text)
    assert [(n["id"], n["cpus"], n["memory_mb"]) for n in facts["numa_nodes"]] == [(0, "0-1", 1024)]


def test_a_byte_order_mark_before_the_xml_is_read_as_xml(tmp_path):
    """The probe: an NCCL dump saved with a UTF-8 BOM was read as YAML
    ("must be a mapping, got str")."""
    source = os.path.join(XML_DIR, RCCL_DUMPS[0][0])
    with_bom = tmp_path / "dump.xml"
    with open(source, "rb") as handle:
        with_bom.write_bytes(b"\xef\xbb\xbf" + handle.read())
    assert facts_from_capture(str(with_bom))["gpus"] == facts_from_capture(source)["gpus"]


_CPU = "<system version='2'><cpu numaid=%s affinity='ff'>%s</cpu></system>\n"


@pytest.mark.parametrize("text,problem", [
    (_CPU % ("'0'", "<pci busid='zz' class='0x030000'/>"), "<pci> busid: must be a PCI bus id such as 0000:1a:00.0 "
                                                           "(got 'zz')"),
    (_CPU % ("'0'", "<pci class='0x030000'/>"), "<pci> busid: must be a PCI bus id"),
    (_CPU % ("'0'", "<pci busid='0000:01:00.0'><pci busid='1:2:3'/></pci>"), "<pci> busid: must be a PCI bus id"),
    (_CPU % ("'\u0663'", ""), "<cpu> numaid: must be an integer (got '\u0663')"),
    (_CPU % ("'\u00b2'", ""), "<cpu> numaid: must be an integer"),
    (_CPU % ("'1024'", ""), "<cpu> numaid: must be at most 1023 (got 1024)"),
    (_CPU % ("'99999999999999'", ""), "<cpu> numaid: must be at most 1023"),
    (_CPU % ("'-1'", ""), "<cpu> numaid: must be an integer"),
    ("<topology><object type='NUMANode' os_index='x' cpuset='0x3'/></topology>\n",
     "NUMANode os_index: must be an integer (got 'x')"),
    ("<topology><object type='Machine' cpuset='0x3'><object type='NUMANode' os_index='0' cpuset='0x3'/>"
     "<object type='PCIDev' pci_busid='qq' pci_type='0302 [10de:1234]'/></object></topology>\n",
     "PCIDev pci_busid: must be a PCI bus id"),
    ("<topology><object type='Machine' cpuset='0x3'><object type='Bridge' bridge_type='1-1' pci_busid='q'/>"
     "</object></topology>\n", "Bridge pci_busid: must be a PCI bus id"),
])
def test_xml_bus_ids_and_node_ids_are_checked_naming_the_capture(text, problem):
    """Each message names the capture and the attribute: a bus id said
    'not a PCI bus id' without either, a numaid isdigit() took ('\u0663',
    Arabic-Indic three) became node 3, and one past Linux's limit a node."""
    with pytest.raises(ValueError) as raised:
        load_capture(text, name="pasted.xml")
    assert str(raised.value).startswith("capture pasted.xml: " + problem), str(raised.value)


def test_the_largest_numaid_is_read():
    facts = load_capture(_CPU % ("'1023'", ""), name="pasted.xml")
    assert "/sys/devices/system/node/node1023/cpulist" in facts["files"]
