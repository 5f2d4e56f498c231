# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""No secret of a GPU process's command line reaches the audit's module
result, its capture (as YAML), the text table or the HTML report.

Each form is a process on a /proc tree read by the live path
(audit_gather.gather_live, a stand-in nvidia-smi saying the process holds
a GPU), and the same raw files replayed as a capture recorded before the
masking existed. Every 6-character piece of each secret is looked for."""

from __future__ import annotations

import hashlib
import json
import time

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.numa.plugins.module_utils.audit import gather as audit_gather
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import replay as audit_replay
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_html
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import report_text
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import result as audit_result
from ansible_collections.gpufleet.numa.plugins.module_utils.audit import processes as gpu_processes
from ansible_collections.gpufleet.numa.plugins.module_utils.common.secret_mask import MASK, is_secret_name, mask_argv, mask_text

PID = 4242
SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])


def secret(number, letter="S"):
    """A distinct secret per form, no 6 characters of it shared with another,
    of letters rare enough that no temporary name or hash in an output holds 6 of them."""
    digest = hashlib.sha256(("%s%d" % (letter, number)).encode()).digest()
    return letter + "".join("JQXZjqxzVKWvkw"[byte % 14] for byte in digest[:14])


# (id, argv words, or one string for a setproctitle title with no NULs); {S} and {T} are secrets.
FORMS = [
    ("api_key", ["vllm", "serve", "m", "--api-key", "{S}", "--port", "8000"]),
    ("api_key_several", ["vllm", "serve", "m", "--api-key", "{S}", "{T}", "--port", "8000"]),
    ("api_key_equals", ["vllm", "serve", "m", "--api-key={S}"]),
    ("token", ["tool", "--token", "{S}"]),
    ("hf_token", ["vllm", "serve", "m", "--hf-token", "{S}"]),
    ("hf_token_equals", ["vllm", "serve", "m", "--hf-token={S}"]),
    ("password_equals", ["tool", "--password={S}"]),
    ("pass", ["tool", "--pass", "{S}"]),
    ("glued_p", ["mysql", "-u", "root", "-p{S}", "db"]),
    ("sshpass_p", ["sshpass", "-p", "{S}", "ssh", "host"]),
    ("redis_a", ["redis-cli", "-a", "{S}", "ping"]),
    ("hydra_pair", ["python", "train.py", "wandb.api_key={S}"]),
    ("env_pair", ["env", "HF_TOKEN={S}", "vllm", "serve", "m"]),
    ("docker_env", ["docker", "run", "-e", "OPENAI_API_KEY={S}", "image"]),
    ("env_option", ["tool", "--env=AWS_SECRET_ACCESS_KEY={S}"]),
    ("url_userinfo", ["git", "clone", "https://user:{S}@example.org/repo"]),
    ("url_token_as_user", ["git", "clone", "https://{S}@example.org/repo"]),
    ("url_query", ["curl", "http://127.0.0.1/v1?access_token={S}&x=1"]),
    ("bearer_header", ["curl", "-H", "Authorization: Bearer {S}", "http://127.0.0.1/"]),
    ("basic_header", ["curl", "-H", "Authorization: Basic {S}", "http://127.0.0.1/"]),
    ("api_key_header", ["curl", "-H", "X-Api-Key: {S}", "http://127.0.0.1/"]),
    ("header_split", ["tool", "Authorization:", "Bearer", "{S}"]),
    ("json_word", ["vllm", "serve", "m", "--hf-overrides", '{"api_key": "{S}", "x": 1}']),
    ("json_spaces", ["tool", '{"password": "two words {S}"}']),
    ("yaml_word", ["tool", "--config", "api_key: {S}"]),
    ("camel_case", ["tool", "--apiKey", "{S}"]),
    ("single_dash", ["tool", "-api-key", "{S}"]),
    ("use_auth_token", ["tool", "--use-auth-token", "{S}"]),
    ("secret_access_key", ["tool", "--aws-secret-access-key", "{S}"]),
    ("hf_shape", ["tool", "download", "hf_{S}{T}"]),
    ("setproctitle", "vllm serve m --api-key {S} --port 8000"),
    ("setproctitle_several", "python -m vllm.entrypoints.openai.api_server --api-key {S} {T} --port 8000"),
    ("setproctitle_header", "curl -H Authorization: Bearer {S} http://127.0.0.1/"),
]
IDS = [form[0] for form in FORMS]


def secrets_of(number):
    return {"{S}": secret(number), "{T}": secret(number, "T")}


def cmdline_of(words, values):
    def fill(text):
        for key, value in values.items():
            text = text.replace(key, value)
        return text
    if isinstance(words, str):
        return fill(words) + "\0" * 40   # setproctitle: the title, then the rest of argv's area zeroed
    return "".join(fill(word) + "\0" for word in words)


def proc_files(cmdline, name="vllm"):
    return {
        "status": "Name:\t%s\nState:\tS (sleeping)\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n" % name,
        "stat": "%d (%s) S 1 %d %d 0 -1" % (PID, name, PID, PID),
        "cmdline": cmdline,
        "environ": "PATH=/bin\0VLLM_API_KEY=%s\0CUDA_VISIBLE_DEVICES=0\0" % secret(99),
        "numa_maps": "7f0000000000 default anon=10 dirty=10 N0=10 kernelpagesize_kB=4\n",
    }


def live_tree(root, files, smi_dir):
    proc = root / "proc" / str(PID)
    proc.mkdir(parents=True)
    for name, text in files.items():
        (proc / name).write_text(text)
    smi = smi_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = "--query-compute-apps=pid,gpu_bus_id" ] || exit 9\n'
                   'echo "%d, 00000000:1A:00.0"\n' % PID)
    smi.chmod(0o755)
    return str(smi)


def rendered(result, capture=None):
    """Everything that reaches a person or a file: result, capture YAML, table, HTML."""
    return {
        "result": json.dumps(result, sort_keys=True),
        "capture": yaml.safe_dump(capture) if capture is not None else "",
        "table": "\n".join(report_text.text_table([result])),
        "html": report_html.html_report([result]),
    }


def assert_hidden(texts, values):
    for value in values:
        pieces = set(value[i:i + 6] for i in range(len(value) - 5))
        for where, text in texts.items():
            shown = sorted(piece for piece in pieces if piece in text)
            assert not shown, "%s shows %s of secret %s" % (where, shown, value)


@pytest.mark.parametrize("number,form", list(enumerate(FORMS)), ids=IDS)
def test_audit_never_shows_a_command_line_secret(tmp_path, number, form):
    values = secrets_of(number)
    files = proc_files(cmdline_of(form[1], values))
    root = tmp_path / "root"
    smi = live_tree(root, files, tmp_path)
    facts, processes, capture = audit_gather.gather_live(root=str(root), nvidia_smi_binary=smi, use_nvml=False,
                                                         record=True, hostname="gpu-a")
    result = audit_result.audit_result(facts, processes, "gpu-a")
    result["capture"] = capture
    assert [p["pid"] for p in result["processes"]] == [PID]
    assert MASK in " ".join(result["processes"][0]["argv"])
    texts = rendered(result, capture)
    assert_hidden(texts, list(values.values()) + [secret(99)])
    # A capture recorded before the masking (raw /proc files) replays masked too.
    raw = {"capture_version": 1, "hostname": "gpu-a",
           "files": dict(("/proc/%d/%s" % (PID, name), text) for name, text in files.items()),
           "commands": {gpu_processes.COMPUTE_APPS_COMMAND: "%d, 00000000:1A:00.0\n" % PID}}
    facts, processes = audit_replay.gather_capture(raw)
    assert_hidden(rendered(audit_result.audit_result(facts, processes, "gpu-a")), list(values.values()) + [secret(99)])


def test_audit_masks_a_secret_in_the_process_name_and_stat():
    # setproctitle also sets the kernel's name of the process (15 characters).
    name = "HF_TOKEN=Nm4xQ2"
    files = gpu_processes.ProcFilter(_DictReader({"/proc/1/status": "Name:\t%s\nState:\tS\n" % name,
                                                  "/proc/1/stat": "1 (%s) S 0 1 1 0" % name}))
    assert files.read("/proc/1/status") == "Name:\tHF_TOKEN=%s\nState:\tS\n" % MASK
    assert files.read("/proc/1/stat") == "1 (HF_TOKEN=%s) S 0 1 1 0" % MASK
    assert gpu_processes.parse_status("Name:\t%s\n" % name)["name"] == "HF_TOKEN=" + MASK
    assert gpu_processes.parse_stat(files.read("/proc/1/stat")) == {"ppid": 0, "session": 1}


class _DictReader(gpu_processes.Reader):
    def __init__(self, files):
        self.files = files

    def read(self, path):
        return self.files.get(path)


@pytest.mark.parametrize("words", [
    ["vllm", "serve", "Qwen/Qwen3-8B", "--tokenizer", "Qwen/Qwen3-8B", "--max-num-batched-tokens", "8192",
     "-tp", "4", "-pp", "2", "--port", "8000", "--ssl-keyfile", "/etc/k.pem", "--host", "127.0.0.1"],
    ["ssh", "-p", "2222", "host"],
    ["docker", "run", "-p8000:8000", "image"],
], ids=["vllm_options", "ssh_port", "docker_port"])
def test_mask_argv_keeps_what_is_no_secret(words):
    assert mask_argv(words) == words


def test_mask_argv_api_key_values_end_at_the_next_option():
    assert mask_argv(["vllm", "--api-key", "a", "b", "--port", "1", "m"]) == ["vllm", "--api-key", MASK, MASK, "--port", "1", "m"]
    assert mask_text("vllm --api-key a b --port 1") == "vllm --api-key %s %s --port 1" % (MASK, MASK)


@pytest.mark.parametrize("name,expected", [
    ("api-key", True), ("HF_TOKEN", True), ("wandb.api_key", True), ("apiKey", True), ("X-Api-Key", True),
    ("Authorization", True), ("api_key2", True), ("pass", True), ("client-credentials", True),
    ("tokenizer", False), ("max-num-batched-tokens", False), ("ssl-keyfile", False), ("port", False),
])
def test_is_secret_name(name, expected):
    assert is_secret_name(name) is expected


def test_mask_argv_megabyte_words_stay_fast():
    words = [("a" * 199 + "=") * 5000, "x:" * 500000, "://" * 300000, " --api-key" * 100000]
    started = time.time()
    for word in words:
        assert len(mask_argv([word])) == 1
    assert time.time() - started < 20


_SECRET_TEXT = st.text(alphabet="abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789!%+/_-@#~^",
                       min_size=8, max_size=40)


@SOME
@example(number=0, value="ab--cdefgh")
@given(number=st.integers(0, len(FORMS) - 1), value=_SECRET_TEXT)
def test_mask_argv_any_secret_value_in_any_form_is_hidden(number, value):
    form = FORMS[number][1]
    if FORMS[number][0] == "hf_shape":
        value = "".join(c for c in value if c.isalnum()) + "a" * 16
    if "://" in json.dumps(form):
        value = value.replace("/", "_").replace("#", "_")  # a URL's userinfo and query are percent-encoded
    values = {"{S}": value, "{T}": value[::-1]}
    words = cmdline_of(form, values).split("\0")
    masked = "\0".join(mask_argv(words))
    if "{T}" not in json.dumps(form):
        values.pop("{T}")
    # a value that starts with "-" after an option is read as the next option, by argparse too
    if value.startswith("-") or value.endswith("-"):
        return
    assert_hidden({"argv": masked}, [v for v in values.values() if len(v) >= 6])
