# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""LiveReader: the reader seam (reader.py) on the running machine.

A root= tree may hold anything, so it is read as hostile input:
LiveReader keeps every read below its root (symlinks are resolved against
the root), reads regular files and directories only, never blocks on a
FIFO or device, and reads at most LIVE_READ_MAX_BYTES per file. What it
refuses it notes in `errors`. Commands run in the C locale, killed with
their process group after a timeout. Standard library only (runs on
targets).
"""

from __future__ import annotations

import errno
import os
import posixpath
import shlex
import signal
import stat
import subprocess

from ansible_collections.gpufleet.numa.plugins.module_utils.topology.reader import (
    C_LOCALE,
    COMMAND_TIMEOUT,
    MAX_SYMLINK_HOPS,
    Reader,
    excerpt,
    file_kind,
    read_at_most,
)

LIVE_READ_MAX_BYTES = 1024 * 1024  # a sysfs attribute is at most one page
LIVE_LISTDIR_MAX = 100000  # entries of one directory


class CommandTimeout(Exception):
    """A command ran past its timeout and was killed."""


def default_runner(argv, timeout=COMMAND_TIMEOUT):
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
                if hops > MAX_SYMLINK_HOPS:
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
                rc, out, err = default_runner([binary] + argv[1:], timeout=self.timeout)
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
