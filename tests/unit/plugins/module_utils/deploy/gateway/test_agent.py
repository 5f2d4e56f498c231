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


# /metrics as vLLM (v1 engine, 0.10) writes it: HELP and TYPE lines, one
# sample per engine with engine and model_name labels, histograms and
# counters around the two gauges the weight reads.
VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} %(running)s
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} %(waiting)s
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} %(cache)s
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} 1.234e+06
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-70B-Instruct"} 0.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} 812.0
"""


def metrics(waiting=0.0, cache=0.0, running=3.0):
    return VLLM_METRICS % {"waiting": waiting, "cache": cache, "running": running}


@pytest.mark.parametrize("waiting, cache, weight", [
    (0, 0.0, "100%"),          # idle
    (0, 0.80, "100%"),         # KV cache up to KV_CACHE_LOW: no change
    (0, 0.89, "55%"),          # half way from 0.80 to 0.98
    (0, 0.98, "10%"),          # full: the floor, never 0% (kept for a drain)
    (0, 1.0, "10%"),
    (4, 0.0, "78%"),           # 10 + 90 x (1 - 4/16)
    (8, 0.5, "55%"),
    (16, 0.0, "10%"),
    (250, 0.2, "10%"),
    (8, 0.95, "25%"),          # the lower of the two: cache 0.95 -> 1/6
])
def test_the_engines_load_scales_the_weight(waiting, cache, weight):
    assert agent.engine_weight(metrics(waiting, cache)) == weight
    assert (agent.WAITING_FULL, agent.KV_CACHE_LOW, agent.KV_CACHE_FULL, agent.ENGINE_MIN_WEIGHT) == (16, 0.80, 0.98, 10)


def test_every_engine_of_an_instance_counts():
    """Data parallel: waiting requests add up, the fullest KV cache decides."""
    text = metrics(2, 0.1) + (
        'vllm:num_requests_waiting{engine="1",model_name="m"} 6.0\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5\n')
    assert agent.engine_weight(text) == "55%"       # 8 waiting in all
    assert agent.engine_weight(text.replace("} 0.5\n", "} 0.935\n")) == "32%"   # engine 1's cache: 0.25
    assert agent.metric_values(text, ("vllm:num_requests_waiting",)) == {"vllm:num_requests_waiting": [2.0, 6.0]}


def test_older_and_unreadable_metrics():
    # vLLM before 0.10 named the KV cache gauge gpu_cache_usage_perc.
    assert agent.engine_weight(metrics(0, 0.89).replace("kv_cache_usage_perc", "gpu_cache_usage_perc")) == "55%"
    # Neither gauge (another engine, a stand-in): the instance serves, READY.
    assert agent.engine_weight("# nothing\nother_metric 5\n") == "100%"
    assert agent.engine_weight("") == "100%"
    # Unreadable samples are skipped, not guessed; a label value may hold spaces and braces.
    text = ('vllm:num_requests_waiting{model_name="a b}"} 8\n'
            "vllm:num_requests_waiting NaN\nvllm:num_requests_waiting +Inf\nvllm:num_requests_waiting x\n"
            "vllm:num_requests_waiting_total 99\n")
    assert agent.metric_values(text, ("vllm:num_requests_waiting",)) == {"vllm:num_requests_waiting": [8.0]}
    assert agent.engine_weight(text) == "55%"
