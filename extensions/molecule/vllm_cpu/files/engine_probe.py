# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The real engine as it runs, as JSON on stdout (verify.yml; only Python
3's standard library is needed).

    engine_probe.py processes SPEC
        SPEC is JSON: [{unit, cpus, mems, ranks}] from the plan (ranks: each
        rank's cpulist). For each unit, every process of its cgroup (API
        server, engine core, worker, helpers) as the kernel sees it:
        Cpus_allowed_list and Mems_allowed_list of the process and of each
        of its threads, the memory policies of its mappings (numa_maps),
        VLLM_CPU_OMP_THREADS_BIND from its environment. `problems` lists
        every difference from the plan; `kinds` the vLLM processes found.

    engine_probe.py models URL NAME...
        One completion per served model NAME through URL (the gateway):
        HTTP status and the model that answered.

    engine_probe.py metrics URL...
        GET each URL (an instance's /metrics): status and how many vllm:
        samples it has.
"""

import json
import os
import sys
import urllib.error
import urllib.request


def cpulist(text):
    out = set()
    for part in text.strip().split(","):
        if part:
            low, dummy, high = part.partition("-")
            out.update(range(int(low), int(high or low) + 1))
    return out


def read(path, mode="r"):
    with open(path, mode) as handle:
        return handle.read()


def status(path):
    return dict(line.split(":", 1) for line in read(path).splitlines() if ":" in line)


def unit_pids(unit):
    """Every process whose cgroup is the unit's (cgroup v1 or v2)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if "/%s" % unit in read("/proc/%s/cgroup" % entry):
                    pids.append(int(entry))
            except OSError:
                continue
    return sorted(pids)


def process(pid):
    stat = status("/proc/%d/status" % pid)
    environ = dict(item.split("=", 1) for item in read("/proc/%d/environ" % pid, "rb").decode().split("\0")
                   if "=" in item)
    threads = sorted({status("/proc/%d/task/%s/status" % (pid, tid))["Cpus_allowed_list"].strip()
                      for tid in os.listdir("/proc/%d/task" % pid)})
    return {
        "pid": pid,
        "comm": read("/proc/%d/comm" % pid).strip(),
        "argv": read("/proc/%d/cmdline" % pid, "rb").decode().rstrip("\0").split("\0"),
        "cpus": stat["Cpus_allowed_list"].strip(),
        "mems": stat["Mems_allowed_list"].strip(),
        "thread_cpus": threads,
        "policies": sorted({line.split()[1] for line in read("/proc/%d/numa_maps" % pid).splitlines()
                            if len(line.split()) > 1}),
        "omp_bind": environ.get("VLLM_CPU_OMP_THREADS_BIND"),
    }


def kind(proc):
    if proc["comm"].startswith("VLLM::EngineCor"):
        return "engine_core"
    if proc["comm"].startswith("VLLM::Worker"):
        return "worker"
    if "vllm.entrypoints.openai.api_server" in proc["argv"]:
        return "api_server"
    return "helper"


def check_unit(spec):
    procs = []
    for pid in unit_pids(spec["unit"]):
        try:
            procs.append(process(pid))
        except OSError:
            continue  # gone meanwhile
    plan_cpus = cpulist(spec["cpus"])
    rank_cpus = set().union(*[cpulist(r) for r in spec["ranks"]])
    mems = ",".join(str(m) for m in spec["mems"])
    want_bind = "|".join(spec["ranks"])
    problems = []
    for proc in procs:
        proc["kind"] = kind(proc)
        where = "%s pid %d (%s)" % (spec["unit"], proc["pid"], proc["kind"])
        if not cpulist(proc["cpus"]) <= plan_cpus:
            problems.append("%s: CPUs %s outside the plan's %s" % (where, proc["cpus"], spec["cpus"]))
        outside = [t for t in proc["thread_cpus"] if not cpulist(t) <= plan_cpus]
        if outside:
            problems.append("%s: threads on CPUs %s outside the plan's %s" % (where, outside, spec["cpus"]))
        if proc["mems"] != mems:
            problems.append("%s: memory nodes %s, the plan's %s" % (where, proc["mems"], mems))
        # vLLM's CPU worker marks some mappings MPOL_LOCAL (the node of the
        # CPU that touches them): local to the plan's nodes, as its CPUs are.
        if set(proc["policies"]) - {"local"} != {"bind:" + mems}:
            problems.append("%s: memory policies %s, the plan's bind:%s" % (where, proc["policies"], mems))
        # The unit's Environment= reaches the API server; vLLM hands each
        # worker its rank's CPUs itself (its environ no longer has them).
        if proc["kind"] == "api_server" and proc["omp_bind"] != want_bind:
            problems.append("%s: VLLM_CPU_OMP_THREADS_BIND %r, the plan's %r" % (where, proc["omp_bind"], want_bind))
        # vLLM pins each OpenMP thread of a worker to one CPU of its rank.
        pinned = [t for t in proc["thread_cpus"] if len(cpulist(t)) == 1]
        if proc["kind"] == "worker" and (not pinned or not set().union(*map(cpulist, pinned)) <= rank_cpus):
            problems.append("%s: OpenMP threads not pinned one CPU each inside the ranks' CPUs %s (threads %s)"
                            % (where, "|".join(spec["ranks"]), proc["thread_cpus"]))
    kinds = sorted({proc["kind"] for proc in procs} - {"helper"})
    if kinds != ["api_server", "engine_core", "worker"]:
        problems.append("%s: vLLM processes found %s (expected api_server, engine_core, worker)"
                        % (spec["unit"], kinds))
    return {"processes": procs, "kinds": kinds, "problems": problems}


def post(url, body, timeout):
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.status, json.load(answer)


def models(url, names):
    report = {}
    for name in names:
        try:
            code, body = post(url, {"model": name, "prompt": "Hello", "max_tokens": 4}, 60)
            report[name] = {"status": code, "model": body.get("model"), "text": body["choices"][0]["text"]}
        except urllib.error.HTTPError as error:
            report[name] = {"status": error.code, "model": None}
        except (OSError, ValueError, KeyError) as error:
            report[name] = {"status": str(error), "model": None}
    return report


def metrics(urls):
    report = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                text = answer.read().decode()
                report[url] = {"status": answer.status,
                               "vllm_samples": sum(1 for line in text.splitlines() if line.startswith("vllm:"))}
        except (OSError, ValueError) as error:
            report[url] = {"status": str(error), "vllm_samples": 0}
    return report


def main(argv):
    if len(argv) == 2 and argv[0] == "processes":
        result = dict((spec["unit"], check_unit(spec)) for spec in json.loads(argv[1]))
    elif len(argv) >= 3 and argv[0] == "models":
        result = models(argv[1], argv[2:])
    elif len(argv) >= 2 and argv[0] == "metrics":
        result = metrics(argv[1:])
    else:
        sys.stderr.write(__doc__)
        return 2
    json.dump(result, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
