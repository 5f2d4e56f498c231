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

Captures come from bug reports, that is from strangers, and a root= tree
may hold anything: both are read as hostile input. load_capture() reads
regular files only, at most CAPTURE_MAX_BYTES, and loads YAML with a depth
limit and an alias budget; LiveReader keeps every read below its root
(symlinks are resolved against the root), reads regular files and
directories only, never blocks on a FIFO or device, and reads at most
LIVE_READ_MAX_BYTES per file. What it refuses it notes in `errors`.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import re
import shlex
import signal
import stat
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
_MAX_PATH_CHARS = 4096  # PATH_MAX: longer paths and link targets are refused
_MAX_PATH_PARTS = 1024  # components walked while resolving one path
_MAX_PATH_DEPTH = 64  # directories in a captured path (sysfs needs about 15)
C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}

# Hostile-input limits (docs/numa_facts.md "Limits").
CAPTURE_MAX_BYTES = 4 * 1024 * 1024  # the largest recorded capture is under 100 KiB
YAML_MAX_DEPTH = 32  # a capture nests 7 levels deep
YAML_ALIAS_BUDGET = 10000  # nodes that aliases may add to a document
LIVE_READ_MAX_BYTES = 1024 * 1024  # a sysfs attribute is at most one page
LIVE_LISTDIR_MAX = 100000  # entries of one directory
COMMAND_TIMEOUT = 30  # seconds a command may run (nvidia-smi)
EXCERPT_CHARS = 80
# `nvidia-smi topo -m > host.txt`: a header line naming GPU0 and CPU Affinity.
_TOPO_HEADER = re.compile(r"^[ \t]*GPU0\b[^\n]*CPU Affinity", re.MULTILINE)


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
            if hops > _MAX_SYMLINK_HOPS or len(target) > _MAX_PATH_CHARS:
                return None
            if target.startswith("/"):
                stack = []
            # A relative target is relative to the link's directory, which
            # is what `stack` holds at this point.
            todo.extend(p for p in reversed(target.split("/")) if p)
        return "/" + "/".join(stack)


class CommandTimeout(Exception):
    """A command ran past its timeout and was killed."""


