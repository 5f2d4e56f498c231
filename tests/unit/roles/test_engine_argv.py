# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""Every golden vLLM unit's command line (golden/vllm/*/, test_vllm_role.py:
TP, PP bound per worker, process binding, option files, a multi-node head
and its headless rank) parsed by the pinned vLLM's own `vllm serve` parser,
from the pinned wheel's sources, without a GPU (scripts/engine_argv.py in
the engine venv of scripts/engine-cache): a flag the pinned engine renamed
or dropped fails here, not at a production start. The parsed options are
compared with the plan each unit was rendered from.

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

from ansible_collections.gpufleet.numa.tests.unit.roles.test_vllm_role import CASES, MODEL, plan_instances
from ansible_collections.gpufleet.numa.tests.fixtures.vllm_units import role_defaults

REPO = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "vllm"
STAGING_TOKEN = "@STAGING@"


@pytest.fixture(scope="module")
def engine():
    """The engine venv and the pinned sources (scripts/engine-cache --check)."""
    check = subprocess.run([str(REPO / "scripts" / "engine-cache"), "--check"], capture_output=True, text=True,
                           check=False, timeout=60)
    if check.returncode != 0:
        pytest.fail("the pinned vLLM's parser is not cached: run scripts/setup (scripts/engine-cache)\n"
                    + check.stderr)
    return dict(line.split("=", 1) for line in check.stdout.splitlines())


def parse(engine, cases):
    """{case: result} of scripts/engine_argv.py for [{case, argv}], one engine process for all."""
    env = dict(os.environ, PYTHONPATH=engine["src"], VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="ERROR")
    result = subprocess.run([engine["venv"] + "/bin/python", str(REPO / "scripts" / "engine_argv.py"),
                             "--version", engine["version"]], input=json.dumps(cases), env=env,
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


def serve_arguments(argv):
    """The words after `vllm serve`: numactl and its options, the executable and `serve` dropped."""
    if os.path.basename(argv[0]) == "numactl":
        argv = argv[1:]
        while argv[0].startswith("-"):
            argv = argv[1:]
    assert argv[1] == "serve", argv
    return argv[2:]


def golden_units(root):
    """[(case, unit file name, serve argv)] of every golden unit, @STAGING@ as ROOT;
    the option files the units name are written where they point."""
    units = []
    for path in sorted(GOLDEN.glob("*/*")):
        text = path.read_text().replace(STAGING_TOKEN, str(root))
        if path.suffix == ".yaml":
            target = root / "staging" / "etc" / "vllm" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        elif path.suffix == ".service":
            units.append((path.parent.name, path.name, serve_arguments(exec_start(text))))
    return units


def expected(case, unit_name):
    """What `vllm serve` must read from the unit: the plan instance's values and the case's role variables."""
    (instance,) = [i for i in plan_instances(case) if unit_name == "gpufleet-%s.service" % i["name"]]
    variables = dict(role_defaults(), **CASES[case]["vars"])
    want = {"model": MODEL, "tensor_parallel_size": instance["tp_size"], "pipeline_parallel_size": instance["pp_size"]}
    binding = instance["binding"]
    if binding.get("mode") == "per_worker" and variables["vllm_binding"] == "numactl":
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
    else:
        want.update(nnodes=1, node_rank=0, headless=False)
    if not want["headless"]:
        want.update(port=instance["port"], host=variables["vllm_listen_host"], served_model_name=[MODEL])
    for key, value in variables["vllm_extra_args"].items():
        want[key.replace("-", "_")] = value
    return want


@pytest.fixture(scope="module")
def parsed(engine, tmp_path_factory):
    """The golden units and the probes below, parsed in one engine run: (units, {case: result})."""
    root = tmp_path_factory.mktemp("engine-argv")
    units = golden_units(root)
    cases = [{"case": "%s/%s" % (case, name), "argv": argv} for case, name, argv in units]
    # A flag the engine does not have, and option files with a key it has and one it does not.
    cases.append({"case": "made-up flag", "argv": units[0][2] + ["--gpufleet-no-such-flag", "1"]})
    for probe, options in (("known key", {"max-model-len": 4096}),
                           ("made-up key", {"max-model-len": 4096, "gpufleet-no-such-key": True})):
        config = root / ("%s.yaml" % probe.replace(" ", "-"))
        config.write_text(yaml.safe_dump(options))
        cases.append({"case": probe, "argv": [MODEL, "--config", str(config)]})
    return units, parse(engine, cases)


def test_every_golden_unit_is_parsed_by_the_pinned_engine_with_the_plans_values(parsed):
    units, results = parsed
    assert not [(name, r["error"]) for name, r in results.items() if "/" in name and not r["ok"]]
    assert {case for case, name, argv in units} == set(CASES)
    assert {"--headless", "--numa-bind-nodes", "--numa-bind-cpus", "--config", "--nnodes"} <= {
        word for case, name, argv in units for word in argv}
    for case, name, argv in units:
        namespace = results["%s/%s" % (case, name)]["namespace"]
        want = expected(case, name)
        assert dict((key, namespace[key]) for key in want) == want, "%s/%s" % (case, name)


def test_the_pinned_parser_refuses_what_it_does_not_know(parsed):
    """A made-up flag fails as a renamed one would; the option file is read by the parser,
    so a key it does not know fails there too."""
    units, results = parsed
    refused = results["made-up flag"]
    assert not refused["ok"] and "unrecognized arguments: --gpufleet-no-such-flag 1" in refused["error"]
    assert not results["made-up key"]["ok"] and "gpufleet-no-such-key" in results["made-up key"]["error"]
    assert results["known key"]["ok"] and results["known key"]["namespace"]["max_model_len"] == 4096
