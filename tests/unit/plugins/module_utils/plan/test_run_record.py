# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What a kept instance runs and where a host's units are: checked like every field of the kept plan."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.plan import run_record

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_a_full_record_passes():
    value = {"engine": "vllm==0.11.0", "unit": "gpufleet-vllm-0.service", "unit_sha1": SHA}
    assert run_record.check_run("instances[0].deployed", value) is value
    assert run_record.check_run("instances[0].deployed", {}) == {}


@pytest.mark.parametrize("value, message", [
    ("vllm", r"instances\[0\]\.deployed: must be a mapping"),
    ({"engine": "vllm", "pid": 4}, r"instances\[0\]\.deployed: has unknown field\(s\) pid"),
    ({"engine": "vllm==1; rm -rf /"}, r"instances\[0\]\.deployed\.engine: must be PACKAGE==VERSION"),
    ({"unit": "../../etc/passwd"}, r"instances\[0\]\.deployed\.unit: must be a systemd unit name"),
    ({"unit_sha1": SHA.upper()}, r"instances\[0\]\.deployed\.unit_sha1: must be 40 lowercase hex digits"),
    ({"unit_sha1": "ab\n"}, r"instances\[0\]\.deployed\.unit_sha1: must not contain control characters")])
def test_a_run_record_is_checked(value, message):
    with pytest.raises(ValueError, match="^" + message):
        run_record.check_run("instances[0].deployed", value)


def test_files_are_checked():
    files = {"unit_dir": "/etc/systemd/system", "config_dir": "/etc/vllm", "unit_prefix": "gpufleet-"}
    assert run_record.check_files("hosts.a.files", files) is files
    with pytest.raises(ValueError, match=r"^hosts\.a\.files: must be a mapping of exactly unit_dir, config_dir"):
        run_record.check_files("hosts.a.files", dict(files, extra=1))
    with pytest.raises(ValueError, match=r"^hosts\.a\.files\.unit_dir: "):
        run_record.check_files("hosts.a.files", dict(files, unit_dir="etc/systemd"))
    with pytest.raises(ValueError, match=r"^hosts\.a\.files\.unit_prefix: must start with 'gpufleet-'"):
        run_record.check_files("hosts.a.files", dict(files, unit_prefix="-x"))
    # Round 3: an empty prefix made every marked *.service file the role's.
    with pytest.raises(ValueError, match=r"^hosts\.a\.files\.unit_prefix: must not be empty"):
        run_record.check_files("hosts.a.files", dict(files, unit_prefix=""))
