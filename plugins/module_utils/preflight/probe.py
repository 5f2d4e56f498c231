# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The memory-policy syscall probe: proves that a unit's own sandbox lets
its process bind.

probe_command() is the canonical command line (the reader seam's key, so a
capture replays it): `systemd-run --wait --pipe --quiet --collect` with the
unit's NUMA directives, its sandboxing (vllm_hardening) and its User=/
Group= where the account exists, then the unit's numactl prefix when it
binds with numactl, then the word PROBE_WORD followed by the unit's nodes,
CPUs and memory policy. probe_runner() runs it on a live host: PROBE_WORD
becomes `PYTHON -c PROBE_SOURCE`, and the probe's exit status (and the end
of its standard error) is appended to its output instead of failing the
command, so that a probe killed by a syscall filter still shows which call
it was making. PROBE_SOURCE calls set_mempolicy, mbind (on an mmap'd page)
and sched_setaffinity with the unit's own nodes and CPUs and prints, per
call, OK or the errno's name. parse_probe() reads that output back.
Standard library only (runs on targets).
"""

from __future__ import annotations

import errno
import re
import shlex

PROBE_WORD = "gpufleet-numa-probe"
CALLS = ("set_mempolicy", "mbind", "sched_setaffinity")
SYSTEMD_RUN = ["systemd-run", "--wait", "--pipe", "--quiet", "--collect", "--service-type=exec"]
EXIT_LINE = "exit-status"
STDERR_LINE = "stderr"
STDERR_CHARS = 300

# Run by the target's own Python inside the unit's sandbox: argv nodes
# ("0,1"), CPUs (a cpulist) and policy (bind or interleave). Each call's
# line is flushed before the next call, so a process a syscall filter kills
# (SIGSYS) has said what it got so far. Syscall numbers per architecture:
# (set_mempolicy, mbind).
PROBE_SOURCE = r'''
import ctypes, errno, mmap, os, platform, sys
NR = {"x86_64": (238, 237), "aarch64": (237, 235), "ppc64le": (261, 259), "ppc64": (261, 259),
      "s390x": (270, 268)}
def say(call, err):
    sys.stdout.write("%s %s\n" % (call, "OK" if not err else errno.errorcode.get(err, str(err))))
    sys.stdout.flush()
def cpus(text):
    out = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out
nodes = [int(n) for n in sys.argv[1].split(",")]
mode = {"bind": 2, "interleave": 3}[sys.argv[3]]
words = max(nodes) // 64 + 2
mask = (ctypes.c_ulong * words)()
for node in nodes:
    mask[node // 64] |= 1 << (node % 64)
libc = ctypes.CDLL(None, use_errno=True)
numbers = NR.get(platform.machine())
if numbers is None:
    say("set_mempolicy", errno.ENOSYS)
    say("mbind", errno.ENOSYS)
else:
    ok = libc.syscall(numbers[0], mode, mask, words * 64) == 0
    say("set_mempolicy", 0 if ok else ctypes.get_errno())
    page = mmap.mmap(-1, mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    ok = libc.syscall(numbers[1], ctypes.c_void_p(address), ctypes.c_ulong(mmap.PAGESIZE), mode, mask,
                      words * 64, 0) == 0
    say("mbind", 0 if ok else ctypes.get_errno())
try:
    os.sched_setaffinity(0, cpus(sys.argv[2]))
    say("sched_setaffinity", 0)
except OSError as exc:
    say("sched_setaffinity", exc.errno)
'''

_DIRECTIVE = re.compile(r"[A-Z][A-Za-z]{1,63}\Z")


def probe_command(unit, user_exists=False, group_exists=False):
    """The canonical command line that probes UNIT ({properties: [[directive,
    value]], prefix: [numactl words] or [], user, group, mems: "0,1", cpus,
    policy}) under its own sandbox. ValueError names a directive or value
    that cannot be a systemd-run property."""
    words = list(SYSTEMD_RUN)
    properties = [list(pair) for pair in unit.get("properties") or []]
    if user_exists and unit.get("user"):
        properties.append(["User", unit["user"]])
    if group_exists and unit.get("group"):
        properties.append(["Group", unit["group"]])
    for directive, value in properties:
        if not isinstance(directive, str) or not _DIRECTIVE.match(directive):
            raise ValueError("units: property %r is not a systemd directive" % (directive,))
        value = str(value)
        if any(ord(c) < 32 for c in value):
            raise ValueError("units: property %s holds a control character" % directive)
        words.append("--property=%s=%s" % (directive, value))
    words.append("--")
    words.extend(str(word) for word in unit.get("prefix") or [])
    words.extend([PROBE_WORD, str(unit["mems"]), str(unit["cpus"]), str(unit["policy"])])
    return " ".join(shlex.quote(word) for word in words)


def probe_runner(base_runner, python):
    """A runner for LiveReader: argv holding PROBE_WORD runs the probe with
    PYTHON (its exit status and standard error's end appended to its output,
    rc 0); every other argv goes to base_runner(argv) unchanged."""
    def run(argv):
        if PROBE_WORD not in argv:
            return base_runner(argv)
        at = argv.index(PROBE_WORD)
        rc, out, err = base_runner(argv[:at] + [python, "-c", PROBE_SOURCE] + argv[at + 1:])
        tail = " ".join((err or "").split())[-STDERR_CHARS:]
        out = (out or "") + ("" if not out or out.endswith("\n") else "\n") + "%s %d\n" % (EXIT_LINE, rc)
        if tail:
            out += "%s %s\n" % (STDERR_LINE, tail)
        return 0, out, ""
    return run


def parse_probe(text):
    """{calls: {call: "OK" or an errno name}, exit: int or None, stderr: str}
    from the probe's output (calls it never reached are missing)."""
    calls, status, stderr = {}, None, ""
    for line in (text or "").splitlines():
        word, dummy, rest = line.strip().partition(" ")
        if word in CALLS and rest.strip():
            calls[word] = rest.strip()
        elif word == EXIT_LINE:
            try:
                status = int(rest.strip())
            except ValueError:
                status = None
        elif word == STDERR_LINE:
            stderr = rest.strip()[:STDERR_CHARS]
    return {"calls": calls, "exit": status, "stderr": stderr}


DENIED = (errno.errorcode[errno.EPERM], errno.errorcode[errno.EACCES], errno.errorcode[errno.ENOSYS])
