# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Property tests: the source parsers return a well-formed partial for any
input (random text, damaged copies of recorded matrices, broken NVML
records and bindings) and read back every matrix nvidia-smi could print.

The parsers never raise (a parser bug must not take fact gathering down):
they catch everything and then report it in the partial's `error`. So
"never raises" alone proves nothing; every property here also requires
`error` to be None - the parser read the input, with warnings or not, and
did not give up."""

from __future__ import absolute_import, division, print_function

import copy
import json
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import nvml_parse
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi import parse_query_gpu
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.nvidia_smi_topo import TOPO_COMMAND, parse_topo_matrix
from ansible_collections.gpufleet.numa.plugins.module_utils.common.pci import is_link_class, normalize_bus_id

__metaclass__ = type

MACHINES = os.path.join(fixture_paths.FIXTURES, "machines")
GPU_KEYS = {
    "index", "pci_bus_id", "uuid", "name", "memory_mb", "numa_node",
    "local_cpus", "mig_mode", "pcie", "vendor",
}
NVIDIA_SMI_GPU_KEYS = {"memory_numa_node"}  # the GPU's own memory node (GPU NUMA ID, nvmlDeviceGetNumaNodeId)
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# For the properties whose single example is costly (big records, long matrices).
FUZZ_HEAVY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _load_captures():
    captures = {}
    for name in sorted(os.listdir(MACHINES)):
        path = os.path.join(MACHINES, name, "capture.yml")
        if os.path.isfile(path):
            with open(path) as handle:
                captures[name] = yaml.safe_load(handle)
    return captures


CAPTURES = _load_captures()
MATRICES = sorted(
    c["commands"][TOPO_COMMAND] for c in CAPTURES.values() if TOPO_COMMAND in (c.get("commands") or {})
)
NVML_RECORDS = [c["nvml"] for dummy, c in sorted(CAPTURES.items()) if "nvml" in c]


def assert_well_formed(partial):
    """What every consumer of a partial may rely on, and that the parser
    did not give up on an exception of its own."""
    assert set(partial) >= {"gpus", "links", "numa_nodes", "warnings", "error"}
    assert partial["error"] is None, "the parser gave up: %s" % partial["error"]
    json.dumps(partial)  # plain data only
    assert all(isinstance(w, str) and w for w in partial["warnings"])
    keys = set()
    for gpu in partial["gpus"]:
        assert set(gpu) - NVIDIA_SMI_GPU_KEYS == GPU_KEYS
        assert gpu["index"] is None or isinstance(gpu["index"], int)
        assert gpu["numa_node"] is None or isinstance(gpu["numa_node"], int)
        assert gpu["mig_mode"] in (None, "enabled", "disabled")
        if gpu["pci_bus_id"] is not None:
            assert normalize_bus_id(gpu["pci_bus_id"]) == gpu["pci_bus_id"]
        if gpu["local_cpus"] is not None:
            assert format_cpulist(parse_cpulist(gpu["local_cpus"])) == gpu["local_cpus"]
        keys.add(gpu["pci_bus_id"] or "GPU%s" % gpu["index"])
    for a, row in partial["links"].items():
        assert a in keys
        for b, value in row.items():
            assert b in keys and a != b
            assert is_link_class(value), value
            assert partial["links"][b][a] == value
    for node in partial["numa_nodes"]:
        assert isinstance(node["id"], int)
        assert format_cpulist(parse_cpulist(node["cpus"])) == node["cpus"]


@FUZZ
@given(st.text())
def test_parse_topo_matrix_random_text_never_raises(text):
    assert_well_formed(parse_topo_matrix(text))


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("GPUNIC0123456789 \t\nXSYNODEPHBVAF/-,:mlx_")), max_size=400))
def test_parse_topo_matrix_matrix_like_text_never_raises(text):
    assert_well_formed(parse_topo_matrix(text))


@FUZZ
@given(st.text())
def test_parse_query_gpu_random_text_never_raises(text):
    assert_well_formed(parse_query_gpu(text))


@FUZZ
@given(
    st.lists(
        st.lists(
            st.one_of(
                st.integers(-3, 300).map(str),
                st.sampled_from(["GPU-1b2c", "NVIDIA H100", "00000000:1B:00.0", "[N/A]", "Enabled", "", "x"]),
                st.text(max_size=12),
            ),
            min_size=1, max_size=8,
        ),
        max_size=10,
    )
)
def test_parse_query_gpu_csv_like_rows_never_raise(rows):
    text = "\n".join(", ".join(row) for row in rows)
    assert_well_formed(parse_query_gpu(text))


_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["delete", "merge", "truncate_line", "swap_tokens", "duplicate_line", "insert", "drop_line"]),
        st.integers(0, 10 ** 6),
        st.integers(0, 10 ** 6),
        st.text(max_size=6),
    ),
    min_size=1,
    max_size=6,
)


def _damage(text, edits):
    """Copy-paste damage: lost characters, merged cells, cut lines, swaps."""
    for kind, i, j, junk in edits:
        lines = text.split("\n")
        if kind == "delete" and text:
            start = i % len(text)
            text = text[:start] + text[start + 1 + j % 8:]
        elif kind == "merge":
            # Remove one run of whitespace between two cells.
            runs = [k for k in range(1, len(text)) if text[k] in " \t" and text[k - 1] not in " \t\n"]
            if runs:
                start = runs[i % len(runs)]
                end = start
                while end < len(text) and text[end] in " \t":
                    end += 1
                text = text[:start] + text[end:]
        elif kind == "truncate_line":
            n = i % len(lines)
            lines[n] = lines[n][: j % (len(lines[n]) + 1)]
            text = "\n".join(lines)
        elif kind == "swap_tokens":
            n = i % len(lines)
            tokens = lines[n].split()
            if len(tokens) > 1:
                a, b = j % len(tokens), (j // 7) % len(tokens)
                tokens[a], tokens[b] = tokens[b], tokens[a]
                lines[n] = "\t".join(tokens)
            text = "\n".join(lines)
        elif kind == "duplicate_line":
            n = i % len(lines)
            lines.insert(n, lines[n])
            text = "\n".join(lines)
        elif kind == "insert":
            start = i % (len(text) + 1)
            text = text[:start] + junk + text[start:]
        elif kind == "drop_line":
            del lines[i % len(lines)]
            text = "\n".join(lines)
    return text


@FUZZ
@given(st.sampled_from(MATRICES), _EDITS)
def test_parse_topo_matrix_damaged_recorded_matrices_never_raise(text, edits):
    assert_well_formed(parse_topo_matrix(_damage(text, edits)))


@pytest.mark.parametrize("text", MATRICES, ids=range(len(MATRICES)))
def test_parse_topo_matrix_recorded_matrices_parse_before_damage(text):
    # The undamaged inputs the property above starts from are read in full:
    # a parser that gives up on everything fails here, not silently there.
    partial = parse_topo_matrix(text)
    assert_well_formed(partial)
    assert partial["gpus"] and all(g["index"] is not None for g in partial["gpus"])
    assert len(partial["gpus"]) == 1 or partial["links"]


_CLASSES = st.one_of(st.sampled_from(["PIX", "PXB", "PHB", "NODE", "SYS"]), st.integers(1, 18).map(lambda n: "NV%d" % n))


@st.composite
def _matrices(draw):
    """A matrix as some nvidia-smi version prints it, and what it says."""
    count = draw(st.integers(1, 10))
    nics = draw(st.integers(0, 3))
    links = {}
    for a in range(count):
        for b in range(a + 1, count):
            links[(a, b)] = links[(b, a)] = draw(_CLASSES)
    nic_cells = [[draw(st.sampled_from(["PIX", "PXB", "NODE", "SYS"])) for dummy in range(nics)] for dummy in range(count)]
    numa = [draw(st.one_of(st.none(), st.integers(0, 7))) for dummy in range(count)]
    cpus = [
        format_cpulist(draw(st.sets(st.integers(0, 255), min_size=1, max_size=40))) for dummy in range(count)
    ]
    gpu_numa_id = draw(st.booleans())
    sep = draw(st.sampled_from(["\t", "    ", "  \t"]))
    indent = draw(st.sampled_from(["", "    ", "\t"]))
    names = ["GPU%d" % i for i in range(count)] + ["NIC%d" % i for i in range(nics)]
    titles = ["CPU Affinity", "NUMA Affinity"] + (["GPU NUMA ID"] if gpu_numa_id else [])
    lines = [indent + sep + sep.join(names + titles)]
    for a in range(count):
        cells = [" X " if a == b else links[(a, b)] for b in range(count)] + nic_cells[a]
        tail = [cpus[a], "N/A" if numa[a] is None else str(numa[a])] + (["N/A"] if gpu_numa_id else [])
        lines.append(indent + "GPU%d" % a + sep + sep.join(cells + tail))
    for n in range(nics):
        cells = [nic_cells[a][n] for a in range(count)] + [" X " if n == m else "SYS" for m in range(nics)]
        lines.append(indent + "NIC%d" % n + sep + sep.join(cells))
    lines += ["", "Legend:", "", "  X    = Self", ""]
    if nics:
        lines += ["NIC Legend:", ""] + ["  NIC%d: mlx5_%d" % (n, n) for n in range(nics)]
    return "\n".join(lines) + "\n", count, links, numa, cpus


@FUZZ_HEAVY
@given(_matrices())
def test_parse_topo_matrix_reads_back_any_printed_matrix(case):
    text, count, links, numa, cpus = case
    partial = parse_topo_matrix(text)
    assert_well_formed(partial)
    assert [g["index"] for g in partial["gpus"]] == list(range(count))
    assert [g["numa_node"] for g in partial["gpus"]] == numa
    assert [g["local_cpus"] for g in partial["gpus"]] == cpus
    assert partial["links"] == {
        "GPU%d" % a: {"GPU%d" % b: links[(a, b)] for b in range(count) if b != a}
        for a in range(count) if count > 1
    }
    assert [w for w in partial["warnings"] if "N/A" not in w] == []


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 2 ** 65), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


@FUZZ
@given(_JSON)
def test_nvml_parse_random_values_never_raise(raw):
    assert_well_formed(nvml_parse.parse(raw))


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, prefix + (i,))


@FUZZ_HEAVY
@given(st.sampled_from(range(len(NVML_RECORDS))), st.lists(st.tuples(st.integers(0, 10 ** 6), st.booleans(), _JSON), min_size=1, max_size=5))
def test_nvml_parse_damaged_recorded_records_never_raise(which, edits):
    raw = copy.deepcopy(NVML_RECORDS[which])
    for pick, delete, value in edits:
        paths = [p for p in _paths(raw) if p]
        if not paths:
            break
        path = paths[pick % len(paths)]
        parent = raw
        for key in path[:-1]:
            parent = parent[key]
        if delete and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
    assert_well_formed(nvml_parse.parse(raw))


class _ChaoticNVML:
    """Every call either answers with something random or raises."""

    def __init__(self, data):
        self.data = data

    def __getattr__(self, name):
        if not name.startswith("nvml"):
            raise AttributeError(name)
        if self.data.draw(st.integers(0, 9), label="missing %s" % name) == 0:
            raise AttributeError(name)

        def call(*args):
            if self.data.draw(st.booleans(), label="raises"):
                raise self.data.draw(st.sampled_from([RuntimeError("boom"), ValueError(), OSError(5, "io"), KeyError("k")]))
            return self.data.draw(_JSON, label="value")

        return call


@FUZZ
@given(st.data())
def test_nvml_collect_on_chaotic_bindings_never_raises(data):
    raw = nvml.collect(_ChaoticNVML(data), cpu_count=data.draw(st.one_of(st.none(), st.integers(-1, 300))))
    # Binding failures are recorded per call; "collect" holds an exception
    # of the collector itself, which must never happen.
    assert "collect" not in raw["errors"], raw["errors"]["collect"]
    yaml.safe_dump(raw)  # a capture must be able to store it
    assert set(raw) == {
        "collector_version", "driver_version", "nvml_version", "cpu_count",
        "device_count", "errors", "devices", "topology",
    }
    assert_well_formed(nvml_parse.parse(raw))
