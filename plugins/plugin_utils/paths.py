# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Paths the controller writes: where they come from and where they stay.

A name that becomes a file name on the controller (an inventory host
name) is a plain file name, and a file written into a directory stays in
that directory: a host named "../group_vars/all" must not replace the
inventory's group_vars/all.yml with a capture. Controller-side paths are
absolute: a relative one would be read beside the playbook (lookup) and
written beside the current directory (copy).

Errors follow value_checks: ValueError("VARIABLE: RULE (got VALUE)").
Controller only (os.path on the controller's file system).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.numa.plugins.module_utils.common.checks import fail, text

# Letters, digits and the punctuation host names and IP addresses use; not
# starting with a dot (no ".", "..", or hidden files) or a dash.
_PLAIN_FILE_NAME = re.compile(r"[A-Za-z0-9_@+=:,~\[\]][A-Za-z0-9._@+=:,~\[\]-]{0,199}")


def plain_file_name(name, value):
    """A name that is used as one file name: no '/', no '..', no leading dot
    or dash, no control characters, at most 200 characters."""
    return text(name, value, _PLAIN_FILE_NAME, max_length=200,
                rule="must be a plain file name (letters, digits and ._@+=:,~[]- only, not starting with '.' or '-', "
                     "no '/')")


def controller_path(name, value):
    """An absolute path on the controller, normalised (no '..' left)."""
    text(name, value)
    if not os.path.isabs(value):
        fail(name, "must be an absolute path on the controller (a relative one would be read beside the playbook "
                   "and written beside the current directory)", value)
    if "{{" in value or "{%" in value:
        # ansible-core 2.17/2.18 hand on a value of hostvars['localhost'] whose
        # template fails (inventory_dir, say) as the template's own text.
        fail(name, "must not hold an unrendered template (set it for the controller without inventory_dir)", value)
    if value.endswith("/"):
        fail(name, "must name a file, not a directory", value)
    return os.path.normpath(value)


def path_under(name, path, directory):
    """path, when it stays inside directory (both as written and with the
    symlinks of its existing parents resolved); ValueError otherwise."""
    directory = os.path.normpath(os.path.abspath(directory))
    path = os.path.normpath(os.path.abspath(path))
    inside = path.startswith(directory.rstrip(os.sep) + os.sep)
    if inside:
        real_directory = os.path.realpath(directory)
        real_parent = os.path.realpath(os.path.dirname(path))
        inside = real_parent == real_directory or real_parent.startswith(real_directory.rstrip(os.sep) + os.sep)
    if not inside:
        fail(name, "must stay inside %s" % directory, path)
    return path


def file_in_directory(directory, file_name, suffix="", directory_variable="directory", file_variable="file name"):
    """directory/file_name+suffix, after checking that file_name is a plain
    file name and that the path stays inside directory."""
    text(directory_variable, directory)
    plain_file_name(file_variable, file_name)
    return path_under(file_variable, os.path.join(directory, file_name + suffix), directory)


def inventory_directory(sources):
    """The controller's inventory directory: the first inventory source
    when it is a directory, else the directory that holds it (what
    inventory_dir is for the hosts of a one-source inventory; the implicit
    localhost has no inventory_dir of its own)."""
    if not isinstance(sources, (list, tuple)) or not sources or not isinstance(sources[0], str):
        fail("ansible_inventory_sources", "must hold at least one inventory path", sources)
    first = os.path.abspath(sources[0])
    return first if os.path.isdir(first) else os.path.dirname(first)


# Default artifacts live in <inventory directory>.gpufleet, beside the
# inventory: Ansible reads every file under an inventory directory as
# inventory (a kept plan there becomes a host named "{").
ARTIFACT_SUFFIX = ".gpufleet"


def artifact_directory(sources):
    """Where the playbooks keep their default artifacts: the inventory
    directory's own name plus ARTIFACT_SUFFIX, in the directory above it
    (inventories/prod -> inventories/prod.gpufleet)."""
    inventory = inventory_directory(sources)
    if os.path.dirname(inventory) == inventory:
        fail("ansible_inventory_sources", "has no directory beside it for the playbooks' files (set the paths)", inventory)
    return inventory + ARTIFACT_SUFFIX


def inventory_directories(sources):
    """The directories of the inventory sources that exist on the
    controller (a directory source, or the directory of a file source),
    as written and with symlinks resolved; a host list ("a,b,") has none."""
    directories = []
    for source in sources if isinstance(sources, (list, tuple)) else []:
        if not isinstance(source, str) or not os.path.exists(source):
            continue
        source = os.path.abspath(source)
        directory = source if os.path.isdir(source) else os.path.dirname(source)
        for variant in (os.path.normpath(directory), os.path.realpath(directory)):
            if variant not in directories:
                directories.append(variant)
    return directories


def _inside(path, directory):
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def parsed_directories(sources):
    """What Ansible reads as inventory: a directory source whole; of a file
    source, the group_vars and host_vars beside it (the file's other
    neighbours are not read)."""
    parsed = []
    for source in sources if isinstance(sources, (list, tuple)) else []:
        if not isinstance(source, str) or not os.path.exists(source):
            continue
        if os.path.isdir(source):
            parsed.extend(inventory_directories([source]))
        else:
            for directory in inventory_directories([source]):
                parsed.extend(os.path.join(directory, sub) for sub in ("group_vars", "host_vars"))
    return parsed


def outside_inventories(name, path, sources):
    """path, when it is not in (nor is) what Ansible reads as inventory
    (parsed_directories); ValueError naming `name` otherwise: Ansible would
    parse what is written there as inventory on the next run."""
    text(name, path)
    written = os.path.normpath(os.path.abspath(path))
    resolved = os.path.realpath(written)
    for directory in parsed_directories(sources):
        if _inside(written, directory) or _inside(resolved, directory):
            fail(name, "must not be inside the inventory directory %s (the next run would read it as inventory); "
                       "leave it unset for the default beside it (%s), or set it outside"
                 % (directory, directory + ARTIFACT_SUFFIX), path)
    return path


def default_artifact(sources, relative, name, guard_old=False):
    """The default path of an artifact, artifact_directory(sources)/relative.
    With guard_old, a file at the old default place (inside the inventory
    directory) while none is at the new one is an error saying to move it:
    a kept plan must not be left behind and silently start from scratch."""
    new = os.path.join(artifact_directory(sources), relative)
    if guard_old:
        old = os.path.join(inventory_directory(sources), relative)
        if os.path.lexists(old) and not os.path.lexists(new):
            fail(name, "is unset, and a file is kept at the old default place, inside the inventory (the next run "
                       "would read it as inventory); move it to the new default: mkdir -p %s && mv %s %s"
                 % (os.path.dirname(new), old, new), old)
    return new


def controller_file(find_needle, path):
    """The absolute path of a file a task names on the controller (a
    capture, a plan), or None when there is none: an absolute path as it
    is; a relative one looked up as Ansible looks up a task's files (the
    action's find_needle: the role's and play's files/ directories, the
    playbook directory), then in the current directory."""
    from ansible.errors import AnsibleError

    if os.path.isabs(path):
        return path if os.path.exists(path) else None
    try:
        return find_needle("files", path)
    except AnsibleError:
        pass
    candidate = os.path.abspath(path)
    return candidate if os.path.exists(candidate) else None


def writable_directory(name, directory):
    """directory, when the controller can create or replace files in it:
    it, or the nearest of its parents that exists (the playbook creates
    the rest), is a directory this process may write. ValueError naming
    `name` otherwise, before anything changes: a run that found out at its
    end would already have deployed and rebuilt the gateway."""
    existing = os.path.normpath(os.path.abspath(directory))
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        fail(name, "cannot be created on the controller: %s is not a directory" % existing, directory)
    if not os.access(existing, os.W_OK | os.X_OK):
        fail(name, "cannot be written on the controller: %s is read-only for this user (or its file system is)"
             % existing, directory)
    return directory
