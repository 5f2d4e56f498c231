# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Loading and checking a recorded capture (controller side).

Captures come from bug reports, that is from strangers: they are read as
hostile input. load_capture() reads regular files only, at most
CAPTURE_MAX_BYTES, and loads YAML with a depth limit and an alias budget;
validate_capture() checks the shape the reader seam replays
(reader.CaptureReader); facts_from_capture() turns one into facts.
"""

from __future__ import annotations

import json
import os
import re
import stat

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.gather import gather
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import (
    CAPTURE_MAX_BYTES,
    CAPTURE_VERSION,
    MAX_PATH_CHARS,
    CaptureReader,
    excerpt,
    file_kind,
    read_at_most,
)
from ansible_collections.gpufleet.numa.plugins.module_utils.topology.sysfs_limits import DEFAULT_SLICE

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
_MAX_PATH_DEPTH = 64  # directories in a captured path (sysfs needs about 15)
YAML_MAX_DEPTH = 32  # a capture nests 7 levels deep
YAML_ALIAS_BUDGET = 10000  # nodes that aliases may add to a document
# `nvidia-smi topo -m > host.txt`: a header line naming GPU0 and CPU Affinity.
_TOPO_HEADER = re.compile(r"^[ \t]*GPU0\b[^\n]*CPU Affinity", re.MULTILINE)


class CaptureLimitError(ValueError):
    """A capture breaks one of the hostile-input limits."""


def _yaml_loaders(yaml):
    """Two YAML loaders that compose with a depth limit and an alias
    budget: libyaml's parser with the Python composer (fast), and the pure
    Python loader (accepts tabs in block scalars; better error marks).
    Built on first use: PyYAML exists on the controller only."""
    from yaml.composer import Composer
    from yaml.events import AliasEvent
    from yaml.nodes import MappingNode, SequenceNode

    class LimitedComposer(object):
        def compose_document(self):
            self._depth = 0
            self._sizes = {}
            self._own = 0
            self._keep = []  # every node stays alive, so ids stay unique
            return Composer.compose_document(self)

        def _limit(self, problem):
            mark = self.peek_event().start_mark
            raise CaptureLimitError("line %d, column %d: %s" % (mark.line + 1, mark.column + 1, problem))

        def compose_node(self, parent, index):
            alias = self.check_event(AliasEvent)
            self._depth += 1
            if self._depth > YAML_MAX_DEPTH:
                self._limit("nested more than %d levels deep" % YAML_MAX_DEPTH)
            node = Composer.compose_node(self, parent, index)
            self._depth -= 1
            if alias:
                size = self._sizes.get(id(node))
                if size is None:
                    raise CaptureLimitError("an alias refers to the collection that holds it (recursive alias)")
            else:
                self._own += 1
                size = 1
                if isinstance(node, SequenceNode):
                    size += sum(self._sizes[id(item)] for item in node.value)
                elif isinstance(node, MappingNode):
                    size += sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
                self._sizes[id(node)] = size
                self._keep.append(node)
            if size - self._own > YAML_ALIAS_BUDGET:
                raise CaptureLimitError(
                    "aliases expand to more than %d extra nodes (an alias bomb?)" % YAML_ALIAS_BUDGET)
            return node

    class PurePython(LimitedComposer, yaml.SafeLoader):
        pass

    loaders = [PurePython]
    cparser = getattr(getattr(yaml, "_yaml", None), "CParser", None)
    if cparser is not None:
        from yaml.constructor import SafeConstructor
        from yaml.resolver import Resolver

        class Fast(LimitedComposer, cparser, SafeConstructor, Resolver):
            def __init__(self, stream):
                cparser.__init__(self, stream)
                SafeConstructor.__init__(self)
                Resolver.__init__(self)
                self.anchors = {}

            get_single_node = Composer.get_single_node
            compose_scalar_node = Composer.compose_scalar_node
            compose_sequence_node = Composer.compose_sequence_node
            compose_mapping_node = Composer.compose_mapping_node

        loaders.insert(0, Fast)
    return loaders


_LOADERS = []


def _yaml_error(exc):
    """line, column and cause of a YAML error, on one line."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem is None:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    where = "line %d, column %d: " % (mark.line + 1, mark.column + 1) if mark is not None else ""
    return "%s%s%s" % (where, problem, " (%s)" % context if context else "")


