# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""stat_paths: what exists at many paths of a host, in one module call.

Role vllm's look was a loop of ansible.builtin.stat (one module call per
folder) and one ansible.builtin.find; stat_paths replaces both and must say
what find said, field by field, for every field the role reads. The
reference is the real find module, run by the real `ansible` command on
the same tree: directories, a file, a program, a link, a hidden unit, a
large file (no checksum), globs and paths where nothing is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.numa.plugins.modules import stat_paths
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

# Every field role vllm reads of what it saw (deploy/vllm/host_state.py, rollout.py, download.py).
FIELDS = ("path", "mode", "isdir", "isreg", "islnk", "xusr", "xgrp", "xoth", "pw_name", "gr_name", "checksum", "size")


@pytest.fixture
def tree(tmp_path):
    """A host's folders as the role leaves them, with what may also be there."""
    units = tmp_path / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    (units / "gpufleet-vllm-0.service").write_text("# managed\n[Unit]\n")
    (units / ".gpufleet-hidden.service").write_text("# hidden\n")
    (units / "other.service").write_text("not ours\n")
    config = tmp_path / "etc" / "vllm"
    config.mkdir()
    (config / "gpufleet-vllm-0.yaml").write_text("model: x\n")
    os.chmod(config, 0o750)
    libexec = tmp_path / "usr" / "libexec"
    libexec.mkdir(parents=True)
    helper = libexec / "gpufleet-wait-ready"
    helper.write_text("#!/usr/bin/python3\n")
    os.chmod(helper, 0o755)
    os.symlink(str(helper), str(libexec / "python3"))
    (libexec / "big").write_bytes(b"x" * 2048)
    return tmp_path


def looked_at(tree):
    return [str(tree / "etc" / "systemd"), str(tree / "etc" / "systemd" / "system" / "gpufleet-*.service"),
            str(tree / "etc" / "vllm"), str(tree / "etc" / "vllm" / "gpufleet-*.yaml"),
            str(tree / "usr" / "libexec" / "gpufleet-wait-ready"), str(tree / "usr" / "libexec" / "python3"),
            str(tree / "usr" / "libexec" / "big"), str(tree / "nowhere" / "gpufleet-*.service"),
            str(tree / "etc" / "missing")]


def run_module(name, args, pid_1_shell=False):
    """The result of module NAME with ARGS, run by the real `ansible` command on localhost
    (with PID_1_SHELL, in a PID namespace of its own whose PID 1 is a shell, as in many containers)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(fixture_paths.REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    command = [os.path.join(fixture_paths.REPO, ".venv", "bin", "ansible"), "localhost", "-c", "local",
               "-i", "localhost,", "-m", name, "-a", json.dumps(args), "-e", "ansible_python_interpreter=" + sys.executable]
    if pid_1_shell:
        # sh stays PID 1 (it does not exec a command that is not its last)
        command = ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", '"$@"; exit $?', "sh"] + command
    out = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return json.loads(out.stdout.split(" => ", 1)[1])


def find(paths, patterns):
    """ansible.builtin.find's files, from the real module on localhost."""
    result = run_module("ansible.builtin.find", {"paths": paths, "patterns": patterns, "file_type": "any",
                                                 "hidden": True, "get_checksum": True})
    return dict((entry["path"], entry) for entry in result["files"])


def test_says_what_find_says_for_every_field_the_role_reads(tree):
    paths = looked_at(tree)
    folders = sorted(set(os.path.dirname(p) for p in paths if os.path.isdir(os.path.dirname(p))))
    reference = find(folders, sorted(set(os.path.basename(p) for p in paths)))
    seen = stat_paths.stat_paths(paths, 1024)
    assert [entry["path"] for entry in seen] == sorted(entry["path"] for entry in seen)
    by_path = dict((entry["path"], entry) for entry in seen)
    # find also saw these through the other paths' patterns (its superset); the rest are exactly find's
    assert set(by_path) == set(reference) - {str(tree / "etc" / "vllm" / "gpufleet-*.yaml")}
    for path, entry in sorted(by_path.items()):
        expected = dict((field, reference[path].get(field)) for field in FIELDS if field in reference[path])
        if reference[path]["isreg"] and reference[path]["size"] > 1024:
            expected.pop("checksum")  # above checksum_max_bytes: none, where find reads the whole file
            assert "checksum" not in entry
        assert dict((field, entry[field]) for field in expected) == expected, path


