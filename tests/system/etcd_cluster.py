# -*- coding: utf-8 -*-
# Copyright: gpufleet.numa contributors
# Apache License 2.0 (see LICENSE)
"""A real etcd cluster on loopback for the system tests (Debian's
etcd-server; scripts/setup installs it): `size` members, each with its own
data directory and ports, reached only over etcd's HTTP/JSON API, fast
elections (50 ms heartbeats, 500 ms election timeout) so that a member
killed in a test is replaced quickly. test_state_etcd.py tests the store
on it, test_state_backend_etcd.py the deploy."""

import os
import shutil

import pytest

from ansible_collections.gpufleet.numa.plugins.module_utils.state import etcd_client as ec

from fleet_processes import ProcessGroup, free_port, http_request, wait_until

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ADDRESS = "127.0.0.1"
ENVIRONMENT = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "LANG": "C.UTF-8"}

# Tests that start a cluster carry this mark.
NEEDS_ETCD = pytest.mark.skipif(not os.access(ETCD, os.X_OK), reason="etcd is not installed (scripts/setup)")


class Cluster(object):
    """etcd members on loopback: their client URLs by name, and their processes."""

    def __init__(self, group, root, size=3, tls=None):
        self.group, self.names = group, ["m%d" % i for i in range(size)]
        scheme = "https" if tls else "http"
        self.clients = dict((name, "%s://%s:%d" % (scheme, ADDRESS, free_port(ADDRESS))) for name in self.names)
        peers = dict((name, "http://%s:%d" % (ADDRESS, free_port(ADDRESS))) for name in self.names)
        initial = ",".join("%s=%s" % (name, peers[name]) for name in self.names)
        for name in self.names:
            argv = [ETCD, "--name", name, "--data-dir", os.path.join(root, name),
                    "--listen-client-urls", self.clients[name], "--advertise-client-urls", self.clients[name],
                    "--listen-peer-urls", peers[name], "--initial-advertise-peer-urls", peers[name],
                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                    "--initial-cluster-token", os.path.basename(root),
                    "--heartbeat-interval", "50", "--election-timeout", "500"]
            if tls:
                argv += ["--cert-file", tls["server_cert"], "--key-file", tls["server_key"],
                         "--trusted-ca-file", tls["ca"], "--client-cert-auth"]
            group.start(name, argv, ENVIRONMENT)
        self.tls = tls

    def endpoints(self, first=None):
        names = sorted(self.names, key=lambda name: name != first)
        return [self.clients[name] for name in names]

    def status(self, name):
        """(member id, leader id) as the member says, or None."""
        client = ec.Client(dict(self.settings("/x/"), endpoints=[self.clients[name]], retry_seconds=0, timeout=2))
        try:
            answer = client.call("/v3/maintenance/status", {})
        except ec.EtcdError:
            return None
        return answer["header"]["member_id"], answer.get("leader")

    def leader(self):
        for name in self.names:
            status = self.status(name)
            if status and status[0] == status[1]:
                return name
        return None

    def settings(self, prefix, **more):
        values = {"endpoints": self.endpoints(), "prefix": prefix, "timeout": 2, "retry_seconds": 10}
        values.update(more)
        return values

    def wait_healthy(self):
        for name in self.names:
            process = self.group.processes[name][0]

            def healthy(name=name, process=process):
                if process.poll() is not None:
                    raise AssertionError("etcd %s exited:\n%s" % (name, self.group.log(name)))
                if self.tls:
                    return True
                try:
                    host, port = self.clients[name].rsplit("/", 1)[1].split(":")
                    status, dummy, body = http_request(host, int(port), "GET", "/health", timeout=1)
                    return status == 200 and b'"true"' in body
                except OSError:
                    return False
            wait_until(healthy, 30, what="etcd member %s healthy" % name)
        if not self.tls:
            wait_until(self.leader, 30, what="an etcd leader")
        return self


def cluster_of(tmp_path_factory, size=3, tls=None):
    root = str(tmp_path_factory.mktemp("etcd"))
    group = ProcessGroup(root)
    try:
        cluster = Cluster(group, root, size, tls)
        yield cluster.wait_healthy()
    finally:
        group.stop_all()
