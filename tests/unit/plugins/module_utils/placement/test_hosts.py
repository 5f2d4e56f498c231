# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Hand-built topology facts (schema 1) of real machines, for placement tests.

Each builder follows a published `nvidia-smi topo -m` / hwloc / RCCL dump;
the source is named on the builder. Other placement tests import these.
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import format_cpulist, parse_cpulist


def make_facts(hostname, nodes, gpu_nodes, link, smt=None, sockets=True, bus_base=0x10, uuid_prefix="GPU-0000"):
    """Build facts.

    nodes: {node_id: (socket or None, cpulist)}
    gpu_nodes: NUMA node per GPU, in PCI order (None or -1 = unknown)
    link(i, j): link class between GPU i and GPU j
    smt: list of sibling lists or None for []
    sockets: False to leave the sockets list empty (a topo -m-only capture)
    """
    gpus = []
    for i, node in enumerate(gpu_nodes):
        bus = "0000:%02x:00.0" % (bus_base + i)
        gpus.append(
            {
                "id": bus,
                "index": i,
                "pci_bus_id": bus,
                "uuid": "%s-%04d" % (uuid_prefix, i),
                "name": "Test GPU",
                "vendor": "nvidia",
                "numa_node": node,
                "local_cpus": nodes[node][1] if node in nodes else None,
                "memory_mb": 81559,
                "mig_mode": "disabled",
                "pcie": None,
            }
        )
    links = {}
    for i, a in enumerate(gpus):
        links[a["id"]] = dict((b["id"], link(i, j)) for j, b in enumerate(gpus) if i != j)
    socket_ids = sorted(set(s for s, _c in nodes.values() if s is not None))
    return {
        "schema_version": 1,
        "hostname": hostname,
        "sources": ["sysfs", "nvml"],
        "sockets": [
            {
                "id": s,
                "numa_nodes": sorted(n for n, (sock, _c) in nodes.items() if sock == s),
                "cpus": format_cpulist(
                    c for n, (sock, cpus) in nodes.items() if sock == s for c in parse_cpulist(cpus)
                ),
            }
            for s in socket_ids
        ]
        if sockets
        else [],
        "numa_nodes": [
            {
                "id": n,
                "cpus": cpus,
                "memory_mb": 515000,
                "distances": {},
                "socket": sock if sockets else None,
            }
            for n, (sock, cpus) in sorted(nodes.items())
        ],
        "smt_siblings": smt or [],
        "gpus": gpus,
        "nics": [],
        "links": links,
        "warnings": [],
    }


