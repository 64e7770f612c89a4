"""Workload endpoint details on the real kernel: state, status, NAT, spoofing."""

from __future__ import annotations

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Topology
from tests.felix_harness import FelixHarness
from tests.kernel import scenario
from tests.kernel.cluster import Cluster, Probe
from tests.kernel.marks import requires_root

pytestmark = [requires_root, pytest.mark.slow]


def _status_of(felix: FelixHarness, workload_id: str) -> str:
    """Read status updates until one for ``workload_id`` arrives; its status."""
    while True:
        env = felix.recv(timeout=20)
        if env.HasField("workload_endpoint_status_update"):
            update = env.workload_endpoint_status_update
            if update.id.workload_id == workload_id:
                return str(update.status.status)


def test_inactive_endpoint_gets_no_traffic_and_reports_down(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver()
    db = scenario.pod("db-1")
    try:
        felix.send(scenario.endpoint(db, cluster.pods["db-1"].iface, state="inactive"))
        assert _status_of(felix, "backend/db-1") == "down"
        cluster.wait_for(Probe("api-1", "db-1", "tcp", 5432, 4, False))
        assert cluster.failures([Probe("db-1", "web-1", "tcp", 80, 4, False)]) == []
        felix.send(scenario.endpoint(db, cluster.pods["db-1"].iface))
        assert _status_of(felix, "backend/db-1") == "up"
        cluster.wait_for(Probe("api-1", "db-1", "tcp", 5432, 4, True))
    finally:
        felix.close_input()
        felix.wait()


def test_oper_status_follows_the_link(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver()
    iface = cluster.pods["web-1"].iface
    try:
        cluster.node.ip("link", "set", iface, "down")
        assert _status_of(felix, "frontend/web-1") == "down"
        cluster.node.ip("link", "set", iface, "up")
        assert _status_of(felix, "frontend/web-1") == "up"
    finally:
        felix.close_input()
        felix.wait()


def test_floating_ip_reaches_the_pod(topology: Topology) -> None:
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    external.ip("route", "add", "172.16.5.10/32", "via", node.address(4))
    felix = cluster.start_driver(FloatingIPs="Enabled")  # Felix's default is Disabled
    prom = scenario.pod("prom-1")
    update = scenario.endpoint(prom, cluster.pods["prom-1"].iface)
    update.endpoint.ipv4_nat.append(pb.NatInfo(ext_ip="172.16.5.10", int_ip=prom.ipv4))
    try:
        assert not external.can_connect("tcp", "172.16.5.10", 80, timeout=0.7)
        felix.send(update)
        result = external.connect("tcp", "172.16.5.10", 80, timeout=5)
        deadline = 10
        while not result.ok and deadline:
            result = external.connect("tcp", "172.16.5.10", 80, timeout=1)
            deadline -= 1
        assert result.ok and result.reply == "prom-1"
    finally:
        felix.close_input()
        felix.wait()


_SPOOF = """
import socket, sys
s = socket.socket()
s.settimeout(1.0)
s.bind((sys.argv[1], 0))
try:
    s.connect((sys.argv[2], 80))
    print("connected")
except OSError as exc:
    print("failed", exc)
"""


def test_spoofed_source_addresses_are_dropped(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver()
    # db-1 may reach prom-1 on port 80 (profiles on both sides).
    db, prom = cluster.pods["db-1"], cluster.pods["prom-1"]
    db.ip("addr", "add", "10.65.0.99/32", "dev", "eth0")
    # A route back to the extra address (someone else's route: the driver
    # leaves it alone), so that only our anti-spoofing rule stands in the way.
    cluster.node.ip("route", "add", "10.65.0.99/32", "dev", db.iface)
    python = "python3"
    try:
        genuine = db.run(python, "-c", _SPOOF, db.ipv4, prom.ipv4)
        assert genuine.stdout.strip() == "connected"
        spoofed = db.run(python, "-c", _SPOOF, "10.65.0.99", prom.ipv4)
        assert spoofed.stdout.startswith("failed")
        # allow_spoofed_source_prefixes lets that source through.
        update = scenario.endpoint(scenario.pod("db-1"), db.iface)
        update.endpoint.allow_spoofed_source_prefixes.append("10.65.0.99/32")
        felix.send(update)
        for _ in range(20):
            if db.run(python, "-c", _SPOOF, "10.65.0.99", prom.ipv4).stdout.strip() == "connected":
                break
        else:
            raise AssertionError("allowed spoofed prefix never got through")
    finally:
        felix.close_input()
        felix.wait()
