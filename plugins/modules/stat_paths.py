#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stat_paths
short_description: "Internal to the deploy playbook; not a stable interface: what exists at many paths of a host, in one call"
version_added: "0.1.0"
description:
  - >-
    Internal to role C(gpufleet.numa.vllm), run by C(playbooks/deploy_inference.yml); not a stable interface: its
    options and results change with the playbooks and roles that use it, without a deprecation. The modules meant
    for users are M(gpufleet.numa.numa_facts), M(gpufleet.numa.numa_audit), M(gpufleet.numa.numa_preflight) and
    M(gpufleet.numa.numa_bandwidth).
  - Reads the directories, files, programs and links at every path of O(paths) (the last part of a path may
    be a glob) and returns each one that exists with the fields M(ansible.builtin.find) returns, without
    following links.
  - One module call per host where a loop of M(ansible.builtin.stat) and a M(ansible.builtin.find) made one call
    per directory; role C(gpufleet.numa.vllm) looks at what it is about to write with it, so that a run that
    changes nothing calls no other module.
author:
  - gpufleet.numa contributors (@gpufleet)
options:
  paths:
    description:
      - Absolute paths. The last part of a path may hold the glob characters C(*), C(?) and C([...]);
        the folder before it may not. A path where nothing exists is left out of the result.
    type: list
    elements: str
    required: true
  checksum_max_bytes:
    description:
      - Regular files up to this size get a C(checksum) (sha1, as M(ansible.builtin.find) computes it);
        larger ones (a program such as C(python3)) get none.
    type: int
    default: 1048576
  service_mgr:
    description:
      - Also gather the host's service manager, as M(ansible.builtin.setup) does with O(ansible.builtin.setup#module:gather_subset)
        V(service_mgr), and return it as the fact C(service_mgr). Where the name of PID 1's program says which it
        is, that name (as the collector reads it first); elsewhere the same fact collector, with the platform and
        distribution it reads. Role C(gpufleet.numa.vllm) asks for it where C(vllm_manage_service=auto) decides by it,
        so that its look at the host needs no separate M(ansible.builtin.setup) call.
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.numa.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Any POSIX host with Python; role C(gpufleet.numa.vllm) runs it on its GPU servers.
"""

EXAMPLES = r"""
- name: Look at the directories, files and programs of the units
  gpufleet.numa.stat_paths:
    paths:
      - /etc/vllm
      - /etc/systemd/system/gpufleet-*.service
      - /usr/bin/numactl
  register: looked
"""

RETURN = r"""
files:
  description:
    - One entry per existing path (each match of a glob), sorted by path, with M(ansible.builtin.find)'s fields
      C(path), C(mode) (octal text), C(isdir), C(isreg), C(islnk), C(xusr), C(xgrp), C(xoth), C(uid), C(gid),
      C(pw_name), C(gr_name), C(size), and C(checksum) for a regular file of at most O(checksum_max_bytes).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/vllm", "mode": "0755", "isdir": true, "isreg": false, "islnk": false}]
ansible_facts:
  description: With O(service_mgr), the host's service manager as M(ansible.builtin.setup) names it.
  returned: when O(service_mgr) is true
  type: dict
  contains:
    service_mgr:
      description: The service manager (V(systemd), V(sysvinit), ..., V(service) when none is recognised).
      type: str
      sample: systemd
"""

import fnmatch
import grp
import hashlib
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

GLOB_CHARACTERS = "*?["


def _name(lookup, number):
    try:
        return lookup(number)[0]
    except KeyError:
        return ""


def _sha1(path):
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(65536), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(path, checksum_max_bytes):
    """find's fields for PATH (not following a link); None when nothing is there."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    mode = info.st_mode
    entry = {"path": path, "mode": "%04o" % stat.S_IMODE(mode), "isdir": stat.S_ISDIR(mode),
             "isreg": stat.S_ISREG(mode), "islnk": stat.S_ISLNK(mode), "xusr": bool(mode & stat.S_IXUSR),
             "xgrp": bool(mode & stat.S_IXGRP), "xoth": bool(mode & stat.S_IXOTH), "uid": info.st_uid,
             "gid": info.st_gid, "pw_name": _name(pwd.getpwuid, info.st_uid),
             "gr_name": _name(grp.getgrgid, info.st_gid), "size": info.st_size}
    if entry["isreg"] and info.st_size <= checksum_max_bytes:
        try:
            entry["checksum"] = _sha1(path)
        except OSError:
            pass  # unreadable: no checksum, so the file counts as differing
    return entry


