# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Hostile input: captures from strangers and root= trees that hold
anything. Every probe ends in a clear ValueError or warning that names the
file and the problem: never a traceback, a hang, a dead worker, or a file's
content quoted whole."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import sysfs_pci
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import facts_from_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.gather import gather, gather_live
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import MAX_CPUS, parse_cpulist, parse_cpumask
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi_topo import TOPO_COMMAND
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture import YAML_ALIAS_BUDGET, YAML_MAX_DEPTH, load_capture
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.live import LiveReader
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import CAPTURE_MAX_BYTES, CaptureReader

from ansible_collections.gpufleet.numa.tests.fixtures.sysfs_builder import SysfsBuilder, write_tree

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
NVIDIA = "0x10de"
SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# What must never show up: a line long enough that a cut quote cannot hold it.
SECRET = "root:x:0:0:root:/root:/bin/bash " + "s3cr3t-" * 20
NODE0_CPULIST = "/sys/devices/system/node/node0/cpulist"

TOPO_TEXT = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV4\t0-1,4-5\t0\t\tN/A\n"
    "GPU1\tNV4\t X \t2-3,6-7\t1\t\tN/A\n"
    "\nLegend:\n\n  X    = Self\n"
)


def alias_bomb(levels=9, width=9):
    """The billion laughs, 549 bytes at levels=width=9."""
    lines = ["capture_version: 1", "notes:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        name, prev = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append("  %s: &%s [%s]" % (name, name, ",".join(["*" + prev] * width)))
    return "\n".join(lines) + "\n"


def two_gpu_host():
    b = SysfsBuilder()
    b.node(0, "0-1", memory_kb=2 << 20, distances=[10, 21])
    b.node(1, "2-3", memory_kb=2 << 20, distances=[21, 10])
    for cpu in range(4):
        b.cpu(cpu, cpu // 2, str(cpu))
    b.online("0-3")
    b.device("0000:01:00.0", ["pci0000:00", "0000:00:01.0"], "0x030200", NVIDIA, numa_node="0", local_cpus="0-1")
    b.device("0000:81:00.0", ["pci0000:80", "0000:80:01.0"], "0x030200", NVIDIA, numa_node="1", local_cpus="2-3")
    return b


def load_error(tmp_path, text, name="probe.yml", **kwargs):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    with pytest.raises(ValueError) as err:
        load_capture(str(path), **kwargs)
    message = str(err.value)
    assert str(path) in message, message
    return message


# --------------------------------------------------------------------------
# captures


@pytest.mark.parametrize("text, problem", [
    (alias_bomb(), "aliases expand to more than %d extra nodes" % YAML_ALIAS_BUDGET),
    ("capture_version: 1\nnotes: &x [*x]\n", "recursive alias"),
    ("capture_version: 1\nnotes: " + "[" * 100000 + "]" * 100000 + "\n", "nested more than %d levels" % YAML_MAX_DEPTH),
    ("capture_version: 1\nnotes:\n" + "".join("  " * i + "- \n" for i in range(1, 2000)),
     "nested more than %d levels" % YAML_MAX_DEPTH),
    ("capture_version: true\n", "capture_version True; this collection reads version 1"),
    ("capture_version: 1.0\n", "capture_version 1.0;"),
    ("capture_version: '1'\n", "capture_version '1';"),
    ("capture_version: 1\n  bad: [\n", "is not valid YAML or JSON: line 2, column 6: mapping values are not allowed"),
    (b"capture_version: 1\nhostname: \xff\xfe\n", "is not UTF-8 text"),
    ("capture_version: 1\n%s: x\n" % ("k" * 500), "has unknown keys"),
], ids=["alias-bomb", "recursive-alias", "flow-nesting-100000", "block-nesting", "bool-version",
        "float-version", "string-version", "yaml-error-line-column", "not-utf8", "long-unknown-key"])
def test_load_capture_probe_is_a_clear_error(tmp_path, text, problem):
    message = load_error(tmp_path, text)
    assert problem in message
    assert len(message) < 600, message  # a cut quote, not the input


def test_load_capture_bigger_than_cap_is_refused_and_cap_is_overridable(tmp_path):
    text = "capture_version: 1\nnotes: %s\n" % ("x" * 200)
    assert "larger than 100 bytes (capture_max_bytes)" in load_error(tmp_path, text, max_bytes=100)
    assert load_capture(str(tmp_path / "probe.yml"), max_bytes=1000)["capture_version"] == 1
    big = "capture_version: 1\nnotes: %s\n" % ("x" * CAPTURE_MAX_BYTES)
    assert "larger than %d bytes" % CAPTURE_MAX_BYTES in load_error(tmp_path, big, name="big.yml")


def test_load_capture_largest_fixture_is_well_below_the_cap():
    sizes = [os.path.getsize(os.path.join(MACHINES, m, "capture.yml")) for m in os.listdir(MACHINES)
             if os.path.isfile(os.path.join(MACHINES, m, "capture.yml"))]
    assert max(sizes) * 10 < CAPTURE_MAX_BYTES


def test_load_capture_device_file_is_refused_without_reading():
    with pytest.raises(ValueError, match=r"capture /dev/zero cannot be read: it is a character device"):
        load_capture("/dev/zero")


def test_load_capture_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "capture.yml"
    os.mkfifo(str(fifo))
    with pytest.raises(ValueError, match=r"capture.yml cannot be read: it is a FIFO, not a regular file"):
        load_capture(str(fifo))


def test_load_capture_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"cannot be read: it is a directory"):
        load_capture(str(tmp_path))


def test_load_capture_pasted_matrix_with_tabs_in_block_scalar_is_accepted(tmp_path):
    # libyaml refuses tabs in a block scalar; the YAML spec (and the pure
    # Python loader) allow them, and this is how people paste nvidia-smi.
    body = "".join("    " + line + "\n" for line in TOPO_TEXT.splitlines())
    path = tmp_path / "pasted.yml"
    path.write_text("capture_version: 1\nhostname: pasted\ncommands:\n  nvidia-smi topo -m: |\n" + body)
    facts = facts_from_capture(str(path))
    assert facts["hostname"] == "pasted"
    assert facts["links"] == {"GPU0": {"GPU1": "NV4"}, "GPU1": {"GPU0": "NV4"}}


def test_load_capture_plain_topo_text_file_is_a_capture_of_that_command(tmp_path):
    path = tmp_path / "host.txt"
    path.write_text(TOPO_TEXT)
    data = load_capture(str(path))
    assert data["commands"] == {TOPO_COMMAND: TOPO_TEXT}
    facts = facts_from_capture(str(path))
    assert [(g["id"], g["numa_node"]) for g in facts["gpus"]] == [("GPU0", 0), ("GPU1", 1)]
    assert facts["sources"] == ["nvidia-smi", "capture"]


def test_load_capture_text_that_is_neither_yaml_nor_a_matrix_is_an_error(tmp_path):
    assert "is not valid YAML or JSON: line 1" in load_error(tmp_path, "\tGPU0 stuff\n  x: [\n")


@pytest.mark.parametrize("cpulist", ["0-99999999", "0-65536", "99999999999999999999999", "1-" + "9" * 5000])
def test_capture_huge_cpulist_is_a_warning_naming_the_file(cpulist):
    capture = two_gpu_host().capture()
    capture["files"][NODE0_CPULIST] = cpulist + "\n"
    facts = facts_from_capture(capture)
    warning = [w for w in facts["warnings"] if w.startswith(NODE0_CPULIST)]
    assert warning and "beyond the limit of %d CPUs" % MAX_CPUS in warning[0] or "bad element" in warning[0]
    assert all(len(w) < 400 for w in facts["warnings"])
    assert facts["numa_nodes"][0]["cpus"] is None


def test_parse_cpulist_and_cpumask_reject_more_than_max_cpus():
    assert len(parse_cpulist("0-%d" % (MAX_CPUS - 1))) == MAX_CPUS
    with pytest.raises(ValueError, match="CPU 99999999 in '0-99999999' is beyond the limit of 65536 CPUs"):
        parse_cpulist("0-99999999")
    with pytest.raises(ValueError, match="more than the limit of 65536 CPUs"):
        parse_cpumask(",".join(["ffffffff"] * (MAX_CPUS // 32 + 1)))
    with pytest.raises(ValueError, match="32-bit hex words"):
        parse_cpumask("f" * 100000)


def test_capture_1000_gpu_matrix_reads_every_link():
    count = 1000
    names = ["GPU%d" % i for i in range(count)]
    lines = ["\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity"])]
    for a in range(count):
        lines.append("GPU%d\t" % a + "\t".join("X" if a == b else "NV18" for b in range(count)) + "\t0-7\t0")
    facts = facts_from_capture({"capture_version": 1, "commands": {TOPO_COMMAND: "\n".join(lines)}})
    assert len(facts["gpus"]) == count
    assert len(facts["links"]["GPU999"]) == count - 1 and facts["links"]["GPU0"]["GPU999"] == "NV18"


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=20)
_SECTIONS = st.fixed_dictionaries({}, optional={
    "capture_version": st.one_of(st.just(1), _SCALARS),
    "hostname": _VALUES,
    "files": st.one_of(_VALUES, st.dictionaries(st.sampled_from([
        NODE0_CPULIST, "/sys/devices/system/cpu/online", "/sys/devices/system/node/node0/distance",
        "/sys/bus/pci/devices/0000:01:00.0/class", "/sys/bus/pci/devices/0000:01:00.0/numa_node",
        "/sys/bus/pci/devices/0000:01:00.0/vendor"]), st.one_of(st.text(max_size=40), st.integers()))),
    "symlinks": _VALUES,
    "directories": _VALUES,
    "commands": st.one_of(_VALUES, st.dictionaries(st.just(TOPO_COMMAND), st.text(max_size=200))),
    "nvml": _VALUES,
    "junk": _VALUES,
})


@SOME
@given(_SECTIONS, st.sampled_from(["yaml", "json"]))
@example({"capture_version": True}, "yaml")
@example({"capture_version": 1, "files": {NODE0_CPULIST: "0-99999999"}}, "json")
def test_any_capture_gives_facts_or_a_value_error_naming_it(data, form):
    text = yaml.safe_dump(data) if form == "yaml" else json.dumps(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "random.yml")
        with open(path, "w") as handle:
            handle.write(text)
        try:
            facts = facts_from_capture(path)
        except ValueError as exc:
            assert str(exc).startswith("capture %s" % path), exc
            return
    assert data.get("capture_version") == 1 and data["capture_version"] is not True
    assert set(facts) >= {"gpus", "links", "numa_nodes", "warnings"}
    json.dumps(facts)


@SOME
@given(st.text(max_size=300))
@example(alias_bomb())
@example("\tGPU0\tCPU Affinity\nGPU0\t X \t0-1\n")
def test_any_text_loads_or_gives_a_value_error_naming_it(text):
    try:
        data = load_capture(text if "\n" in text or text.lstrip().startswith("{") else text + "\n", name="t.yml")
    except ValueError as exc:
        assert str(exc).startswith("capture t.yml"), exc
        return
    assert data["capture_version"] == 1


@SOME
@given(st.sampled_from([NODE0_CPULIST, "/sys/devices/system/node/node0/distance",
                        "/sys/bus/pci/devices/0000:01:00.0/numa_node", "/sys/bus/pci/devices/0000:01:00.0/local_cpulist",
                        "/sys/devices/system/cpu/online"]),
       st.text(min_size=90, max_size=400))
@example(NODE0_CPULIST, SECRET)
def test_capture_file_content_never_appears_whole_in_warnings(path, content):
    capture = two_gpu_host().capture()
    capture["files"][path.replace("/sys/bus/pci/devices/0000:01:00.0",
                                  "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0")] = content
    facts = facts_from_capture(capture)
    assert all(content.strip() not in w for w in facts["warnings"])


# --------------------------------------------------------------------------
# sysfs trees under root=


def tree(tmp_path, changes=None):
    """A two-GPU host laid out under tmp_path/root, with a file of secrets
    next to (outside) the root; changes(root) edits the tree."""
    root = tmp_path / "root"
    write_tree(two_gpu_host().capture(), root)
    (tmp_path / "passwd").write_text(SECRET + "\n")
    if changes:
        changes(root)
    return root


def replace(root, path, make):
    target = root / path.lstrip("/")
    if target.is_symlink() or target.exists():
        target.unlink()
    make(str(target))


def facts_of(root):
    reader = LiveReader(root=str(root), which=lambda name: None)
    return gather(reader, hostname="probe")[0]


def assert_no_leak(facts):
    assert "s3cr3t" not in json.dumps(facts)


def test_root_relative_symlink_escape_is_refused_with_a_warning(tmp_path):
    root = tree(tmp_path, lambda r: replace(r, NODE0_CPULIST, lambda t: os.symlink("../" * 12 + "passwd", t)))
    facts = facts_of(root)
    assert_no_leak(facts)
    assert "%s: leads above the root %s; not read" % (NODE0_CPULIST, root) in facts["warnings"]
    assert facts["numa_nodes"][0]["cpus"] is None


def test_root_absolute_symlink_is_taken_below_the_root(tmp_path):
    outside = str(tmp_path / "passwd")
    root = tree(tmp_path, lambda r: replace(r, NODE0_CPULIST, lambda t: os.symlink(outside, t)))
    facts = facts_of(root)
    assert_no_leak(facts)
    assert any(w.startswith(NODE0_CPULIST + ": symlink to %r: taken below the root" % outside)
               for w in facts["warnings"]), facts["warnings"]
    # A copy of the target below the root is what is read.
    inside = root / outside.lstrip("/")
    inside.parent.mkdir(parents=True)
    inside.write_text("0-1\n")
    assert facts_of(root)["numa_nodes"][0]["cpus"] == "0-1"


def test_root_symlinked_directory_escape_is_refused(tmp_path):
    # The PCI device link itself climbs out of the root.
    device = "/sys/bus/pci/devices/0000:81:00.0"
    root = tree(tmp_path, lambda r: replace(r, device, lambda t: os.symlink("../" * 10 + "..", t)))
    facts = facts_of(root)
    assert_no_leak(facts)
    assert any(w.startswith(device + "/class: leads above the root") for w in facts["warnings"]), facts["warnings"]
    assert any("PCI device 0000:81:00.0 is not classified" in w for w in facts["warnings"])


def test_root_fifo_is_refused_without_blocking(tmp_path):
    numa = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/numa_node"
    root = tree(tmp_path, lambda r: replace(r, numa, os.mkfifo))
    facts = facts_of(root)
    assert "/sys/bus/pci/devices/0000:01:00.0/numa_node: is a FIFO, not a regular file; not read" in facts["warnings"]


def test_root_gpu_whose_class_cannot_be_read_is_reported(tmp_path):
    cls = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/class"
    root = tree(tmp_path, lambda r: replace(r, cls, os.mkfifo))
    facts = facts_of(root)
    assert [g["id"] for g in facts["gpus"]] == ["0000:01:00.0"]
    assert "/sys/bus/pci/devices/0000:81:00.0/class: is a FIFO, not a regular file; not read" in facts["warnings"]
    assert any(w.startswith("/sys/bus/pci/devices/0000:81:00.0/class cannot be read: PCI device 0000:81:00.0 is "
                            "not classified") for w in facts["warnings"]), facts["warnings"]


def test_root_oversized_file_is_not_read(tmp_path):
    big = NODE0_CPULIST
    root = tree(tmp_path, lambda r: (r / big.lstrip("/")).write_text("0," * (600 * 1024)))
    facts = facts_of(root)
    assert "%s: is larger than 1048576 bytes; not read" % big in facts["warnings"]


def test_root_missing_is_an_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="root %s does not exist" % (tmp_path / "gone")):
        gather_live(root=str(tmp_path / "gone"))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is not a directory"):
        LiveReader(root=str(tmp_path / "file"))