def smt_pairs(threads, offset):
    """SMT siblings [c, c+offset] for c in 0..offset-1 (Linux numbering on x86)."""
    return [[c, c + offset] for c in range(threads // 2)] if offset == threads // 2 else None


def h100_nvswitch(hostname="h100"):
    """8x H100 SXM, NV18 all-to-all, GPUs 0-3 node 0, 4-7 node 1.
    Source: https://github.com/HazyResearch/ThunderKittens/issues/167"""
    return make_facts(
        hostname,
        {0: (0, "0-47,96-143"), 1: (1, "48-95,144-191")},
        [0, 0, 0, 0, 1, 1, 1, 1],
        lambda i, j: "NV18",
        smt=[[c, c + 96] for c in range(96)],
        bus_base=0x18,
    )


def rtx4090_pix_quads(hostname="rtx4090"):
    """8x RTX 4090, PIX inside each quad, SYS across; quads on nodes 0 and 1.
    Source: https://github.com/NVIDIA/nccl-tests/issues/307"""
    return make_facts(
        hostname,
        {0: (0, "0-35,72-107"), 1: (1, "36-71,108-143")},
        [0, 0, 0, 0, 1, 1, 1, 1],
        lambda i, j: "PIX" if i // 4 == j // 4 else "SYS",
        smt=[[c, c + 72] for c in range(72)],
        bus_base=0x01,
    )


def a6000_nvlink_pairs(hostname="a6000"):
    """8x RTX A6000 with NVLink bridges on pairs (NV4), NODE between pairs, SYS across sockets.
    Source: https://github.com/pytorch/pytorch/issues/79299"""

    def link(i, j):
        if i // 4 != j // 4:
            return "SYS"
        return "NV4" if i // 2 == j // 2 else "NODE"

    return make_facts(
        hostname,
        {0: (0, "0-63,128-191"), 1: (1, "64-127,192-254")},
        [0, 0, 0, 0, 1, 1, 1, 1],
        link,
        smt=[[c, c + 128] for c in range(127)] + [[127]],
        bus_base=0x01,
    )


def ndv4_like(hostname="ndv4"):
    """Azure NDv4-like: 8x A100 NV12 all-to-all, 4 NUMA nodes; PCI order is not
    NUMA order: GPUs 0,1 node 1; 2,3 node 0; 4,5 node 3; 6,7 node 2.
    Sockets {0: nodes 0,1; 1: nodes 2,3}."""
    return make_facts(
        hostname,
        {0: (0, "0-23"), 1: (0, "24-47"), 2: (1, "48-71"), 3: (1, "72-95")},
        [1, 1, 0, 0, 3, 3, 2, 2],
        lambda i, j: "NV12",
        bus_base=0x0B,
    )


def mi50_nps4(hostname="mi50"):
    """8x MI50 on dual EPYC Rome in NPS4 (8 NUMA nodes, 2 GPUs each), XGMI rings of
    four per socket (ring neighbours XGMI1, diagonals PCIe NODE), SYS across sockets.
    After https://github.com/ROCm/rccl/blob/0cbce2a7571c907554199fad7e905f16ec0a565c/tools/topo_expl/models/topo_8p_ts1_n4.xml
    (there GPUs spread over 6 nodes; here 2 per node as the brief's NPS4 case)."""

    def link(i, j):
        if i // 4 != j // 4:
            return "SYS"
        a, b = i % 4, j % 4
        return "XGMI1" if (a - b) % 4 in (1, 3) else "NODE"

    nodes = dict((n, (n // 4, "%d-%d" % (16 * n, 16 * n + 15))) for n in range(8))
    return make_facts(hostname, nodes, [0, 0, 1, 1, 4, 4, 5, 5], link, bus_base=0x03)


def dgx2_like(hostname="dgx2"):
    """16x V100 on NVSwitch (NV6 all pairs), GPUs 0-7 node 0, 8-15 node 1.
    Source: https://github.com/open-mpi/hwloc/blob/3b37b024aa3fe368dd82008eea7e1ad9dca97d2c/tests/hwloc/xml/nvidiaDGX2.xml"""
    return make_facts(
        hostname,
        {0: (0, "0-23,48-71"), 1: (1, "24-47,72-95")},
        [0] * 8 + [1] * 8,
        lambda i, j: "NV6",
        smt=[[c, c + 48] for c in range(48)],
        bus_base=0x34,
    )


def rtx3090_numa_na(hostname="rtx3090"):
    """2x RTX 3090 on a TR 1950X, GPU0's NUMA node unknown (N/A in topo -m), no socket info.
    Source: the 11_rtx3090 recording (nvidia-smi topo -m only)."""
    return make_facts(
        hostname,
        {0: (None, "0-7,16-23"), 1: (None, "8-15,24-31")},
        [None, 1],
        lambda i, j: "SYS",
        sockets=False,
        bus_base=0x09,
    )


HOSTS = {
    "h100_nvswitch": h100_nvswitch,
    "rtx4090_pix_quads": rtx4090_pix_quads,
    "a6000_nvlink_pairs": a6000_nvlink_pairs,
    "ndv4_like": ndv4_like,
    "mi50_nps4": mi50_nps4,
    "dgx2_like": dgx2_like,
    "rtx3090_numa_na": rtx3090_numa_na,
}


def test_make_facts_builds_symmetric_links_for_every_host():
    for name, build in HOSTS.items():
        facts = build()
        ids = [g["id"] for g in facts["gpus"]]
        for a in ids:
            assert set(facts["links"][a]) == set(ids) - {a}, name
            for b in facts["links"][a]:
                assert facts["links"][a][b] == facts["links"][b][a], name