def check_path(path):
    """An absolute path whose folders hold no glob (one folder listed per glob)."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        raise ValueError("paths: each must be an absolute path (got %r)" % (path,))
    folder = os.path.dirname(path)
    if any(character in folder for character in GLOB_CHARACTERS):
        raise ValueError("paths: only the last part of a path may be a glob (got %r)" % (path,))
    return path


def stat_paths(paths, checksum_max_bytes):
    """Every existing path and glob match of PATHS, described, sorted by path."""
    found = {}
    for path in (check_path(p) for p in paths):
        folder, name = os.path.split(path)
        matches = [path]
        if any(character in name for character in GLOB_CHARACTERS):
            # fnmatch, as find's patterns: a leading dot is matched like any other character
            try:
                matches = [os.path.join(folder, entry) for entry in os.listdir(folder)
                           if fnmatch.fnmatchcase(entry, name)]
            except OSError:
                matches = []
        for match in matches:
            if match not in found:
                entry = describe(match, checksum_max_bytes)
                if entry is not None:
                    found[match] = entry
    return [found[path] for path in sorted(found)]


# What ansible.builtin.setup's service manager collector names each PID 1
# program it maps (ansible-core 2.17 to 2.19); any other name is its own.
PID_1_NAMES = {"procd": "openwrt_init", "runit-init": "runit", "svscan": "svc", "openrc-init": "openrc"}


def named_by_pid_1(comm="/proc/1/comm"):
    """The service manager PID 1's name says, read as setup's collector reads
    it first (and then reads no other fact); None where it does not say (no
    name, 'init', or a shell, as in many containers)."""
    try:
        with open(comm) as source:
            name = os.path.basename(source.read().strip()).strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not name or name == "init" or name.endswith("sh"):
        return None
    return PID_1_NAMES.get(name, name)


def service_manager(module):
    """The service manager, as setup's service_mgr subset gathers it.

    Where PID 1's name says (systemd on a GPU server), that name. Only
    elsewhere are the fact collectors run: the platform and distribution
    first, then the service manager's own. Importing any of them imports
    every fact collector (ansible.module_utils.facts' package does), compiled
    from the module's zip on each call: about 0.1 s of CPU per look."""
    named = named_by_pid_1()
    if named is not None:
        return named

    from ansible.module_utils.facts.namespace import PrefixFactNamespace
    from ansible.module_utils.facts.system.distribution import DistributionFactCollector
    from ansible.module_utils.facts.system.platform import PlatformFactCollector
    from ansible.module_utils.facts.system.service_mgr import ServiceMgrFactCollector

    namespace = PrefixFactNamespace(namespace_name="ansible", prefix="ansible_")
    collected = {}
    for collector in (PlatformFactCollector, DistributionFactCollector, ServiceMgrFactCollector):
        collected.update(collector(namespace=namespace).collect_with_namespace(module=module, collected_facts=collected))
    return collected.get("ansible_service_mgr")


def main():
    module = AnsibleModule(argument_spec=dict(
        paths=dict(type="list", elements="str", required=True),
        checksum_max_bytes=dict(type="int", default=1048576),
        service_mgr=dict(type="bool", default=False),
    ), supports_check_mode=True)
    if module.params["checksum_max_bytes"] < 0:
        module.fail_json(msg="checksum_max_bytes: must be at least 0 (got %d)" % module.params["checksum_max_bytes"])
    try:
        files = stat_paths(module.params["paths"], module.params["checksum_max_bytes"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=False, files=files)
    if module.params["service_mgr"]:
        result["ansible_facts"] = {"service_mgr": service_manager(module)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
