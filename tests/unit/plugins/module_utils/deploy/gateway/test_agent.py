# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""deploy/gateway/agent.py: the gateways' agent of a GPU host (HAProxy
agent-check), its port's clash rule and the server options; the agent
program and its state writer run for real, the agent's units pass
systemd-analyze verify."""

import http.server
import os
import shutil
import subprocess
import threading

import jinja2
import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.gateway import agent
from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import command
from ansible_collections.gpufleet.numa.tests.fixtures import paths as fixture_paths
from ansible_collections.gpufleet.numa.tests.system.fleet_processes import wait_until

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
    for program in (command.AGENT, command.AGENT_WEIGHTS):
        shutil.copy(os.path.join(FILES, program), str(libexec))
    variables = {"vllm_listen_host": "0.0.0.0", "vllm_unit_prefix": "gpufleet-", "vllm_unit_dir": str(tmp_path),
                 "vllm_libexec_dir": str(libexec), "vllm_agent_engine_load": True,
                 "vllm_hardening": [["NoNewPrivileges", "yes"], ["ProtectSystem", "strict"]]}
    assert command.agent_units(variables, [{"health_url": ""}]) == []
    units = command.agent_units(variables, [{"health_url": "http://127.0.0.1:8000/health"}])
    assert [u["name"] for u in units] == ["gpufleet-agent.socket", "gpufleet-agent@.service",
                                          "gpufleet-agent-weights.service"]
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True,
                                     keep_trailing_newline=True)
    for entry in units:
        text = environment.get_template(entry["template"]).render(__vllm_file={"agent": entry})
        with open(entry["path"], "w") as handle:
            handle.write(text)
    socket_text = open(units[0]["path"]).read()
    assert "ListenStream=0.0.0.0:8999\n" in socket_text and "Accept=yes\n" in socket_text
    assert "FreeBind" not in socket_text
    assert units[1]["command"] == [str(libexec / command.AGENT), "/run/gpufleet-", "/run/gpufleet-agent-weights"]
    reader_text = open(units[2]["path"]).read()
    assert ("ExecStart=%s/gpufleet-agent-weights /run/gpufleet- /run/gpufleet-agent-weights 1\n" % libexec
            in reader_text), reader_text
    assert "RuntimeDirectory=gpufleet-agent-weights\n" in reader_text
    assert "IPAddressDeny=any\nIPAddressAllow=localhost\n" in reader_text
    # The reader restarts when its unit, its program or the module it imports changed.
    assert units[2]["restart_on"] == [units[2]["path"], str(libexec / command.AGENT_WEIGHTS),
                                      str(libexec / command.AGENT_LIBRARY)]
    for path in (units[0]["path"], units[2]["path"]):
        result = subprocess.run([analyze, "verify", "--man=no", path], capture_output=True, text=True,
                                timeout=120, check=False)
        assert result.returncode == 0 and result.stderr == "", result.stderr
    bound = command.agent_units(dict(variables, vllm_listen_host="fd00::5"), [{"health_url": "http://[fd00::5]:80/health"}])
    assert bound[0]["listen"] == "[fd00::5]:8999" and bound[0]["free_bind"]
    assert bound[2]["ip_address_allow"] == ["localhost", "fd00::5"]
    # A listen name may resolve to any address: no allow-list then.
    named = command.agent_units(dict(variables, vllm_listen_host="gpu-a.example"),
                                [{"health_url": "http://gpu-a.example:80/health"}])
    assert named[2]["ip_address_allow"] == []
    # Without the engine's load: no reader, and the agent reads no weights.
    off = command.agent_units(dict(variables, vllm_agent_engine_load=False), [{"health_url": "http://x:1/health"}])
    assert [u["name"] for u in off] == ["gpufleet-agent.socket", "gpufleet-agent@.service"]
    assert off[1]["command"] == [str(libexec / command.AGENT), "/run/gpufleet-"]


def test_an_instance_named_like_the_load_reader_is_refused():
    assert agent.name_clash(["vllm-0", "agent-weights"]).startswith("instance agent-weights: its unit would be")
    assert agent.name_clash(["vllm-0", "agent", "agent-weights-1"]) is None


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


class MetricsServer(object):
    """A real HTTP server on loopback that answers /metrics with TEXT (settable)."""

    def __init__(self):
        outer = self
        self.text = ""

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = outer.text.encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/metrics" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def read_weights(tmp_path, weights):
    subprocess.run([os.path.join(FILES, command.AGENT_WEIGHTS), str(tmp_path) + "/gpufleet-", str(weights), "1",
                    "--once"], check=True, timeout=20)


def test_the_agent_answers_the_engines_load_while_the_instance_serves(tmp_path):
    """The unit's state, the reader and the agent, for real: the reader reads
    a real /metrics and the agent answers its weight only while the state is
    100%; a drain wins over any weight; a /metrics that stops answering
    takes the weight away."""
    engine = MetricsServer()
    try:
        state = os.path.join(FILES, command.AGENT_STATE)
        weights = tmp_path / "gpufleet-agent-weights"
        weights.mkdir()
        for name in ("vllm-0", "vllm-1"):
            (tmp_path / ("gpufleet-" + name)).mkdir()
        path = str(tmp_path / "gpufleet-vllm-0" / "agent")
        engine.text = metrics(waiting=4, cache=0.5)

        def answer(name="vllm-0"):
            result = subprocess.run([os.path.join(FILES, command.AGENT), str(tmp_path) + "/gpufleet-", str(weights)],
                                    input=name + "\n", capture_output=True, text=True, timeout=10, check=True)
            return result.stdout

        # Not serving yet: the reader reads nothing, the agent answers 0%.
        read_weights(tmp_path, weights)
        assert os.listdir(str(weights)) == [] and answer() == "0%\n"
        subprocess.run([state, "ready", path, engine.url], check=True, timeout=10)
        assert open(path + ".metrics").read() == engine.url + "\n"
        read_weights(tmp_path, weights)
        # 4 waiting of 16: 10 + 90 x 0.75.
        assert answer() == "78%\n" and sorted(os.listdir(str(weights))) == ["vllm-0"]
        assert oct(os.stat(str(weights / "vllm-0")).st_mode & 0o777) == "0o644"
        # vllm-1 serves without a metrics URL (a unit of an older release): 100%.
        subprocess.run([state, "ready", str(tmp_path / "gpufleet-vllm-1" / "agent")], check=True, timeout=10)
        read_weights(tmp_path, weights)
        assert answer("vllm-1") == "100%\n"
        engine.text = metrics(waiting=16, cache=0.1)
        read_weights(tmp_path, weights)
        assert answer() == "10%\n"
        # A drain wins over the weight still on file.
        environment = dict(os.environ)
        environment.pop("MAINPID", None)
        subprocess.run([state, "drain", path, engine.url, "3", "60"], check=True, timeout=10, env=environment)
        assert (weights / "vllm-0").exists() and answer() == "0%\n"
        read_weights(tmp_path, weights)
        assert not (weights / "vllm-0").exists()
        # Serving again, then its /metrics stops answering: the weight goes, 100% stays.
        subprocess.run([state, "ready", path, engine.url], check=True, timeout=10)
        read_weights(tmp_path, weights)
        assert answer() == "10%\n"
    finally:
        engine.close()
    read_weights(tmp_path, weights)
    assert os.listdir(str(weights)) == [] and answer() == "100%\n"
    # A weight file the agent cannot read as a weight is not answered.
    for bad in ("0%", "101%", "55", "x%", ""):
        (weights / "vllm-0").write_text(bad + "\n")
        assert answer() == "100%\n", bad


def test_the_reader_keeps_reading_until_stopped(tmp_path):
    engine = MetricsServer()
    reader = None
    try:
        engine.text = metrics(cache=0.89)
        weights = tmp_path / "w"
        weights.mkdir()
        (tmp_path / "gpufleet-vllm-0").mkdir()
        subprocess.run([os.path.join(FILES, command.AGENT_STATE), "ready", str(tmp_path / "gpufleet-vllm-0" / "agent"),
                        engine.url], check=True, timeout=10)
        reader = subprocess.Popen([os.path.join(FILES, command.AGENT_WEIGHTS), str(tmp_path) + "/gpufleet-",
                                   str(weights), "0.2"])
        target = weights / "vllm-0"
        wait_until(lambda: target.exists() and target.read_text() == "55%\n", 15, what="the first weight")
        engine.text = metrics(waiting=12)
        wait_until(lambda: target.exists() and target.read_text() == "32%\n", 15, what="the next weight")
    finally:
        if reader is not None:
            reader.terminate()
            reader.wait(timeout=10)
        engine.close()
    bad = subprocess.run([os.path.join(FILES, command.AGENT_WEIGHTS), "x", "y"], capture_output=True, text=True, check=False,
                         timeout=10)
    assert bad.returncode == 2 and bad.stderr.startswith("usage: gpufleet-agent-weights"), bad.stderr


def test_the_drain_waits_for_the_engines_requests_it_reads_from_metrics(tmp_path):
    """The stop's drain reads running and waiting requests with the agent's
    own /metrics reader: it waits while any are left, SECONDS at most."""
    engine = MetricsServer()
    try:
        state = os.path.join(FILES, command.AGENT_STATE)
        environment = dict(os.environ, MAINPID="1")

        def drain(seconds):
            return subprocess.run(["/usr/bin/time", "-f", "%e", state, "drain", str(tmp_path / "agent"), engine.url,
                                   "0", str(seconds)], capture_output=True, text=True, timeout=30, env=environment,
                                  check=True).stderr
        engine.text = metrics(waiting=1, running=2)
        busy = drain(2)
        assert "3 request(s) still in flight after 2 s" in busy and float(busy.splitlines()[-1]) >= 2.0, busy
        engine.text = metrics(waiting=0, running=0)
        assert float(drain(20).splitlines()[-1]) < 2.0
    finally:
        engine.close()