def _parse_text(text, name):
    """YAML when PyYAML is importable (the controller), JSON otherwise.

    `nvidia-smi topo -m` output saved as it is (a text file, not YAML) is
    a capture of that one command; hwloc XML and an NCCL topology dump
    are captures of the sysfs they describe (topology_xml).
    """
    from ansible_collections.gpufleet.numa.plugins.module_utils.topology.capture_xml import capture_from_xml, is_xml

    # A byte order mark (editors on Windows write one) hid the XML from is_xml.
    text = text[1:] if text.startswith("\ufeff") else text
    if is_xml(text):
        return capture_from_xml(text, name)
    try:
        import yaml  # controller side; targets replay captures as dicts
    except ImportError:
        yaml = None
    if yaml is None:
        try:
            data = json.loads(text)
        except ValueError as exc:
            data, problem = None, "is not valid JSON: %s" % exc
        except RecursionError:
            raise ValueError("capture %s is nested too deeply" % name)
    else:
        if not _LOADERS:
            _LOADERS.extend(_yaml_loaders(yaml))
        data = problem = None
        for loader in _LOADERS:
            try:
                data = yaml.load(text, Loader=loader)
                problem = None
                break
            except CaptureLimitError as exc:
                raise ValueError("capture %s: %s" % (name, exc))
            except yaml.YAMLError as exc:
                # libyaml refuses some text the YAML spec allows (tabs in a
                # block scalar, as pasted from nvidia-smi): the pure Python
                # loader decides, and its error is the one reported.
                problem = "is not valid YAML or JSON: %s" % _yaml_error(exc)
    if not isinstance(data, dict) and _TOPO_HEADER.search(text):
        return {"capture_version": CAPTURE_VERSION, "commands": {"nvidia-smi topo -m": text},
                "source": "nvidia-smi topo -m output read from %s" % name}
    if problem:
        raise ValueError("capture %s %s" % (name, problem))
    return data


