# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters that write one host's topology facts as Slurm's gres.conf and
as an NCCL topology file (plugins/module_utils/topology/export.py), and
topology_exports, export_topology.yml's own: both formats, and which one
the facts lack what it needs for."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.gpufleet.numa.plugins.module_utils.topology import export as topology_export

_display = Display()


def _host(facts, host):
    if host is None and isinstance(facts, dict):
        host = facts.get("hostname")
    return str(host or "host")


def _text(name, result):
    for line in result["warnings"]:
        _display.warning("gpufleet.numa.%s: %s" % (name, line))
    return result["text"]


def slurm_gres_conf(facts, host=None):
    try:
        return _text("slurm_gres_conf", topology_export.gres_conf(facts, _host(facts, host)))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.slurm_gres_conf: %s" % exc)


def nccl_topology_xml(facts, host=None, cpu_arch=None, cpu_vendor=None):
    try:
        return _text("nccl_topology_xml", topology_export.nccl_topology_xml(
            facts, _host(facts, host), cpu_arch=cpu_arch, cpu_vendor=cpu_vendor))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.nccl_topology_xml: %s" % exc)


def topology_exports(facts, host=None):
    try:
        result = topology_export.host_exports(facts, _host(facts, host))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.topology_exports: %s" % exc)
    for line in result["warnings"]:
        _display.warning("gpufleet.numa.topology_exports: %s" % line)
    return {"files": result["files"], "skipped": result["skipped"]}


class FilterModule(object):
    def filters(self):
        return {"slurm_gres_conf": slurm_gres_conf, "nccl_topology_xml": nccl_topology_xml,
                "topology_exports": topology_exports}
