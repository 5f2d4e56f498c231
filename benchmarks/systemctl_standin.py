# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A stand-in for `systemctl`, for benchmarks/bench_parallel_rollout.py.

Enough of systemctl for ansible.builtin.systemd_service on services whose
unit files lie in one directory: daemon-reload, show, is-enabled, is-active,
enable, disable, start, stop, restart. `start` runs the unit the way systemd
reads it (tests/system/systemd_exec.py: ExecStart=, Environment=,
EnvironmentFile=), detached, then its ExecStartPost= commands in turn, and
returns when they have: like systemd's start job of a Type=exec unit with
an ExecStartPost=. ExecStartPre= commands prefixed `-` are skipped (on a
real host they load GPU drivers). The sandbox is not applied, and neither
is ExecStop= (stop sends SIGTERM to the process group). RuntimeDirectory=
is made under /run before the start and removed after the stop, as systemd
does. A .socket unit
(the gateways' agent) is only marked active or inactive: nothing listens.

    python3 systemctl_standin.py UNIT_DIR STATE_DIR COMMAND [UNIT]

The benchmark puts a `systemctl` on PATH that runs this with its two
directories. Not for anything else.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "system"))

from systemd_exec import parse_exec_line, read_unit, service_process, unit_values  # noqa: E402


def state_path(state_dir, unit):
    return os.path.join(state_dir, unit + ".json")


def load(state_dir, unit):
    try:
        with open(state_path(state_dir, unit)) as handle:
            return json.load(handle)
    except OSError:
        return {"enabled": False, "pid": 0}


def save(state_dir, unit, state):
    with open(state_path(state_dir, unit), "w") as handle:
        json.dump(state, handle)


def alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours does not count (the stand-in is not its parent: it is reaped by init).
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def runtime_directories(unit_dir, unit):
    """The unit's RuntimeDirectory= paths (under /run) and their mode."""
    with open(os.path.join(unit_dir, unit)) as handle:
        sections = read_unit(handle.read(), unit)
    modes = unit_values(sections, "Service", "RuntimeDirectoryMode")
    names = [name for line in unit_values(sections, "Service", "RuntimeDirectory") for name in line.split()]
    return [os.path.join("/run", name) for name in names], int(modes[-1], 8) if modes else 0o755


def stop(state_dir, unit, state, unit_dir=None):
    pid = state.get("pid", 0)
    if alive(pid):
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)
    state["pid"] = 0
    save(state_dir, unit, state)
    if unit_dir and os.path.exists(os.path.join(unit_dir, unit)):
        for path in runtime_directories(unit_dir, unit)[0]:
            shutil.rmtree(path, ignore_errors=True)


def start(unit_dir, state_dir, unit, state):
    if alive(state.get("pid", 0)):
        return 0
    path = os.path.join(unit_dir, unit)
    process = service_process(path, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    paths, mode = runtime_directories(unit_dir, unit)
    for runtime in paths:
        os.makedirs(runtime, mode=mode, exist_ok=True)
    with open(path) as handle:
        sections = read_unit(handle.read(), unit)
    log = open(os.path.join(state_dir, unit + ".log"), "ab")
    child = subprocess.Popen(process["argv"], env=process["environment"], cwd=process["working_directory"],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    state["pid"] = child.pid
    save(state_dir, unit, state)
    for line in unit_values(sections, "Service", "ExecStartPost"):
        prefixes, argv = parse_exec_line(line, process["environment"], unit + " ExecStartPost=")
        status = subprocess.run(argv, env=process["environment"], stdout=log, stderr=subprocess.STDOUT,
                                check=False).returncode
        if status and "-" not in prefixes:
            stop(state_dir, unit, state, unit_dir)
            sys.stderr.write("Job for %s failed (ExecStartPost=).\n" % unit)
            return 1
    return 0


def main(argv):
    unit_dir, state_dir, command = argv[1], argv[2], argv[3]
    unit = argv[4].strip("'") if len(argv) > 4 else None
    if command in ("daemon-reload", "daemon-reexec"):
        return 0
    if unit is None:
        sys.stderr.write("systemctl stand-in: %s needs a unit\n" % command)
        return 1
    exists = os.path.exists(os.path.join(unit_dir, unit))
    state = load(state_dir, unit)
    socket = unit.endswith(".socket")
    running = bool(state.get("listening")) if socket else alive(state.get("pid", 0))
    if command == "show":
        print("Id=%s" % unit)
        print("LoadState=%s" % ("loaded" if exists else "not-found"))
        print("ActiveState=%s" % ("active" if running else "inactive"))
        print("SubState=%s" % ("running" if running else "dead"))
        print("MainPID=%d" % (state.get("pid", 0) if running else 0))
        print("UnitFileState=%s" % ("enabled" if state.get("enabled") else "disabled"))
        return 0
    if not exists:
        sys.stderr.write("Unit %s not found.\n" % unit)
        return 4 if command == "is-enabled" else 5
    if command == "is-enabled":
        print("enabled" if state.get("enabled") else "disabled")
        return 0 if state.get("enabled") else 1
    if command == "is-active":
        print("active" if running else "inactive")
        return 0 if running else 3
    if command in ("enable", "disable"):
        state["enabled"] = command == "enable"
        save(state_dir, unit, state)
        return 0
    if socket and command in ("stop", "start", "restart"):
        state["listening"] = command != "stop"
        save(state_dir, unit, state)
        return 0
    if command == "stop":
        stop(state_dir, unit, state, unit_dir)
        return 0
    if command == "start":
        return start(unit_dir, state_dir, unit, state)
    if command == "restart":
        stop(state_dir, unit, state, unit_dir)
        return start(unit_dir, state_dir, unit, state)
    sys.stderr.write("systemctl stand-in: %s is not supported\n" % command)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