def validate_capture(data, name="<capture>"):
    """Check a capture dict; return it. ValueError names the problem."""
    if not isinstance(data, dict):
        raise ValueError("capture %s must be a mapping, got %s" % (name, type(data).__name__))
    unknown = sorted(str(k) for k in data if k not in CAPTURE_KEYS)
    if unknown:
        raise ValueError(
            "capture %s has unknown keys %s (known: %s)"
            % (name, excerpt(", ".join(unknown), quote=False), ", ".join(CAPTURE_KEYS))
        )
    if "capture_version" not in data:
        raise ValueError("capture %s has no capture_version (expected %d)" % (name, CAPTURE_VERSION))
    version = data["capture_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != CAPTURE_VERSION:  # true is no version
        raise ValueError(
            "capture %s has capture_version %s; this collection reads version %d (the integer)"
            % (name, excerpt(version), CAPTURE_VERSION)
        )
    for key in ("files", "symlinks", "commands"):
        section = data.get(key)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ValueError("capture %s: %s must be a mapping of path to text" % (name, key))
        for path, value in section.items():
            if not isinstance(path, str) or (value is not None and not isinstance(value, (str, int, float))):
                raise ValueError("capture %s: %s entry %s must map a string to text" % (name, key, excerpt(path)))
            if key != "commands" and (len(path) > MAX_PATH_CHARS or path.count("/") > _MAX_PATH_DEPTH
                                      or (key == "symlinks" and len(str(value)) > MAX_PATH_CHARS)):
                raise ValueError("capture %s: %s entry %s is longer than %d characters or deeper than %d "
                                 "directories" % (name, key, excerpt(path), MAX_PATH_CHARS, _MAX_PATH_DEPTH))
    directories = data.get("directories")
    if directories is not None:
        if not isinstance(directories, dict):
            raise ValueError("capture %s: directories must be a mapping of path to a list of names" % name)
        for path, names in directories.items():
            if not isinstance(names, list):
                raise ValueError("capture %s: directories entry %s must be a list of names" % (name, excerpt(path)))
            if not isinstance(path, str) or len(path) > MAX_PATH_CHARS or path.count("/") > _MAX_PATH_DEPTH:
                raise ValueError("capture %s: directories entry %s must be a path of at most %d characters "
                                 "and %d directories" % (name, excerpt(path), MAX_PATH_CHARS, _MAX_PATH_DEPTH))
    if data.get("nvml") is not None and not isinstance(data["nvml"], dict):
        raise ValueError("capture %s: nvml must be a mapping" % name)
    if data.get("hostname") is not None and not isinstance(data["hostname"], str):
        raise ValueError("capture %s: hostname must be a string" % name)
    return data


def read_capture_file(path, max_bytes=CAPTURE_MAX_BYTES, name=None):
    """The text of a capture file: a regular file of at most max_bytes
    UTF-8 bytes. Never blocks (a FIFO or a device is refused before any
    read). Raises ValueError naming the file and the problem."""
    name = name or path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        raise ValueError("capture %s cannot be read: %s" % (name, getattr(exc, "strerror", None) or exc))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError("capture %s cannot be read: it is %s, not a regular file" % (name, file_kind(mode)))
        data = read_at_most(fd, max_bytes)
    except OSError as exc:
        raise ValueError("capture %s cannot be read: %s" % (name, exc.strerror or exc))
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError("capture %s is larger than %d bytes (capture_max_bytes); not read" % (name, max_bytes))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("capture %s is not UTF-8 text (byte %d)" % (name, exc.start))


def load_capture(path_or_text, name=None, max_bytes=CAPTURE_MAX_BYTES):
    """Load and validate a capture from a dict, a file path or YAML/JSON text.

    A string holding a newline or starting with "{" is text; any other
    string is a path. A file or text may also be the plain output of
    `nvidia-smi topo -m`. Files and texts larger than max_bytes are
    refused. Raises ValueError naming the file and the problem.
    """
    if isinstance(path_or_text, dict):
        return validate_capture(path_or_text, name or "<capture>")
    if not isinstance(path_or_text, str):
        raise ValueError("capture must be a path, text or mapping, got %s" % type(path_or_text).__name__)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError("capture_max_bytes must be a positive integer, got %s" % excerpt(max_bytes))
    text = path_or_text
    if "\n" not in text and not text.lstrip().startswith("{"):
        name = name or text
        text = read_capture_file(text, max_bytes, name)
    name = name or "<text>"
    if len(text) > max_bytes:
        raise ValueError("capture %s is larger than %d bytes (capture_max_bytes); not read" % (name, max_bytes))
    if not text.strip():
        raise ValueError("capture %s is empty" % name)
    return validate_capture(_parse_text(text, name), name)


def facts_from_capture(capture, hostname=None, max_bytes=CAPTURE_MAX_BYTES, cgroup_slice=DEFAULT_SLICE):
    """Facts from a capture (a dict, a file path or YAML/JSON text, or the
    plain output of nvidia-smi topo -m).

    Raises ValueError naming the capture and the problem when it is not a
    valid capture (or larger than max_bytes). hostname overrides the
    capture's own.
    """
    data = load_capture(capture, max_bytes=max_bytes)
    reader = CaptureReader(data)
    facts = gather(reader, hostname=hostname or data.get("hostname"), captured=True, cgroup_slice=cgroup_slice).facts
    return facts