_SEGMENTS = st.lists(st.sampled_from(["..", ".", "sys", "devices", "passwd", "root", "node0", "x", ""]), max_size=16)
_LINK_AT = st.sampled_from([NODE0_CPULIST, "/sys/devices/system/node/node0", "/sys/bus/pci/devices/0000:01:00.0",
                            "/sys/devices/system/node"])


@SOME
@given(st.booleans(), _SEGMENTS, _LINK_AT)
@example(True, ["..", "passwd"], NODE0_CPULIST)
@example(False, [".."] * 12 + ["passwd"], NODE0_CPULIST)
def test_root_any_symlink_never_reads_outside_the_root(absolute, segments, path):
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.realpath(tmp)
        target = "/".join(segments)
        if absolute:
            target = os.path.join(base, target)
        if not target:
            target = "."

        def change(root):
            full = os.path.join(str(root), path.lstrip("/"))
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
            os.symlink(target, full)

        from pathlib import Path

        root = tree(Path(base), change)
        facts = facts_of(root)
        assert_no_leak(facts)


def test_root_tree_without_probes_reads_clean(tmp_path):
    # The guard rails leave an ordinary copied tree alone.
    facts = facts_of(tree(tmp_path))
    assert facts["warnings"] == []
    assert [n["cpus"] for n in facts["numa_nodes"]] == ["0-1", "2-3"]
    assert stat.S_ISDIR(os.stat(str(tmp_path / "root")).st_mode)
    assert sysfs.collect(LiveReader(root=str(tmp_path / "root")))["found"] is True