def test_globs_match_hidden_files_and_nothing_outside_their_folder(tree):
    units = tree / "etc" / "systemd" / "system"
    seen = [entry["path"] for entry in stat_paths.stat_paths([str(units / "gpufleet-*.service"),
                                                              str(units / ".*.service")], 1 << 20)]
    assert seen == [str(units / ".gpufleet-hidden.service"), str(units / "gpufleet-vllm-0.service")]
    assert stat_paths.stat_paths([str(tree / "nowhere" / "*"), str(tree / "etc" / "missing")], 1 << 20) == []


def test_links_are_not_followed_and_programs_are_marked(tree):
    seen = dict((e["path"], e) for e in stat_paths.stat_paths([str(tree / "usr" / "libexec" / "*")], 1 << 20))
    link = seen[str(tree / "usr" / "libexec" / "python3")]
    assert link["islnk"] and not link["isreg"] and "checksum" not in link
    helper = seen[str(tree / "usr" / "libexec" / "gpufleet-wait-ready")]
    assert helper["isreg"] and helper["xusr"] and helper["mode"] == "0755" and len(helper["checksum"]) == 40


@pytest.mark.parametrize("path, message", [
    ("etc/vllm", "must be an absolute path"),
    ("/etc/*/vllm.yaml", "only the last part of a path may be a glob"),
    ("/etc/vllm\x00", "must be an absolute path"),
])
def test_bad_paths_are_refused_naming_the_rule(path, message):
    with pytest.raises(ValueError, match="^paths: .*" + message.replace("(", "\\(")):
        stat_paths.stat_paths([path], 0)


@pytest.mark.parametrize("pid_1_shell", [False, True], ids=["named-by-pid-1", "pid-1-a-shell"])
def test_service_mgr_is_what_setup_gathers_and_only_when_asked(tree, pid_1_shell):
    """Role vllm's look also gathers the service manager where it decides:
    the same fact as setup's service_mgr subset, in the same module call;
    by PID 1's name where it says, by the fact collectors where it does not."""
    setup = run_module("ansible.builtin.setup", {"gather_subset": ["!all", "!min", "service_mgr"]}, pid_1_shell)
    looked = run_module("gpufleet.numa.stat_paths", {"paths": [str(tree / "etc" / "vllm")], "service_mgr": True},
                        pid_1_shell)
    assert looked["ansible_facts"] == {"service_mgr": setup["ansible_facts"]["ansible_service_mgr"]}
    assert [entry["path"] for entry in looked["files"]] == [str(tree / "etc" / "vllm")]
    assert "ansible_facts" not in run_module("gpufleet.numa.stat_paths", {"paths": [str(tree / "etc" / "vllm")]})


@pytest.mark.parametrize("comm, named", [
    ("systemd\n", "systemd"), ("procd\n", "openwrt_init"), ("runit-init\n", "runit"), ("svscan\n", "svc"),
    ("openrc-init\n", "openrc"), ("s6-svscan\n", "s6-svscan"),
    ("init\n", None), ("bash\n", None), ("sh\n", None), ("\n", None), (None, None),
])
def test_pid_1_names_the_service_manager_as_the_collector_reads_it(tmp_path, comm, named):
    """Where PID 1's name says, the collector reads no other fact; where it
    does not (none, init, a shell), the look runs the collectors."""
    path = tmp_path / "comm"
    if comm is not None:
        path.write_text(comm)
    assert stat_paths.named_by_pid_1(str(path)) == named
