# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The kept plan's own rules of a CPU instance (docs/plan.md, "CPU
instances"): the fields role vllm does not read, its gpus (none) and its
numa_nodes (binding.mems). The device field, a CPU instance's shape (one
pipeline stage, one host, no gpu_indices) and binding.ranks are checked
with the instance's other fields, as the role checks them
(placement/contract.check_instance_fields). Errors are
ValueError("FIELD: RULE (got VALUE)").
"""

from __future__ import annotations

from ansible_collections.gpufleet.numa.plugins.module_utils.common import checks


def check_cpu_entry(where, entry, fields):
    """A CPU instance's gpus and numa_nodes; FIELDS: check_instance_fields' result for ENTRY."""
    if fields["device"] != "cpu":
        return
    if entry["gpus"]:
        checks.fail(where + ".gpus", "must be [] on a CPU instance (device cpu)", entry["gpus"])
    mems = fields["binding"]["mems"]
    if "numa_nodes" in entry and entry["numa_nodes"] != mems:
        checks.fail(where + ".numa_nodes", "must be binding.mems %s on a CPU instance" % ",".join(map(str, mems)),
                    entry["numa_nodes"])