@pytest.mark.parametrize("section, path", [
    ("files", "/b/" + "a/" * 100 + "x"),
    ("files", "/" + "x" * 5000),
    ("directories", "/" + "d/" * 100),
])
def test_capture_paths_deeper_or_longer_than_path_max_are_refused(section, path):
    capture = {"capture_version": 1, section: {path: ["x"] if section == "directories" else "1"}}
    with pytest.raises(ValueError, match=r"capture <capture>: %s entry '/.*'\.\.\. " % section):
        load_capture(capture)


def test_capture_symlink_chains_resolve_in_bounded_steps():
    # Thirty links of 1,300 components each: within the hop limit, but
    # walking them for every read would grow with the square of the
    # capture. Past 1,024 components the path is unknown instead.
    links = dict(("/s/l%d" % i, "../" * 1300 + "s/l%d" % (i + 1)) for i in range(30))
    links["/s/m"] = "../../s/l30"
    reader = CaptureReader(load_capture({"capture_version": 1, "symlinks": links, "files": {"/s/l30/x": "1"}}))
    assert reader.realpath("/s/l0/x") is None
    assert reader.read("/s/l0/x") is None
    assert reader.realpath("/s/m/x") == "/s/l30/x"  # a short link still resolves


def test_sysfs_reads_at_most_max_gpus_and_still_the_nics(monkeypatch):
    monkeypatch.setattr(sysfs_pci, "MAX_GPUS", 2)
    b = two_gpu_host()
    b.device("0000:c1:00.0", ["pci0000:c0", "0000:c0:01.0"], "0x030200", NVIDIA, numa_node="1", local_cpus="2-3")
    b.device("0000:e1:00.0", ["pci0000:e0", "0000:e0:01.0"], "0x020700", "0x15b3", numa_node="1", local_cpus="2-3")
    part = sysfs.collect(CaptureReader(b.capture()))
    assert [g["pci_bus_id"] for g in part["gpus"]] == ["0000:01:00.0", "0000:81:00.0"]
    assert [n["id"] for n in part["nics"]] == ["0000:e1:00.0"]
    assert part["warnings"] == ["/sys/bus/pci/devices: more than 2 GPUs; the rest is not read"]
