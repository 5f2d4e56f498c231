# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""vllm_files on the host: role vllm's directories and files in one module call.

The module runs as Ansible runs it on a host (its file, a JSON argument
file, the real filesystem): directories with their missing parents, files
written whole and checked by their validate command before they replace
the old one, modes, check mode, diffs, and secrets kept out of every
output. The controller side (rendering, skipping what is as planned) is
tested through the role (tests/unit/roles/test_vllm_role.py).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

MODULE = os.path.join(str(fixture_paths.REPO), "plugins", "modules", "vllm_files.py")
SECRET = "HF_TOKEN=hf_secretVALUE42\n"


def run_module(tmp_path, writes, secrets=None, check=False):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "writes": writes, "secret_contents": secrets or {}, "_ansible_check_mode": check, "_ansible_diff": True}}))
    proc = subprocess.run([sys.executable, MODULE, str(args)], capture_output=True, text=True, check=False)
    return proc.stdout, json.loads(proc.stdout)


def writes_under(root, unit_text="[Unit]\nDescription=x\n"):
    units = root / "etc" / "systemd" / "system"
    return [
        {"path": str(units), "kind": "directory", "mode": "0755"},
        {"path": str(root / "etc" / "vllm"), "kind": "directory", "mode": "0750"},
        {"path": str(root / "etc" / "vllm" / "secrets.env"), "kind": "file", "mode": "0600"},
        {"path": str(units / "gpufleet-a.service"), "kind": "file", "mode": "0644", "content": unit_text,
         "validate": "grep -q ^Description= %s"},
    ]


def test_writes_directories_with_parents_and_files_then_changes_nothing(tmp_path):
    writes = writes_under(tmp_path)
    secrets = {writes[2]["path"]: SECRET}
    text, result = run_module(tmp_path, writes, secrets)
    assert result["changed"] and [r["changed"] for r in result["results"]] == [True] * 4, text
    unit = tmp_path / "etc" / "systemd" / "system" / "gpufleet-a.service"
    assert unit.read_text() == writes[3]["content"]
    assert stat.S_IMODE(os.stat(str(unit)).st_mode) == 0o644
    # Missing parents get the directory's mode, as the file module gives them.
    assert stat.S_IMODE(os.stat(str(tmp_path / "etc" / "systemd")).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(str(tmp_path / "etc" / "vllm")).st_mode) == 0o750
    secret = tmp_path / "etc" / "vllm" / "secrets.env"
    assert secret.read_text() == SECRET and stat.S_IMODE(os.stat(str(secret)).st_mode) == 0o600
    assert "hf_secretVALUE42" not in text
    assert sorted(os.listdir(str(unit.parent))) == ["gpufleet-a.service"]
    text, again = run_module(tmp_path, writes, secrets)
    assert not again["changed"] and not any(r["changed"] for r in again["results"]), text
    # A mode that drifted is set back without rewriting the content.
    os.chmod(str(unit), 0o666)
    text, mended = run_module(tmp_path, writes, secrets)
    assert [r["changed"] for r in mended["results"]] == [False, False, False, True], text
    assert stat.S_IMODE(os.stat(str(unit)).st_mode) == 0o644


def test_a_file_its_check_refuses_replaces_nothing_and_says_why(tmp_path):
    writes = writes_under(tmp_path)
    run_module(tmp_path, writes, {writes[2]["path"]: SECRET})
    unit = tmp_path / "etc" / "systemd" / "system" / "gpufleet-a.service"
    before = unit.read_text()
    refused = writes_under(tmp_path, unit_text="[Unit]\nNoDescription\n")
    text, result = run_module(tmp_path, refused, {refused[2]["path"]: SECRET})
    assert result.get("failed") and str(unit) in result["msg"] and "failed its check" in result["msg"], text
    assert unit.read_text() == before
    assert sorted(os.listdir(str(unit.parent))) == ["gpufleet-a.service"]  # no temporary file left


def test_check_mode_writes_nothing_and_diffs_all_but_secrets(tmp_path):
    writes = writes_under(tmp_path)
    text, result = run_module(tmp_path, writes, {writes[2]["path"]: "HF_TOKEN=hf_secretVALUE42\n"}, check=True)
    assert result["changed"] and not (tmp_path / "etc").exists(), text
    diffs = [r.get("diff") for r in result["results"]]
    assert diffs[0]["after"] == {"path": writes[0]["path"], "state": "directory"}
    assert diffs[2] is None
    assert diffs[3]["after_header"] == writes[3]["path"] and diffs[3]["after"] == writes[3]["content"]
    assert "hf_secretVALUE42" not in text


def test_a_host_that_refuses_a_write_fails_naming_the_path_and_why(tmp_path):
    """A file where the role's directory needs a parent (an operator's
    leftover): the module's own failure with the path and the host's
    reason (not a crash: ansible-core 2.19 reports those with no msg),
    what was written before it kept."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "systemd").write_text("an operator's notes\n")
    writes = writes_under(tmp_path)
    writes[0], writes[1] = writes[1], writes[0]
    text, result = run_module(tmp_path, writes, {writes[2]["path"]: SECRET})
    assert result.get("failed"), text
    assert result["msg"] == "writing {0} failed: [Errno 20] Not a directory: '{0}'".format(writes[1]["path"]), text
    assert [r["path"] for r in result["results"]] == [writes[0]["path"]]
    assert (tmp_path / "etc" / "vllm").is_dir()
    assert (tmp_path / "etc" / "systemd").read_text() == "an operator's notes\n"
