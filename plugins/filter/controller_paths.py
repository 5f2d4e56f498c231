# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the paths the playbooks write on the controller:
controller_path, file_in_dir and controller_inventory_dir.

Thin shells around plugin_utils/paths.py; see docs/deploy.md
(Controller-side paths).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.numa.plugins.plugin_utils import paths as controller_paths
from ansible_collections.gpufleet.numa.plugins.plugin_utils.plain_values import plain as _plain


def controller_path(value, name):
    """An absolute, normalised path on the controller; fails naming `name`."""
    try:
        return controller_paths.controller_path(str(name), _plain(value))
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


class FilterModule(object):
    def filters(self):
        return {
            "controller_path": controller_path,
            "file_in_dir": file_in_dir,
            "controller_inventory_dir": controller_inventory_dir,
        }
