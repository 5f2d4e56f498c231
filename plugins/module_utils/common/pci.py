# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""PCI bus ids and GPU link classes: the vocabulary every part shares."""

from __future__ import annotations

import re

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)

# PCIe levels as nvidia-smi topo -m names them, best first: the one
# ranking of link classes (link_score, worse_link and NVML's levels use it).
PCIE_LINK_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_PCIE_SCORE = dict((cls, len(PCIE_LINK_CLASSES) - 1 - rank) for rank, cls in enumerate(PCIE_LINK_CLASSES))
# More GPUs than this in one host is a damaged or forged input: sources
# read at most this many (the pairwise link work grows with its square).
MAX_GPUS = 1024
_FABRIC = re.compile(r"^(NV|XGMI)(\d{1,6})$", re.ASCII)


def normalize_bus_id(text):
    """Return a PCI bus id as sysfs writes it ("0000:1a:00.0").

    Accepts NVML's "00000000:1A:00.0", nvidia-smi's "00000000:1A:00.0" and
    short forms without a domain ("1a:00.0" -> domain 0000). Raises
    ValueError for anything that is not a bus id.
    """
    match = _BUS_ID.match(str(text).strip())
    if not match:
        raise ValueError("not a PCI bus id: %r" % (text,))
    domain = int(match.group("domain") or "0", 16)
    if domain > 0xFFFF:
        raise ValueError("PCI domain out of range in %r" % (text,))
    return "%04x:%02x:%02x.%s" % (
        domain,
        int(match.group("bus"), 16),
        int(match.group("device"), 16),
        match.group("function"),
    )


def is_link_class(value):
    """True for NV<n>, XGMI<n> (n >= 1) and the PCIe levels."""
    value = str(value)
    return value in _PCIE_SCORE or bool(_FABRIC.match(value) and int(_FABRIC.match(value).group(2)) > 0)


def link_score(value):
    """Order link classes: higher is better.

    SYS 0 < NODE 1 < PHB 2 < PXB 3 < PIX 4 < NV1/XGMI1 11 < NV2 12 < ...
    A fabric link of any width beats any PCIe path. Raises ValueError for
    an unknown class.
    """
    value = str(value)
    if value in _PCIE_SCORE:
        return _PCIE_SCORE[value]
    match = _FABRIC.match(value)
    if match and int(match.group(2)) > 0:
        return 10 + int(match.group(2))
    raise ValueError("unknown link class %r" % (value[:40],))


def worse_link(a, b):
    """The worse of two link classes (by link_score); a on a tie."""
    return a if link_score(a) <= link_score(b) else b
