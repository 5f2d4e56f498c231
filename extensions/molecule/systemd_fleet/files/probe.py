# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""What runs in a box, as JSON on stdout (verify.yml runs it with the
script module; only Python 3's standard library is needed).

    probe.py units ADDRESS UNIT=PORT...
        For each unit: systemd's view (systemctl show), and what its main
        process really got from the kernel: Cpus_allowed_list and
        Mems_allowed_list (/proc/PID/status), the memory policies of its
        mappings (/proc/PID/numa_maps), CUDA_* (/proc/PID/environ), its
        argv, the status of GET http://ADDRESS:PORT/health and the PID the
        stand-in answering there reports (GET /debug/binding).

    probe.py gateway URL MODEL SECONDS INSTANCE...
        POSTs completions for MODEL to URL (the gateway) until every
        INSTANCE (address:port, as the stand-in names itself in
        X-Stub-Instance) has answered, or SECONDS have passed. Reports the
        answers per instance and the failures.

    probe.py load URL MODEL STOPFILE SECONDS THREADS
        A bounded loopback client: THREADS loops POST one non-streamed
        completion at a time to URL (the gateway), each held about 0.1 s
        in flight by the stand-in, until STOPFILE exists or SECONDS have
        passed. Reports the requests sent, the failed ones (first few
        errors), and the answers per instance. verify.yml runs it on the
        controller (the boxes share its loopback) while the fleet rolls
        and while an instance is killed.
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

SHOW = ("MainPID", "ActiveState", "SubState", "UnitFileState", "NRestarts",
        "CPUAffinity", "NUMAPolicy", "NUMAMask", "ExecMainStartTimestampMonotonic")
ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def systemctl_show(unit):
    out = subprocess.run(["systemctl", "show", unit, "--property=" + ",".join(SHOW)],
                         check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def read(path, mode="r"):
    with open(path, mode) as handle:
        return handle.read()


def process(pid):
    status = dict(line.split(":", 1) for line in read("/proc/%d/status" % pid).splitlines() if ":" in line)
    policies = sorted({line.split()[1] for line in read("/proc/%d/numa_maps" % pid).splitlines()
                       if len(line.split()) > 1})
    environ = dict(item.split("=", 1) for item in read("/proc/%d/environ" % pid, "rb").decode().split("\0")
                   if "=" in item)
    return {
        "cpus_allowed_list": status["Cpus_allowed_list"].strip(),
        "mems_allowed_list": status["Mems_allowed_list"].strip(),
        "memory_policies": policies,
        "environment": {name: environ.get(name) for name in ENVIRONMENT},
        "argv": read("/proc/%d/cmdline" % pid, "rb").decode().rstrip("\0").split("\0"),
    }


def get(address, port, path):
    """(HTTP status or error text, body) of GET http://ADDRESS:PORT/PATH."""
    try:
        with urllib.request.urlopen("http://%s:%s%s" % (address, port, path), timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except OSError as error:
        return str(error), b""


def serving_pid(address, port):
    """PID of the process that answers on the port (the stand-in reports it)."""
    status, body = get(address, port, "/debug/binding")
    try:
        return json.loads(body)["pid"] if status == 200 else None
    except (ValueError, KeyError):
        return None


def units(address, specs):
    report = {}
    for spec in specs:
        unit, port = spec.rsplit("=", 1)
        show = systemctl_show(unit)
        pid = int(show.get("MainPID") or 0)
        report[unit] = {"show": show, "pid": pid, "process": process(pid) if pid else None,
                        "health": get(address, port, "/health")[0],
                        "serving_pid": serving_pid(address, port)}
    return report


def gateway(url, model, seconds, instances):
    body = json.dumps({"model": model, "prompt": "probe", "max_tokens": 1}).encode()
    answers = {}
    failures = []
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not set(instances) <= set(answers):
        sent += 1
        request = urllib.request.Request(url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                json.load(answer)
                name = answer.headers.get("X-Stub-Instance")
                answers[name] = answers.get(name, 0) + 1
        except (OSError, ValueError) as error:
            failures.append(str(error))
            time.sleep(0.2)
    return {"sent": sent, "answers": answers, "failures": failures}


def load(url, model, stopfile, seconds, threads):
    import threading

    body = json.dumps({"model": model, "prompt": "load", "max_tokens": 4, "stub_token_delay": 0.025}).encode()
    lock = threading.Lock()
    tally = {"sent": 0, "failed": 0, "failures": [], "answers": {}}
    deadline = time.monotonic() + seconds

    def loop():
        while time.monotonic() < deadline and not os.path.exists(stopfile):
            request = urllib.request.Request(url + "/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            error = None
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    json.load(answer)
                    name = answer.headers.get("X-Stub-Instance")
            except urllib.error.HTTPError as failure:
                error = "HTTP %d" % failure.code
            except (OSError, ValueError) as failure:
                error = str(failure)
            with lock:
                tally["sent"] += 1
                if error:
                    tally["failed"] += 1
                    if len(tally["failures"]) < 10:
                        tally["failures"].append(error)
                else:
                    tally["answers"][name] = tally["answers"].get(name, 0) + 1
            time.sleep(0.02)

    workers = [threading.Thread(target=loop) for dummy in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    tally["seconds"] = round(time.monotonic() - started, 1)
    return tally


def main(argv):
    if len(argv) >= 2 and argv[0] == "units":
        result = units(argv[1], argv[2:])
    elif len(argv) == 6 and argv[0] == "load":
        result = load(argv[1], argv[2], argv[3], float(argv[4]), int(argv[5]))
    elif len(argv) >= 4 and argv[0] == "gateway":
        result = gateway(argv[1], argv[2], float(argv[3]), argv[4:])
    else:
        sys.stderr.write(__doc__)
        return 2
    json.dump(result, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
