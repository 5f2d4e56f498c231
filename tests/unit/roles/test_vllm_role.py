# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Role gpufleet.numa.vllm, run for real with ansible-playbook.

Every test renders units into a temporary staging directory (local
connection, nothing installed, no service started) from the hand-written
plans in golden/vllm/plans.yml, then checks them with real tools:
`systemd-analyze verify` (exit 0 and nothing on stderr) and systemd's own
unit parser (`systemd --test --user` dumps what it loaded, so the ExecStart
argv and Environment= values are systemd's reading, not ours).

Rendered files are compared with golden files under golden/vllm/<case>/;
set GPUFLEET_UPDATE_GOLDEN=1 to rewrite them after a deliberate change.
"""

import getpass
import grp
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.tests.system.systemd_exec import SYSTEMD, systemd_unit_dump

REPO = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "vllm"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PYTHON = REPO / ".venv" / "bin" / "python"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
NUMACTL = "/usr/bin/numactl" if os.access("/usr/bin/numactl", os.X_OK) else shutil.which("numactl")
PLANS = yaml.safe_load((GOLDEN / "plans.yml").read_text())
STAGING_TOKEN = "@STAGING@"
RUN_USER = getpass.getuser()
RUN_GROUP = grp.getgrgid(os.getgid()).gr_name

pytestmark = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (scripts/setup installs it)"
)

PLAYBOOK = """\
- name: vLLM role under test
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.numa.vllm
"""


def staging_vars(tmp_path):
    """What a run as the current user into a staging directory needs."""
    fake_vllm = tmp_path / "bin" / "vllm"
    if not fake_vllm.exists():
        # systemd-analyze verify requires ExecStart's binary to exist.
        fake_vllm.parent.mkdir(parents=True)
        fake_vllm.write_text("#!/bin/sh\nexit 0\n")
        fake_vllm.chmod(0o755)
    staging = tmp_path / "staging"
    return {
        "vllm_model": "meta-llama/Llama-3.1-70B-Instruct",
        "vllm_install": False,
        "vllm_manage_user": False,
        "vllm_manage_service": False,
        "vllm_user": RUN_USER,
        "vllm_group": RUN_GROUP,
        "vllm_executable": str(fake_vllm),
        "vllm_numactl": NUMACTL,
        "vllm_state_dir": str(staging / "var/lib/vllm"),
        "vllm_config_dir": str(staging / "etc/vllm"),
        "vllm_unit_dir": str(staging / "etc/systemd/system"),
        "vllm_libexec_dir": str(staging / "libexec"),
    }


def run_role(tmp_path, instances, check=False, **overrides):
    """Run the role; return (exit code, combined output, changed count)."""
    variables = staging_vars(tmp_path)
    variables["vllm_instances"] = instances
    variables.update(overrides)
    variables = {k: v for k, v in variables.items() if v is not None}
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    command = [
        str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
        "-e", "ansible_python_interpreter=%s" % PYTHON,
        "-e", "@%s" % (tmp_path / "vars.json"),
        str(tmp_path / "play.yml"),
    ]
    if check:
        command.append("--check")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0")
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600)
    output = result.stdout + result.stderr
    recap = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", output)
    return result.returncode, output, int(recap.group(1)) if recap else None


def unit_dir(tmp_path):
    return tmp_path / "staging/etc/systemd/system"


def config_dir(tmp_path):
    return tmp_path / "staging/etc/vllm"


def verify_unit(path):
    """systemd-analyze verify: exit 0 and nothing on stderr (it exits 0 on some warnings)."""
    result = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(path)],
                            capture_output=True, text=True, check=False, timeout=120)
    return result.returncode, result.stderr


# --- systemd's own reading of a unit -------------------------------------

def split_quoted_command(line):
    """Split a command line as systemd prints it (shell-style double quotes,
    backslash escaping \\ " $ ` inside them)."""
    words, i, n = [], 0, len(line)
    while i < n:
        if line[i] == " ":
            i += 1
            continue
        word = []
        while i < n and line[i] != " ":
            char = line[i]
            if char == '"':
                i += 1
                while line[i] != '"':
                    if line[i] == "\\" and line[i + 1] in '"\\$`':
                        word.append(line[i + 1])
                        i += 2
                    else:
                        word.append(line[i])
                        i += 1
                i += 1
            elif char == "'":
                end = line.index("'", i + 1)
                word.append(line[i + 1:end])
                i = end + 1
            elif char == "\\":
                word.append(line[i + 1])
                i += 2
            else:
                word.append(char)
                i += 1
        words.append("".join(word))
    return words


def exec_time_dollars(word):
    """What systemd does to $ when it executes: $$ is a literal $; any other
    $NAME or ${NAME} would be replaced by a variable, which a rendered
    argument must never contain."""
    out, i = [], 0
    while i < len(word):
        if word.startswith("$$", i):
            out.append("$")
            i += 2
        elif word[i] == "$" and i + 1 < len(word) and (word[i + 1] == "{" or word[i + 1].isalnum() or word[i + 1] == "_"):
            raise AssertionError("argument %r would be expanded by systemd" % word)
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def systemd_reading(unit_path):
    """Load the unit with systemd's parser (`systemd --test --user`) and
    return its ExecStart argv, Environment= entries and NUMA settings."""
    body = systemd_unit_dump(unit_path.read_text(), unit_path.name)
    command_lines = re.findall(r"^\t\t-> ExecStart:\n\t\t\tCommand Line: (.*)$", body, re.M)
    assert len(command_lines) == 1, body
    argv = [exec_time_dollars(word) for word in split_quoted_command(command_lines[0])]
    environment = dict(
        line.split("=", 1) for line in re.findall(r"^\t\tEnvironment: (.*)$", body, re.M)
    )
    settings = dict(re.findall(r"^\t\t(NUMAPolicy|NUMAMask|CPUAffinity|User|ReadWritePaths): (.*)$", body, re.M))
    return {"argv": argv, "environment": environment, "settings": settings}


needs_systemd = pytest.mark.skipif(
    SYSTEMD is None or shutil.which("setpriv") is None,
    reason="systemd's manager binary (and setpriv) are needed to read units with systemd's parser",
)


def expected_argv(instance, variables, binding):
    """The command line the plan asks for, written out independently of the template."""
    nodes = ",".join(str(n) for n in instance["numa_nodes"])
    argv = []
    if binding == "numactl":
        # Whole nodes bind by node; anything less (shared node, reserved cores) by CPU list.
        by_node = instance.get("cpus_whole_nodes", False) and not instance["cpus_shared_node"]
        cpu = "--cpunodebind=" + nodes if by_node else "--physcpubind=" + instance["cpus"]
        memory = ("--membind=" if instance["memory_policy"] == "bind" else "--interleave=") + nodes
        argv += [variables["vllm_numactl"], cpu, memory]
    argv += [variables["vllm_executable"], "serve", variables["vllm_model"],
             "--tensor-parallel-size", str(instance["tp_size"])]
    if instance["pp_size"] > 1:
        argv += ["--pipeline-parallel-size", str(instance["pp_size"])]
    argv += ["--host", variables.get("vllm_listen_host", "127.0.0.1"), "--port", str(instance["port"]),
             "--served-model-name", variables.get("vllm_served_model_name") or variables["vllm_model"]]
    shutdown = variables.get("vllm_shutdown_timeout", 30)
    if shutdown:
        argv += ["--shutdown-timeout", str(shutdown)]
    if variables.get("vllm_extra_args"):
        argv += ["--config", "%s/gpufleet-%s.yaml" % (variables["vllm_config_dir"], instance["name"])]
    return argv


def rendered_files(tmp_path):
    """Files the role wrote that golden files cover, with the staging path and
    the account running the tests normalised."""
    files = {}
    for folder in (unit_dir(tmp_path), config_dir(tmp_path)):
        for path in sorted(folder.iterdir()):
            text = path.read_text().replace(str(tmp_path), STAGING_TOKEN)
            text = re.sub(r"^User=%s$" % re.escape(RUN_USER), "User=@USER@", text, flags=re.M)
            files[path.name] = re.sub(r"^Group=%s$" % re.escape(RUN_GROUP), "Group=@GROUP@", text, flags=re.M)
    return files


# --- rendering ------------------------------------------------------------

@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """Render each plan case once per module (a role run takes seconds)."""
    cache = {}

    def render(case):
        if case not in cache:
            tmp_path = tmp_path_factory.mktemp(case)
            plan = PLANS[case]
            rc, output, changed = run_role(tmp_path, plan["instances"], **plan["vars"])
            assert rc == 0, output
            cache[case] = (tmp_path, changed)
        return cache[case]

    return render


@pytest.mark.parametrize("case", sorted(PLANS))
def test_vllm_units_match_golden_and_verify(rendered, case):
    plan = PLANS[case]
    tmp_path, dummy = rendered(case)
    files = rendered_files(tmp_path)
    expected_names = {"gpufleet-%s.service" % i["name"] for i in plan["instances"]} | {"secrets.env"}
    if plan["vars"].get("vllm_extra_args"):
        expected_names |= {"gpufleet-%s.yaml" % i["name"] for i in plan["instances"]}
    assert set(files) == expected_names
    golden = GOLDEN / case
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN"):
        shutil.rmtree(golden, ignore_errors=True)
        golden.mkdir(parents=True)
        for name, text in files.items():
            (golden / name).write_text(text)
    assert {p.name for p in golden.iterdir()} == set(files), "golden files of %s differ in names" % case
    for name, text in files.items():
        assert text == (golden / name).read_text(), "%s/%s differs from its golden file" % (case, name)
    for instance in plan["instances"]:
        rc, stderr = verify_unit(unit_dir(tmp_path) / ("gpufleet-%s.service" % instance["name"]))
        assert (rc, stderr) == (0, ""), "%s: systemd-analyze verify: %s" % (instance["name"], stderr)


@needs_systemd
@pytest.mark.parametrize("case", sorted(PLANS))
def test_vllm_units_placement_as_systemd_reads_it(rendered, case):
    plan = PLANS[case]
    tmp_path, dummy = rendered(case)
    variables = dict(staging_vars(tmp_path), **plan["vars"])
    binding = plan["vars"].get("vllm_binding", "numactl")
    for instance in plan["instances"]:
        reading = systemd_reading(unit_dir(tmp_path) / ("gpufleet-%s.service" % instance["name"]))
        assert reading["argv"] == expected_argv(instance, variables, binding)
        env = reading["environment"]
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in instance["gpu_indices"])
        assert env["VLLM_PORT"] == str(instance["dist_port"])
        assert env["HF_HOME"] == variables["vllm_state_dir"] + "/hf"
        assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "600"
        settings = reading["settings"]
        if binding == "systemd":
            assert settings["NUMAPolicy"] == instance["memory_policy"]
            assert settings["NUMAMask"] == ",".join(str(n) for n in instance["numa_nodes"])
            # systemd prints the CPU set with spaces between ranges.
            assert parse_cpulist(settings["CPUAffinity"].replace(" ", ",")) == parse_cpulist(instance["cpus"])
        else:
            assert "NUMAMask" not in settings and "CPUAffinity" not in settings


def test_vllm_extra_args_config_file_holds_options(rendered):
    plan = PLANS["shared_node_tp2"]
    tmp_path, dummy = rendered("shared_node_tp2")
    text = (config_dir(tmp_path) / "gpufleet-vllm-1.yaml").read_text()
    assert text.startswith("# Managed by gpufleet.numa (role vllm)")
    assert yaml.safe_load(text) == plan["vars"]["vllm_extra_args"]


# --- quoting --------------------------------------------------------------

# Strings that would break a naively written unit: quotes, backslashes
# (one trailing), specifiers, variable references, command separators,
# shell syntax, non-ASCII and runs of spaces.
NASTY = {
    "NASTY_QUOTES": 'org/model "quoted" name',
    "NASTY_BACKSLASH": "back\\slash and trailing\\",
    "NASTY_PERCENT": "100% sure %n%i%%",
    "NASTY_DOLLAR": "$HOME ${PATH} $$ $",
    "NASTY_SHELL": "; a;b 'single' `tick` &&",
    "NASTY_UNICODE": "модель/ünïcode  two  spaces ",
}


@needs_systemd
def test_vllm_nasty_names_stay_one_argument(tmp_path):
    model = " ".join(NASTY[k] for k in ("NASTY_QUOTES", "NASTY_BACKSLASH", "NASTY_PERCENT"))
    served = " ".join(NASTY[k] for k in ("NASTY_DOLLAR", "NASTY_SHELL", "NASTY_UNICODE"))
    instance = PLANS["dual_socket_tp4"]["instances"][0]
    rc, output, dummy = run_role(tmp_path, [instance], vllm_model=model,
                                 vllm_served_model_name=served, vllm_environment=NASTY)
    assert rc == 0, output
    unit = unit_dir(tmp_path) / "gpufleet-vllm-0.service"
    assert verify_unit(unit) == (0, "")
    reading = systemd_reading(unit)
    variables = dict(staging_vars(tmp_path), vllm_model=model, vllm_served_model_name=served)
    assert reading["argv"] == expected_argv(instance, variables, "numactl")
    for name, value in NASTY.items():
        assert reading["environment"][name] == value


def test_vllm_newline_in_model_fails_with_message(tmp_path):
    rc, output, dummy = run_role(tmp_path, PLANS["dual_socket_tp4"]["instances"], vllm_model="evil\nExecStartPre=/bin/sh")
    assert rc != 0
    assert "vllm_model must be a non-empty model name or path on one line" in output
    assert "Traceback" not in output
    assert not unit_dir(tmp_path).exists()


# --- lifecycle ------------------------------------------------------------

def test_vllm_second_run_changes_nothing(rendered):
    plan = PLANS["shared_node_tp2"]
    tmp_path, first_changed = rendered("shared_node_tp2")
    assert first_changed > 0
    rc, output, changed = run_role(tmp_path, plan["instances"], **plan["vars"])
    assert (rc, changed) == (0, 0), output


def test_vllm_check_mode_writes_nothing(tmp_path):
    rc, output, changed = run_role(tmp_path, PLANS["dual_socket_tp4"]["instances"], check=True)
    assert rc == 0, output
    assert changed > 0
    assert not (tmp_path / "staging").exists()


def test_vllm_check_mode_after_a_run_writes_nothing(rendered):
    instances = PLANS["dual_socket_tp4"]["instances"]
    tmp_path, dummy = rendered("dual_socket_tp4")
    before = rendered_files(tmp_path)
    rc, output, changed = run_role(tmp_path, instances[:1], check=True, vllm_model="other/model")
    assert rc == 0 and changed > 0, output
    assert rendered_files(tmp_path) == before


def test_vllm_shrinking_plan_removes_only_stale_managed_units(tmp_path):
    instances = PLANS["dual_socket_tp4"]["instances"]
    extra = {"vllm_extra_args": {"max-model-len": 8192}}
    rc, output, dummy = run_role(tmp_path, instances, **extra)
    assert rc == 0, output
    units = unit_dir(tmp_path)
    # Files the role must leave alone: its prefix without its header, its
    # header without its prefix, and a unit of someone else.
    foreign = {
        "gpufleet-gateway.service": "[Service]\nExecStart=/bin/true\n",
        "other-vllm-9.service": "# Managed by gpufleet.numa (role vllm); instance vllm-9: copied by hand\n",
        "sshd.service": "[Service]\nExecStart=/usr/sbin/sshd -D\n",
    }
    for name, text in foreign.items():
        (units / name).write_text(text)
    (config_dir(tmp_path) / "gpufleet-notes.yaml").write_text("# mine\n")

    rc, output, changed = run_role(tmp_path, instances[:1], **extra)
    assert rc == 0 and changed > 0, output
    assert sorted(p.name for p in units.iterdir()) == sorted(["gpufleet-vllm-0.service"] + list(foreign))
    for name, text in foreign.items():
        assert (units / name).read_text() == text
    assert sorted(p.name for p in config_dir(tmp_path).iterdir()) == [
        "gpufleet-notes.yaml", "gpufleet-vllm-0.yaml", "secrets.env"]

    # Dropping the extra options removes the option files and --config.
    rc, output, dummy = run_role(tmp_path, instances[:1])
    assert rc == 0, output
    assert sorted(p.name for p in config_dir(tmp_path).iterdir()) == ["gpufleet-notes.yaml", "secrets.env"]
    assert "--config" not in (units / "gpufleet-vllm-0.service").read_text()

    # An empty plan removes the role's last unit and nothing else.
    rc, output, changed = run_role(tmp_path, [])
    assert rc == 0 and changed > 0, output
    assert sorted(p.name for p in units.iterdir()) == sorted(foreign)


def test_vllm_secrets_only_in_environment_file(tmp_path):
    api_key = 'sk-"quoted"-$dollar-\\back-`tick`'
    token = "hf_abcdefSECRET123"
    rc, output, dummy = run_role(tmp_path, PLANS["dual_socket_tp4"]["instances"],
                                 vllm_api_key=api_key, vllm_hf_token=token)
    assert rc == 0, output
    secrets = config_dir(tmp_path) / "secrets.env"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert secrets.stat().st_uid == os.getuid()
    assert secrets.read_text().splitlines()[1:] == [
        'VLLM_API_KEY="sk-\\"quoted\\"-\\$dollar-\\\\back-\\`tick\\`"',
        'HF_TOKEN="hf_abcdefSECRET123"',
    ]
    for path in unit_dir(tmp_path).iterdir():
        text = path.read_text()
        assert "SECRET123" not in text and "sk-" not in text
        assert "EnvironmentFile=%s" % secrets in text
    assert "SECRET123" not in output and "sk-" not in output


# --- bad input ------------------------------------------------------------

def without(mapping, key):
    return {k: v for k, v in mapping.items() if k != key}


def test_vllm_missing_model_fails_with_message(tmp_path):
    rc, output, dummy = run_role(tmp_path, PLANS["dual_socket_tp4"]["instances"], vllm_model=None)
    assert rc != 0
    assert "missing required arguments: vllm_model" in output
    assert "Traceback" not in output


@pytest.mark.parametrize("instances,message", [
    ([without(PLANS["dual_socket_tp4"]["instances"][0], "cpus")], "vllm_instances[0] (vllm-0) lacks cpus"),
    ([dict(PLANS["dual_socket_tp4"]["instances"][0], tp_size=2)], "got 4 for tp 2, pp 1"),
    ([dict(PLANS["dual_socket_tp4"]["instances"][0], memory_policy="preferred")], 'got "preferred"'),
    ([PLANS["dual_socket_tp4"]["instances"][0], dict(PLANS["dual_socket_tp4"]["instances"][1], port=8000)],
     "must have unique names and ports"),
], ids=["no-cpus", "tp-times-pp", "memory-policy", "duplicate-port"])
def test_vllm_bad_instance_fails_with_message(tmp_path, instances, message):
    rc, output, dummy = run_role(tmp_path, instances)
    assert rc != 0
    assert message in " ".join(output.split()), output
    assert "Traceback" not in output
    assert not unit_dir(tmp_path).exists()


def test_vllm_missing_numactl_fails_with_message(tmp_path):
    rc, output, dummy = run_role(tmp_path, PLANS["dual_socket_tp4"]["instances"],
                                 vllm_numactl=str(tmp_path / "no-numactl"))
    assert rc != 0
    assert "vllm_binding is numactl but %s does not exist" % (tmp_path / "no-numactl") in " ".join(output.split())


def test_vllm_extra_args_cannot_override_unit_options(tmp_path):
    rc, output, dummy = run_role(tmp_path, PLANS["dual_socket_tp4"]["instances"],
                                 vllm_extra_args={"port": 9000})
    assert rc != 0
    assert "must not set options the unit sets itself" in " ".join(output.split())
