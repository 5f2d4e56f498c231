# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the paths the playbooks write on the controller:
controller_path, file_in_dir, controller_inventory_dir, controller_default_path,
outside_inventory and controller_writable.

Thin shells around plugin_utils/paths.py; see docs/deploy.md
(Controller-side paths).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.plugin_utils import paths as controller_paths
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain as _plain


def controller_path(value, name, inventory_sources=None):
    """An absolute, normalised path on the controller; fails naming `name`.
    With inventory_sources (ansible_inventory_sources), a path inside an
    inventory directory is refused too."""
    try:
        path = controller_paths.controller_path(str(name), _plain(value))
        if inventory_sources is not None:
            controller_paths.outside_inventories(str(name), path, _plain(inventory_sources))
        return path
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.controller_path: %s" % exc)


def file_in_dir(file_name, directory, suffix="", name="inventory_hostname", directory_name="directory"):
    """directory/<file_name><suffix>, when file_name is a plain file name and
    the path stays inside directory."""
    try:
        return controller_paths.file_in_directory(_plain(directory), _plain(file_name), suffix=str(suffix),
                                                  directory_variable=str(directory_name), file_variable=str(name))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.file_in_dir: %s" % exc)


def controller_inventory_dir(sources):
    """The controller's inventory directory from ansible_inventory_sources."""
    try:
        return controller_paths.inventory_directory(_plain(sources))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.controller_inventory_dir: %s" % exc)


def outside_inventory(value, name, inventory_sources):
    """value, when it is not inside an inventory directory."""
    try:
        return controller_paths.outside_inventories(str(name), _plain(value), _plain(inventory_sources))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.outside_inventory: %s" % exc)


def controller_default_path(sources, relative, name, guard_old=False):
    """The default path of an artifact beside the inventory directory."""
    try:
        return controller_paths.default_artifact(_plain(sources), str(relative), str(name), guard_old=bool(guard_old))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.controller_default_path: %s" % exc)


def controller_writable(value, name):
    """value (a directory on the controller), when the controller can write there."""
    try:
        return controller_paths.writable_directory(str(name), _plain(value))
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.numa.controller_writable: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {
            "controller_path": controller_path,
            "file_in_dir": file_in_dir,
            "controller_inventory_dir": controller_inventory_dir,
            "controller_default_path": controller_default_path,
            "outside_inventory": outside_inventory,
            "controller_writable": controller_writable,
        }
