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

LiveReader reads a real machine (optionally below a root prefix),
CaptureReader replays a capture dict, RecordingReader wraps another reader
and writes everything it answers into a capture. Standard library only.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import subprocess

CAPTURE_VERSION = 1
CAPTURE_KEYS = (
    "capture_version",
    "hostname",
    "files",
    "symlinks",
    "directories",
    "commands",
    "nvml",
    "source",
    "notes",
    "synthetic",
)
_MAX_SYMLINK_HOPS = 40
C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}


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
        path = posixpath.normpath(path)
        if not path.startswith("/"):
            return None
        hops = 0
        parts = [p for p in path.split("/") if p]
        resolved = "/"
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                resolved = posixpath.dirname(resolved) or "/"
                continue
            candidate = posixpath.join(resolved, part)
            target = self.readlink(candidate)
            if target is None:
                resolved = candidate
                continue
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                return None
            if target.startswith("/"):
                resolved = "/"
            # A relative target is relative to the link's directory, which
            # is what `resolved` holds at this point.
            parts = [p for p in target.split("/") if p] + parts
        return resolved


def _default_runner(argv):
    """Run argv in the C locale; (rc, stdout, stderr) like run_command."""
    env = dict(os.environ)
    env.update(C_LOCALE)
    try:
        proc = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, timeout=60, check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, "", str(exc)
    return (
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def _default_which(name):
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    for directory in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class LiveReader(Reader):
    """Reads the running machine.

    root: prefix under which /sys and /proc are read ("/" normally; a
    directory holding a copied tree in tests or containers).
    runner(argv) -> (rc, stdout, stderr): AnsibleModule.run_command with
    the C locale in the module, subprocess otherwise.
    which(name) -> path or None: finds a binary.
    binaries: canonical command name -> name or path to run instead
    (e.g. {"nvidia-smi": "/opt/nvidia/bin/nvidia-smi"}).
    """

    def __init__(self, root="/", runner=None, which=None, binaries=None):
        self.root = os.path.abspath(root or "/")
        self._runner = runner or _default_runner
        self._which = which or _default_which
        self._binaries = dict(binaries or {})
        self.errors = []

    def _host(self, path):
        if self.root == "/":
            return path
        return os.path.join(self.root, path.lstrip("/"))

    def read(self, path):
        try:
            with open(self._host(path), "rb") as handle:
                return handle.read().decode("utf-8", "replace")
        except (OSError, IOError):
            return None

    def listdir(self, path):
        try:
            return sorted(os.listdir(self._host(path)))
        except (OSError, IOError):
            return None

    def readlink(self, path):
        try:
            return os.readlink(self._host(path))
        except (OSError, IOError, ValueError):
            return None

    def run(self, command):
        try:
            argv = shlex.split(command)
        except ValueError:
            return None
        if not argv:
            return None
        binary = self._which(self._binaries.get(argv[0], argv[0]))
        if not binary:
            return None
        try:
            rc, out, err = self._runner([binary] + argv[1:])
        except Exception as exc:  # a runner must not take the module down
            self.errors.append("%s: %s" % (command, exc))
            return None
        if rc != 0:
            self.errors.append("%s exited %s: %s" % (command, rc, (err or out or "").strip()[:200]))
            return None
        return out


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
            self.capture["files"][path] = value
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

    def record_nvml(self, raw):
        if raw is not None:
            self.capture["nvml"] = raw


def _parse_text(text, name):
    """YAML when PyYAML is importable (the controller), JSON otherwise."""
    try:
        import yaml  # controller side; targets replay captures as dicts
    except ImportError:
        yaml = None
    if yaml is not None:
        try:
            # libyaml's loader is 10-20x faster on large captures.
            return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            raise ValueError("capture %s is not valid YAML or JSON: %s" % (name, str(exc).splitlines()[0]))
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError("capture %s is not valid JSON: %s" % (name, exc))


def validate_capture(data, name="<capture>"):
    """Check a capture dict; return it. ValueError names the problem."""
    if not isinstance(data, dict):
        raise ValueError("capture %s must be a mapping, got %s" % (name, type(data).__name__))
    unknown = sorted(str(k) for k in data if k not in CAPTURE_KEYS)
    if unknown:
        raise ValueError(
            "capture %s has unknown keys %s (known: %s)" % (name, ", ".join(unknown), ", ".join(CAPTURE_KEYS))
        )
    if "capture_version" not in data:
        raise ValueError("capture %s has no capture_version (expected %d)" % (name, CAPTURE_VERSION))
    if data["capture_version"] != CAPTURE_VERSION:
        raise ValueError(
            "capture %s has capture_version %r; this collection reads version %d"
            % (name, data["capture_version"], CAPTURE_VERSION)
        )
    for key in ("files", "symlinks", "commands"):
        section = data.get(key)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ValueError("capture %s: %s must be a mapping of path to text" % (name, key))
        for path, value in section.items():
            if not isinstance(path, str) or (value is not None and not isinstance(value, (str, int, float))):
                raise ValueError("capture %s: %s entry %r must map a string to text" % (name, key, path))
    directories = data.get("directories")
    if directories is not None:
        if not isinstance(directories, dict):
            raise ValueError("capture %s: directories must be a mapping of path to a list of names" % name)
        for path, names in directories.items():
            if not isinstance(names, list):
                raise ValueError("capture %s: directories entry %r must be a list of names" % (name, path))
    if data.get("nvml") is not None and not isinstance(data["nvml"], dict):
        raise ValueError("capture %s: nvml must be a mapping" % name)
    if data.get("hostname") is not None and not isinstance(data["hostname"], str):
        raise ValueError("capture %s: hostname must be a string" % name)
    return data


def load_capture(path_or_text, name=None):
    """Load and validate a capture from a dict, a file path or YAML/JSON text.

    A string holding a newline or starting with "{" is text; any other
    string is a path. Raises ValueError naming the file and the problem.
    """
    if isinstance(path_or_text, dict):
        return validate_capture(path_or_text, name or "<capture>")
    if not isinstance(path_or_text, str):
        raise ValueError("capture must be a path, text or mapping, got %s" % type(path_or_text).__name__)
    text = path_or_text
    if "\n" not in text and not text.lstrip().startswith("{"):
        name = name or text
        try:
            with open(text, "rb") as handle:
                text = handle.read().decode("utf-8")
        except (OSError, IOError) as exc:
            raise ValueError("capture %s cannot be read: %s" % (name, exc.strerror or exc))
        except UnicodeDecodeError:
            raise ValueError("capture %s is not UTF-8 text" % name)
    name = name or "<text>"
    if not text.strip():
        raise ValueError("capture %s is empty" % name)
    return validate_capture(_parse_text(text, name), name)
