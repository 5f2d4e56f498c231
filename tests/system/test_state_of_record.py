# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""The kept plan is the state of record (docs/plan.md, "Proposal and
record"), on the demo fleet with the real playbooks and real HAProxy
configuration checks (haproxy -c runs in the gateway role).

One story, each step starting from the state the last one left: a host
that fails in the vllm play and a host that cannot be reached keep their
recorded instances, and the gateway routes only what was deployed; a run
limited to one GPU host says which instances the gateways do not route
yet; a host taken out of gpu_servers is taken down (units and files gone)
before it leaves the record, one the inventory no longer has stays "to
remove" and is no longer routed; the decommission playbook takes the rest
down.
"""

import json
import re

import pytest

from ansible_collections.gpufleet.numa.tests.fixtures.demo_fleet import (
    A6000, H100, RTX, demo_copy, record, routed, run_playbook as run, write_inventory)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    return demo_copy(tmp_path_factory.mktemp("record"))


def recorded(fleet, host):
    """(name, GPU indices, port, CPUs) of the host's recorded instances."""
    return [(i["name"], i["gpu_indices"], i["port"], i["cpus"]) for i in record(fleet)["instances"] if i["host"] == host]


# The host's agent for the gateways (a socket and its service), beside its instances.
AGENT = ["gpufleet-agent-weights.service", "gpufleet-agent.socket", "gpufleet-agent@.service"]


def units(fleet, host):
    """Every unit file of the role on the host: its instances' and its agent's."""
    folder = fleet["staging"] / host / "etc" / "systemd" / "system"
    return sorted(p.name for p in folder.glob("gpufleet-*") if p.suffix in (".service", ".socket")) \
        if folder.exists() else []


def expected_routes(fleet):
    return sorted((i["host"] + "-" + i["name"], str(i["port"])) for i in record(fleet)["instances"]
                  if i["host"] in fleet["hosts"]["all"]["children"]["gpu_servers"]["hosts"])


def addresses(fleet):
    """host -> the addresses HAProxy and Prometheus's vllm targets reach its instances at (each must agree)."""
    config = (fleet["staging"] / "demo-gateway" / "etc" / "haproxy" / "haproxy.cfg").read_text()
    haproxy, prometheus = {}, {}
    for server, address in re.findall(r"^\s*server (\S+) (\S+):\d+", config, re.M):
        host = server.rsplit("-vllm-", 1)[0]
        haproxy.setdefault(host, set()).add(address)
    for group in json.loads((fleet["staging"] / "prometheus" / "vllm.json").read_text()):
        prometheus.setdefault(group["labels"]["host"], set()).update(t.rsplit(":", 1)[0] for t in group["targets"])
    assert haproxy == prometheus
    return dict((host, sorted(found)) for host, found in haproxy.items())


