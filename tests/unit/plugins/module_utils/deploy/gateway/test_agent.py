# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/gateway/agent.py: the gateways' agent of a GPU host (HAProxy
agent-check), its port's clash rule and the server options; the agent
program and its state writer run for real, the agent's units pass
systemd-analyze verify."""

import os
import shutil
import subprocess

import jinja2
import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import agent
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import command
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths

FILES = os.path.join(fixture_paths.REPO, "roles", "vllm", "files")
TEMPLATES = os.path.join(fixture_paths.REPO, "roles", "vllm", "templates")


def test_a_server_asks_the_agent_about_its_instance_every_second():
    assert agent.server_options("vllm-0") == 'agent-check agent-port 8999 agent-inter 1s agent-send "vllm-0\\n"'
    assert agent.agent_wait() == 3
    assert (agent.state_line("ready"), agent.state_line("drain")) == ("100%", "0%")


@pytest.mark.parametrize("instance, what", [
    ({"name": "a", "port": 8999, "dist_port": 29000}, "its API port 8999"),
    ({"name": "a", "port": 8000, "dist_port": 8999}, "its VLLM_PORT range 8999"),
    ({"name": "a", "port": 8000, "dist_port": 8990, "dist_port_last": 9089}, "its VLLM_PORT range 8990-9089"),
    ({"name": "a", "port": 8000, "dist_port": 29000, "multinode": {"master_port": 8999}}, "its master port 8999"),
])
def test_an_instance_on_the_agents_port_is_refused(instance, what):
    message = agent.port_clash([{"name": "ok", "port": 8000, "dist_port": 29000}, instance])
    assert message.startswith("instance a: %s takes port 8999" % what), message
    assert agent.port_clash([{"name": "ok", "port": 8998, "dist_port": 9000, "multinode": None}]) is None


def run_agent(tmp_path, line):
    result = subprocess.run([os.path.join(FILES, command.AGENT), str(tmp_path) + "/gpufleet-"], input=line,
                            capture_output=True, text=True, timeout=10, check=True)
    return result.stdout


def test_the_agent_answers_the_state_its_instance_wrote(tmp_path):
    state = os.path.join(FILES, command.AGENT_STATE)
    (tmp_path / "gpufleet-vllm-0").mkdir()
    path = str(tmp_path / "gpufleet-vllm-0" / "agent")
    # No state yet (not started, or not ready): 0%.
    assert run_agent(tmp_path, "vllm-0\n") == "0%\n"
    subprocess.run([state, "ready", path], check=True, timeout=10)
    assert run_agent(tmp_path, "vllm-0\r\n") == "100%\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    # The engine already gone ($MAINPID unset): it writes 0% and returns at once.
    environment = dict(os.environ)
    environment.pop("MAINPID", None)
    subprocess.run([state, "drain", path, "http://127.0.0.1:9/metrics", "3", "60"], check=True, timeout=5,
                   env=environment)
    assert run_agent(tmp_path, "vllm-0\n") == "0%\n"
    for hostile in ("../gpufleet-vllm-0\n", "vllm-0/../x\n", "\n", "-x\n"):
        assert run_agent(tmp_path, hostile) == "0%\n", hostile


def test_the_drain_waits_for_the_gateways_and_gives_up_on_a_dead_engine(tmp_path):
    state = os.path.join(FILES, command.AGENT_STATE)
    path = str(tmp_path / "agent")
    environment = dict(os.environ, MAINPID="1")
    result = subprocess.run(["/usr/bin/time", "-f", "%e", state, "drain", path, "http://127.0.0.1:9/metrics", "1",
                             "60"], capture_output=True, text=True, timeout=30, env=environment, check=True)
    # The gateways' wait (1 s here), then no engine answers /metrics: done.
    assert 1.0 <= float(result.stderr.strip().splitlines()[-1]) < 3.0, result.stderr
    assert open(path).read() == "0%\n"


def test_the_agents_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is not installed (scripts/setup installs the systemd package)"
    libexec = tmp_path / "libexec"
    libexec.mkdir()
    shutil.copy(os.path.join(FILES, command.AGENT), str(libexec))
    variables = {"vllm_listen_host": "0.0.0.0", "vllm_unit_prefix": "gpufleet-", "vllm_unit_dir": str(tmp_path),
                 "vllm_libexec_dir": str(libexec), "vllm_hardening": [["NoNewPrivileges", "yes"],
                                                                      ["ProtectSystem", "strict"]]}
    assert command.agent_units(variables, [{"health_url": ""}]) == []
    units = command.agent_units(variables, [{"health_url": "http://127.0.0.1:8000/health"}])
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True,
                                     keep_trailing_newline=True)
    for entry, template in zip(units, ("agent.socket.j2", "agent.service.j2")):
        text = environment.get_template(template).render(__vllm_file={"agent": entry})
        with open(entry["path"], "w") as handle:
            handle.write(text)
    socket_text = open(units[0]["path"]).read()
    assert "ListenStream=0.0.0.0:8999\n" in socket_text and "Accept=yes\n" in socket_text
    assert "FreeBind" not in socket_text
    result = subprocess.run([analyze, "verify", "--man=no", units[0]["path"]], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    bound = command.agent_units(dict(variables, vllm_listen_host="fd00::5"), [{"health_url": "x"}])[0]
    assert bound["listen"] == "[fd00::5]:8999" and bound["free_bind"]
