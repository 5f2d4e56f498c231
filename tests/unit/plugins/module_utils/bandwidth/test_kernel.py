# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""bandwidth/kernel.py's program, run as measure.py runs it (python -c
PROGRAM MODE KERNEL BYTES SECONDS): the standard-library copy on this
Python (which has no torch), and the triad and the GPU part on the engine
venv's CPU torch (scripts/engine-cache), which sees no CUDA device."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.bandwidth.kernel import PROGRAM
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

REPO = pathlib.Path(fixture_paths.REPO)


def run(python, *args):
    done = subprocess.run([python, "-c", PROGRAM] + [str(a) for a in args], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def engine_python():
    check = subprocess.run([str(REPO / "scripts" / "engine-cache"), "--check"], capture_output=True, text=True,
                           check=False, timeout=120)
    assert check.returncode == 0, "run scripts/setup (scripts/engine-cache): " + check.stderr
    return dict(line.split("=", 1) for line in check.stdout.splitlines())["venv"] + "/bin/python"


def test_kernel_stdlib_copy_counts_two_bytes_per_byte_copied():
    answer = run(sys.executable, "memory", "auto", 4 << 20, 0.02)
    assert answer["method"] == "stdlib-copy" and answer["threads"] >= 1
    assert answer["bytes"] == 2 * ((4 << 20) // answer["threads"]) * answer["threads"]
    assert answer["repeats"] >= 3 and 0 < answer["seconds"] < 1


def test_kernel_without_torch_refuses_the_torch_kernel_and_skips_the_gpus():
    assert run(sys.executable, "memory", "torch", 1 << 20, 0.01) == {
        "error": "no torch in %s (No module named 'torch')" % sys.executable}
    assert run(sys.executable, "gpu", "stdlib", 1 << 20, 0.01) == {
        "skipped": "no torch in %s (No module named 'torch')" % sys.executable}


def test_kernel_bad_arguments_are_an_error_answer():
    assert run(sys.executable, "memory", "auto", "many", 0.01) == {
        "error": "ValueError: invalid literal for int() with base 10: 'many'"}


def test_kernel_torch_triad_counts_24_bytes_per_element(engine_python):
    answer = run(engine_python, "memory", "auto", 8 << 20, 0.02)
    assert answer["method"] == "torch-triad"
    assert answer["bytes"] == 24 * ((8 << 20) // 8) and answer["repeats"] >= 3
    assert run(engine_python, "memory", "stdlib", 8 << 20, 0.02)["method"] == "stdlib-copy"


def test_kernel_gpu_part_on_cpu_torch_says_there_is_no_device(engine_python):
    answer = run(engine_python, "gpu", "auto", 1 << 20, 0.01)
    assert answer.keys() == {"skipped"} and answer["skipped"].startswith("torch ")
    assert answer["skipped"].endswith(" sees no CUDA or ROCm device")
