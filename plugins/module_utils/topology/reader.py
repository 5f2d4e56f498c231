# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The one seam between the topology code and a machine.

Every file, directory listing, symlink and command the fact gathering
needs goes through a reader with five methods that never raise:

    read(path)      -> str or None    (file content; None when unreadable)
    listdir(path)   -> list or None   (sorted names; None when not a directory)
    readlink(path)  -> str or None    (symlink target; None when not a link)
    realpath(path)  -> str or None    (path with every symlink resolved)
    run(command)    -> str or None    (stdout in the C locale; None when the
                                       binary is missing or the command fails)

Paths are always written as on the host ("/sys/bus/pci/devices/..."), and
commands by their canonical command line ("nvidia-smi topo -m"), so a
capture recorded on one machine replays on any other.

CaptureReader replays a capture dict, RecordingReader wraps another reader
and writes everything it answers into a capture; LiveReader (live.py)
reads a real machine. Loading and checking a recorded capture, which
comes from strangers, is capture.py's job (controller side). Standard
library only: this module ships to hosts.
"""

from __future__ import annotations

import os
import posixpath
import stat

CAPTURE_VERSION = 1
MAX_SYMLINK_HOPS = 40
MAX_PATH_CHARS = 4096  # PATH_MAX: longer paths and link targets are refused
_MAX_PATH_PARTS = 1024  # components walked while resolving one path
C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}

# Hostile-input limits (docs/numa_facts.md "Limits"); the module's
# capture_max_bytes default, so it lives on the side that ships.
CAPTURE_MAX_BYTES = 4 * 1024 * 1024  # the largest recorded capture is under 100 KiB
COMMAND_TIMEOUT = 30  # seconds a command may run (nvidia-smi)
EXCERPT_CHARS = 80


def excerpt(text, limit=EXCERPT_CHARS, quote=True):
    """A value read from a file or command, fit for a message: at most
    `limit` characters, quoted and escaped (repr), "..." when cut. Values
    that are not strings are shown by their repr, cut the same way.
    quote=False leaves the quotes off (still escaped)."""
    if not isinstance(text, str):
        shown = repr(text)
        return shown if len(shown) <= limit else shown[:limit] + "..."
    shown = repr(text[:limit])
    if not quote:
        shown = shown[1:-1]
    return shown if len(text) <= limit else shown + "..."


class Reader(object):
    """Shared behaviour: realpath() is built on readlink() so that a
    recording or replaying reader resolves paths exactly like a live one."""

    def read(self, path):
        return None

    def listdir(self, path):
        return None

    def readlink(self, path):
        return None

    def run(self, command):
        return None

    def nvml(self):
        """The raw NVML record a capture holds (None for live readers)."""
        return None

    def realpath(self, path):
        """None when not absolute, on a symlink loop, or past
        _MAX_PATH_PARTS components (a forged capture's link targets)."""
        path = posixpath.normpath(path)
        if not path.startswith("/"):
            return None
        hops = 0
        todo = [p for p in reversed(path.split("/")) if p]  # next component last
        stack = []
        steps = 0
        while todo:
            steps += 1
            if steps > _MAX_PATH_PARTS:
                return None
            part = todo.pop()
            if part == ".":
                continue
            if part == "..":
                if stack:
                    stack.pop()
                continue
            candidate = "/" + "/".join(stack + [part])
            target = self.readlink(candidate)
            if target is None:
                stack.append(part)
                continue
            hops += 1
            if hops > MAX_SYMLINK_HOPS or len(target) > MAX_PATH_CHARS:
                return None
            if target.startswith("/"):
                stack = []
            # A relative target is relative to the link's directory, which
            # is what `stack` holds at this point.
            todo.extend(p for p in reversed(target.split("/")) if p)
        return "/" + "/".join(stack)


def module_which(get_bin_path):
    """which(name) for a module: a path is taken as it is when it is an
    executable file; a bare name is looked up with the module's own
    get_bin_path (PATH plus the usual sbin directories)."""
    def which(name):
        if "/" in name:
            return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
        return get_bin_path(name)
    return which


def file_kind(mode):
    """What a file that is not a regular file is, in words (for messages)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def read_at_most(fd, max_bytes):
    """The bytes of an open file, reading at most max_bytes + 1 (so that a
    caller can tell a file over its limit without reading it whole)."""
    chunks, size = [], 0
    while size <= max_bytes:
        chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class CaptureReader(Reader):
    """Replays a validated capture dict (see load_capture)."""

    def __init__(self, capture):
        self.capture = capture
        self._files = capture.get("files") or {}
        self._symlinks = capture.get("symlinks") or {}
        self._directories = capture.get("directories") or {}
        self._commands = capture.get("commands") or {}
        self._children = None

    def _through_links(self, path):
        """The path with symlinks resolved when it differs, else None: a
        capture may hold a file under either of its names."""
        real = self.realpath(path) if self._symlinks else None
        return real if real and real != posixpath.normpath(path) else None

    def read(self, path):
        value = self._files.get(path)
        if value is None:
            real = self._through_links(path)
            value = self._files.get(real) if real else None
        return None if value is None else str(value)

    def _derived_children(self):
        # Listings not recorded explicitly are derived from the recorded
        # paths, so hand-written captures need not list every directory.
        if self._children is None:
            children = {}
            for key in list(self._files) + list(self._symlinks) + list(self._directories):
                path = str(key).rstrip("/")
                while path:
                    parent, dummy_sep, name = path.rpartition("/")
                    names = children.setdefault(parent or "/", set())
                    if name in names:
                        break  # this parent's ancestors are registered already
                    names.add(name)
                    path = parent
            self._children = children
        return self._children

    def listdir(self, path):
        path = posixpath.normpath(path)
        for candidate in (path, self._through_links(path)):
            if candidate is None:
                continue
            if candidate in self._directories:
                return sorted(str(name) for name in self._directories[candidate] or [])
            names = self._derived_children().get(candidate)
            if names:
                return sorted(names)
        return None

    def readlink(self, path):
        value = self._symlinks.get(posixpath.normpath(path))
        return None if value is None else str(value)

    def run(self, command):
        value = self._commands.get(command)
        return None if value is None else str(value)

    def nvml(self):
        return self.capture.get("nvml")


def _status_cpu_lines(text):
    """/proc/self/status as a capture keeps it: the Cpus_allowed lines only
    (the rest names the process, its users and groups, and is not read)."""
    return "".join(line for line in text.splitlines(True) if line.startswith("Cpus_allowed"))


def _mountinfo_cgroup_lines(text):
    """/proc/self/mountinfo as a capture keeps it: the cgroup mounts only
    (the others name the host's disks and paths, and are not read)."""
    return "".join(line for line in text.splitlines(True) if " - cgroup" in line)


# Files recorded in part: path -> what of the text a capture keeps.
_RECORD_FILTERS = {"/proc/self/status": _status_cpu_lines, "/proc/self/mountinfo": _mountinfo_cgroup_lines}


class RecordingReader(Reader):
    """Wraps a reader and records every answer into self.capture."""

    def __init__(self, inner, hostname=None):
        self.inner = inner
        self.capture = {
            "capture_version": CAPTURE_VERSION,
            "hostname": hostname,
            "files": {},
            "symlinks": {},
            "directories": {},
            "commands": {},
        }

    def read(self, path):
        value = self.inner.read(path)
        if value is not None:
            self.capture["files"][path] = _RECORD_FILTERS[path](value) if path in _RECORD_FILTERS else value
        return value

    def listdir(self, path):
        value = self.inner.listdir(path)
        if value is not None:
            self.capture["directories"][path] = list(value)
        return value

    def readlink(self, path):
        value = self.inner.readlink(path)
        if value is not None:
            self.capture["symlinks"][path] = value
        return value

    def run(self, command):
        value = self.inner.run(command)
        if value is not None:
            self.capture["commands"][command] = value
        return value

    def nvml(self):
        return self.inner.nvml()

    @property
    def errors(self):
        return getattr(self.inner, "errors", [])

    def record_nvml(self, raw):
        if raw is not None:
            self.capture["nvml"] = raw