def test_the_record_is_what_runs(fleet):
    base = write_inventory(fleet, "hosts.yml")
    run(fleet, "deploy_inference.yml", base)
    first = dict((h, recorded(fleet, h)) for h in (H100, RTX, A6000))
    assert all(len(first[h]) == 2 for h in first)
    assert routed(fleet) == expected_routes(fleet) and len(routed(fleet)) == 6
    # Where each host's units listen, as deployed (docs/plan.md, hosts.HOST.address).
    assert [record(fleet)["hosts"][h]["address"] for h in (H100, RTX, A6000)] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]

    # A host that fails in the vllm play (a missing vllm_executable, with a
    # tp change) and one that cannot be reached (its capture is replayed, so
    # it is planned again) keep what they run; the gateway routes only that.
    # A GPU excluded on socket 0 of the rtx4090 (tp 4: socket 0 can no
    # longer hold an instance) takes vllm-0 down and leaves vllm-1, on the
    # other socket, exactly as it was: same name, port and CPUs.
    def broken(groups):
        gpu = groups["gpu_servers"]["hosts"]
        gpu[A6000].update(gpufleet_tp_size=2, vllm_install=False, vllm_executable="/nonexistent/bin/vllm")
        gpu[H100].update(ansible_connection="ssh", ansible_host="127.0.0.9", ansible_port=1)
        gpu[RTX].update(gpufleet_exclude_gpus=["GPU1"])
    out = run(fleet, "deploy_inference.yml", write_inventory(fleet, "broken.yml", broken), rc=4)
    assert "planned again: %s, %s, %s" % (A6000, H100, RTX) in out
    assert recorded(fleet, A6000) == first[A6000] and recorded(fleet, H100) == first[H100]
    assert "failed: %s: not deployed (its errors are above); it keeps its recorded instances vllm-0 :8000, " \
           "vllm-1 :8001" % A6000 in out
    assert "failed: %s: not deployed" % H100 in out
    assert recorded(fleet, RTX) == first[RTX][1:]
    assert "deployed: %s: vllm-0 removed (GPUs 0,1,2,3, :8000); 1 instance unchanged" % RTX in out
    assert units(fleet, RTX) == AGENT + ["gpufleet-vllm-1.service"]
    assert routed(fleet) == expected_routes(fleet) and len(routed(fleet)) == 5
    assert units(fleet, A6000) == AGENT + ["gpufleet-vllm-0.service", "gpufleet-vllm-1.service"]
    # The h100 moved (ansible_host, and so vllm_listen_host) while down: its
    # units still listen at its recorded address, and HAProxy and Prometheus
    # stay there.
    assert addresses(fleet) == {H100: ["127.0.0.2"], RTX: ["127.0.0.3"], A6000: ["127.0.0.4"]}
    assert [record(fleet)["hosts"][h]["address"] for h in (H100, RTX, A6000)] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]

    # A run limited to one GPU host whose instances change (tp 2 there):
    # deployed and recorded, and the end of the run says the gateways do not
    # route the new instances yet (vllm-1 keeps its name and port), naming
    # them and the command that finishes.
    # It listens at another address now (only the hosts of the run deploy with -e).
    out = run(fleet, "deploy_inference.yml", base, "-l", RTX, "-e", "gpufleet_tp_size=2", "-e", "vllm_listen_host=127.0.0.5")
    assert [len(g) for _n, g, _p, _c in recorded(fleet, RTX)] == [2, 2, 2, 2]
    assert re.search(r"partial run: the gateways \(demo-gateway\) were not in this run, so HAProxy does not route "
                     r"%s-vllm-0, %s-vllm-2, %s-vllm-3 yet: finish with ansible-playbook "
                     r"gpufleet\.numa\.deploy_inference -i %s --limit gateways" % (RTX, RTX, RTX, re.escape(str(base))), out), out[-3000:]
    assert len(routed(fleet)) == 5  # the gateway was not touched
    run(fleet, "deploy_inference.yml", base, "-l", "gateways")
    assert routed(fleet) == expected_routes(fleet) and len(routed(fleet)) == 8
    # The rtx4090 converged at its new address: the record keeps it, and the
    # gateway routes it there although today's inventory says 127.0.0.3; the
    # hosts not in that run keep theirs.
    assert record(fleet)["hosts"][RTX]["address"] == "127.0.0.5"
    assert addresses(fleet) == {H100: ["127.0.0.2"], RTX: ["127.0.0.5"], A6000: ["127.0.0.4"]}

    # The a6000 leaves gpu_servers (it stays in the inventory, in another
    # group) and the h100 leaves the inventory: the a6000 is drained,
    # stopped and its files removed, then forgotten; the h100 stays
    # recorded "to remove" and is no longer routed.
    def shrink(groups):
        gpu = groups["gpu_servers"]["hosts"]
        groups["retired"] = {"hosts": {A6000: gpu.pop(A6000)}}
        del gpu[H100]
    smaller = write_inventory(fleet, "smaller.yml", shrink)
    check = run(fleet, "deploy_inference.yml", smaller, "--check")
    assert "to take down (no longer in gpu_servers): %s, %s" % (A6000, H100) in check
    assert units(fleet, A6000)  # check mode removes nothing
    out = run(fleet, "deploy_inference.yml", smaller)
    assert units(fleet, A6000) == []
    assert not (fleet["staging"] / A6000 / "etc" / "vllm" / "secrets.env").exists()
    assert "removed: %s: no longer in gpu_servers" % A6000 in out
    assert "to remove: %s: no longer in gpu_servers and not taken down in this run" % H100 in out
    assert sorted(record(fleet)["hosts"]) == [H100, RTX]
    # (the rtx4090 is at the inventory's tp 4 again: two instances)
    assert sorted(r[0] for r in routed(fleet)) == ["%s-vllm-0" % RTX, "%s-vllm-1" % RTX]

    # The decommission playbook takes the rest down: the record keeps only
    # the host the inventory does not have.
    out = run(fleet, "decommission.yml", smaller, "-e", "gpufleet_decommission=all")
    assert units(fleet, RTX) == []
    assert sorted(record(fleet)["hosts"]) == [H100]
    # Prometheus no longer scrapes what was taken down (round 3: the targets
    # stayed and fired GpufleetInstanceDown).
    targets = json.loads((fleet["staging"] / "prometheus" / "vllm.json").read_text())
    assert [t["labels"]["host"] for t in targets if t["labels"]["host"] == RTX] == []
    assert "not in the inventory (they stay recorded until they can be reached): %s" % H100 in out
    # The rtx4090 is still in gpu_servers: the next deploy brings it back, said now.
    assert "still in gpu_servers: %s: the next deploy_inference run deploys it again as new" % RTX in out
    out = run(fleet, "decommission.yml", smaller, "-e", "gpufleet_decommission=nope", rc=2)
    assert "gpufleet_decommission: nope is not in the kept plan (recorded: %s)" % H100 in out
