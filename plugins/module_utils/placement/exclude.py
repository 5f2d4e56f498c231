# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""exclude_gpus entries resolved to the GPU ids of one host (docs/deploy.md).

An entry names a GPU by its index (2, "2", "GPU2": what nvidia-smi and
rocm-smi print), its PCI bus id (any case, with or without the domain) or
its UUID. resolve_exclude() turns them into the host's GPU ids once, so the
planner, stable identity and the kept plan's options all see one form; an
entry that names no GPU of the host is an error, never a silent no-op.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common import pci as _pci
from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import show
from ansible_collections.gpufleet.numa.plugins.module_utils.placement.options import PlacementError

_INDEX = re.compile(r"^(?:GPU)?([0-9]{1,6})$", re.ASCII | re.IGNORECASE)
_LISTED = 8  # GPUs listed in an error, so the message stays readable


def _matches(entry, gpu):
    """Whether one exclude entry names this GPU (a facts Gpu: id, pci_bus_id, index, uuid)."""
    if isinstance(entry, int):
        return gpu.index == entry
    index = _INDEX.match(entry)
    if index:
        return gpu.index == int(index.group(1))
    folded = entry.lower()
    if folded in (str(gpu.id).lower(), str(gpu.uuid or "").lower()):
        return True
    try:
        return gpu.pci_bus_id is not None and _pci.normalize_bus_id(entry) == _pci.normalize_bus_id(gpu.pci_bus_id)
    except ValueError:
        return False


def _gpu_list(gpus):
    shown = ["%s %s%s" % (g.index, g.pci_bus_id or g.id, " %s" % g.uuid if g.uuid else "") for g in gpus[:_LISTED]]
    more = " and %d more" % (len(gpus) - _LISTED) if len(gpus) > _LISTED else ""
    return "; ".join(shown) + more if shown else "none"


def _host_error(host, text):
    error = PlacementError("host %s: %s" % (host, text))
    error.host = host
    return error


def resolve_exclude(host, entries, gpus):
    """The sorted GPU ids that `entries` (checked exclude_gpus of `host`) name among
    `gpus` (the host's facts Gpu tuples). Raises PlacementError naming the host,
    the entry and the host's GPUs (index, bus id, UUID) for an entry that names none."""
    out = set()
    for entry in entries or ():
        if isinstance(entry, bool) or not isinstance(entry, (int, str)):
            raise _host_error(host, "exclude_gpus holds %s, not a GPU index, PCI bus id, UUID or GPU<n>"
                              % show(entry))
        if isinstance(entry, str):
            entry = entry.strip()
        named = [g.id for g in gpus if _matches(entry, g)]
        if not named:
            raise _host_error(host, "exclude_gpus entry %s names no GPU of this host (its GPUs, as index "
                              "bus-id uuid: %s)" % (show(entry), _gpu_list(gpus)))
        out.update(named)
    return sorted(out)