def _default_runner(argv, timeout=COMMAND_TIMEOUT):
    """Run argv in the C locale; (rc, stdout, stderr) like run_command.

    A command still running after `timeout` seconds is killed with its
    whole process group (a wrapper script and what it started) and
    CommandTimeout is raised.
    """
    env = dict(os.environ)
    env.update(C_LOCALE)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, start_new_session=True,
        )
    except (OSError, ValueError) as exc:
        return 127, "", str(exc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.communicate()
        raise CommandTimeout("no answer within %s s (nvidia_smi_timeout); killed" % timeout)
    return (
        proc.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
    )


def _default_which(name):
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    for directory in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def module_which(get_bin_path):
    """which(name) for a module: a path is taken as it is when it is an
    executable file; a bare name is looked up with the module's own
    get_bin_path (PATH plus the usual sbin directories)."""
    def which(name):
        if "/" in name:
            return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
        return get_bin_path(name)
    return which


class _Refused(Exception):
    """A path below the root that must not be read (escape, loop, FIFO...)."""


class LiveReader(Reader):
    """Reads the running machine.

    root: prefix under which /sys and /proc are read ("/" normally; a
    directory holding a copied tree in tests or containers). It must be an
    existing directory (ValueError otherwise). Every path is resolved
    below it: an absolute symlink target is taken relative to the root and
    a ".." that would climb above it is refused.
    runner(argv) -> (rc, stdout, stderr): subprocess with the C locale and
    `timeout` seconds by default.
    which(name) -> path or None: finds a binary.
    binaries: canonical command name -> name or path to run instead
    (e.g. {"nvidia-smi": "/opt/nvidia/bin/nvidia-smi"}).
    timeout: seconds a command may run before it is killed.

    Reads refused or failing for another reason than a missing file are
    noted in `errors` (one line each, naming the path and the reason).
    """

    def __init__(self, root="/", runner=None, which=None, binaries=None, timeout=COMMAND_TIMEOUT):
        self.root = os.path.realpath(os.path.abspath(root or "/"))
        if not os.path.isdir(self.root):
            raise ValueError("root %s %s" % (root, "is not a directory" if os.path.exists(self.root)
                                             else "does not exist"))
        self.timeout = timeout
        self._runner = runner
        self._which = which or _default_which
        self._binaries = dict(binaries or {})
        self._timed_out = set()
        self.errors = []

    def _note(self, path, problem):
        line = "%s: %s" % (path, problem)
        if line not in self.errors:
            self.errors.append(line)

    def _host(self, path, follow_last=True):
        """The host path of `path` (as written on the machine) below the
        root, with every symlink resolved inside the root; None when a
        component is missing; _Refused when it leaves the root or loops."""
        if self.root == "/":
            return posixpath.normpath("/" + path.lstrip("/"))
        todo = [p for p in path.split("/") if p]
        todo.reverse()
        stack = []
        hops = 0
        absolute = None  # the last absolute symlink target followed
        while todo:
            part = todo.pop()
            if part == ".":
                continue
            if part == "..":
                if not stack:
                    raise _Refused("leads above the root %s; not read" % self.root)
                stack.pop()
                continue
            host = os.path.join(self.root, *(stack + [part]))
            try:
                info = os.lstat(host)
            except (OSError, ValueError):
                if absolute is not None:
                    raise _Refused("symlink to %s: taken below the root %s, where it does not exist; not read"
                                   % (excerpt(absolute), self.root))
                return None
            if stat.S_ISLNK(info.st_mode) and (todo or follow_last):
                hops += 1
                if hops > _MAX_SYMLINK_HOPS:
                    raise _Refused("too many levels of symbolic links; not read")
                try:
                    target = os.readlink(host)
                except OSError:
                    return None
                if target.startswith("/"):
                    stack = []  # relative to the root, not to this machine's /
                    absolute = target
                todo.extend(reversed([p for p in target.split("/") if p]))
                continue
            stack.append(part)
        return os.path.join(self.root, *stack)

    def read(self, path):
        try:
            host = self._host(path)
            if host is None:
                return None
            fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                         | (getattr(os, "O_NOFOLLOW", 0) if self.root != "/" else 0))
        except _Refused as exc:
            self._note(path, str(exc))
            return None
        except (OSError, ValueError) as exc:
            if getattr(exc, "errno", None) not in (errno.ENOENT, errno.ENOTDIR):
                self._note(path, "cannot be read (%s)" % (getattr(exc, "strerror", None) or exc))
            return None
        try:
            kind = os.fstat(fd).st_mode
            if not stat.S_ISREG(kind):
                self._note(path, "is %s, not a regular file; not read" % file_kind(kind))
                return None
            data = read_at_most(fd, LIVE_READ_MAX_BYTES)
            if len(data) > LIVE_READ_MAX_BYTES:
                self._note(path, "is larger than %d bytes; not read" % LIVE_READ_MAX_BYTES)
                return None
            return data.decode("utf-8", "replace")
        except OSError as exc:
            self._note(path, "cannot be read (%s)" % (exc.strerror or exc))
            return None
        finally:
            os.close(fd)

    def listdir(self, path):
        try:
            host = self._host(path)
            if host is None:
                return None
            names = []
            with os.scandir(host) as entries:
                for entry in entries:
                    if len(names) >= LIVE_LISTDIR_MAX:
                        self._note(path, "holds more than %d entries; the rest is ignored" % LIVE_LISTDIR_MAX)
                        break
                    names.append(entry.name)
            return sorted(names)
        except _Refused as exc:
            self._note(path, str(exc))
            return None
        except (OSError, ValueError):
            return None

    def readlink(self, path):
        try:
            host = self._host(path, follow_last=False)
            return None if host is None else os.readlink(host)
        except _Refused as exc:
            self._note(path, str(exc))
            return None
        except (OSError, IOError, ValueError):
            return None

    def run(self, command):
        try:
            argv = shlex.split(command)
        except ValueError:
            return None
        if not argv:
            return None
        name = self._binaries.get(argv[0], argv[0])
        if name in self._timed_out:
            self.errors.append("%s: not run, %s did not answer before" % (command, name))
            return None
        binary = self._which(name)
        if not binary:
            return None
        try:
            if self._runner is None:
                rc, out, err = _default_runner([binary] + argv[1:], timeout=self.timeout)
            else:
                rc, out, err = self._runner([binary] + argv[1:])
        except CommandTimeout as exc:
            self._timed_out.add(name)
            self.errors.append("%s: %s" % (command, exc))
            return None
        except Exception as exc:  # a runner must not take the module down
            self.errors.append("%s: %s" % (command, excerpt(exc, 200)))
            return None
        if rc != 0:
            self.errors.append("%s exited %s: %s" % (command, rc, excerpt((err or out or "").strip(), 200)))
            return None
        return out


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
            if key != "commands" and (len(path) > _MAX_PATH_CHARS or path.count("/") > _MAX_PATH_DEPTH
                                      or (key == "symlinks" and len(str(value)) > _MAX_PATH_CHARS)):
                raise ValueError("capture %s: %s entry %s is longer than %d characters or deeper than %d "
                                 "directories" % (name, key, excerpt(path), _MAX_PATH_CHARS, _MAX_PATH_DEPTH))
    directories = data.get("directories")
    if directories is not None:
        if not isinstance(directories, dict):
            raise ValueError("capture %s: directories must be a mapping of path to a list of names" % name)
        for path, names in directories.items():
            if not isinstance(names, list):
                raise ValueError("capture %s: directories entry %s must be a list of names" % (name, excerpt(path)))
            if not isinstance(path, str) or len(path) > _MAX_PATH_CHARS or path.count("/") > _MAX_PATH_DEPTH:
                raise ValueError("capture %s: directories entry %s must be a path of at most %d characters "
                                 "and %d directories" % (name, excerpt(path), _MAX_PATH_CHARS, _MAX_PATH_DEPTH))
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
