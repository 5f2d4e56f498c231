# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A deploy under --check --diff says what it would do and what it would
record, never that it deployed or recorded anything (docs/deploy.md, "The
end of a run"), on the demo fleet with the real playbook."""

import re

from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    A6000, H100, RTX, demo_copy, run_playbook, write_inventory)


def test_a_check_run_says_what_it_would_deploy_and_record(tmp_path):
    fleet = demo_copy(tmp_path)
    out = run_playbook(fleet, "deploy_inference.yml", write_inventory(fleet, "hosts.yml"), "--check", "--diff")
    assert not (fleet["staging"] / "gpufleet-plan.json").exists()
    # the record's change under --diff
    assert "check mode: the record would change so; it is not written" in out
    # the plan at the end is the record the run would write
    assert "the record this run would write (check mode: not written, nothing deployed):" in out
    assert "recorded plan (what runs now)" not in out
    # per host: would deploy, never deployed; the gateway would route
    assert "check mode: nothing was deployed, recorded or removed; this is what the run would do" in out
    for host in (A6000, H100, RTX):
        assert "would deploy: %s: vllm-0 new (GPUs 0,1,2,3, :8000)" % host in out, out[-3000:]
    assert not re.search(r"- '?deployed: ", out)
    assert "gateway would route llama-3.1-70b: " in out and "- 'gateway routes" not in out
