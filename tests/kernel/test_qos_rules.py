"""A workload's packet-rate and connection limits (``qos_controls``), with real packets."""

from __future__ import annotations

import time

import pytest

from testbed.topology import Pod, Topology
from tests.kernel.cluster import Cluster, Probe
from tests.kernel.marks import requires_root
from tests.kernel.qos import qos_update, received
from tests.kernel.ruleset import our_rules

pytestmark = [requires_root, pytest.mark.slow]

_BURST = 300  # datagrams sent back to back
_UDP_PORT = 7000

# Counts the datagrams that arrive until none has for half a second.
_COUNT = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
s.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
s.settimeout(5.0)
count = 0
try:
    while True:
        s.recv(2048)
        count += 1
        s.settimeout(0.5)
except socket.timeout:
    pass
print(count, flush=True)
"""

_SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[3])):
    s.sendto(b"x" * 64, (sys.argv[1], int(sys.argv[2])))
"""


def _datagrams_through(src: Pod, dst: Pod) -> int:
    """How many of a back-to-back burst of datagrams from ``src`` reach ``dst``."""
    return int(received(dst, _COUNT, src, _SEND, str(_UDP_PORT), str(_BURST)))


def _applied(cluster: Cluster, *, present: str = "", absent: str = "") -> None:
    """Until the node's rules hold ``present`` and no ``absent`` (the
    comments of the limits' rules), i.e. the apply is done."""
    end = time.monotonic() + 20
    while True:
        rules = our_rules(cluster.node)
        if (not present or present in rules) and (not absent or absent not in rules):
            return
        assert time.monotonic() < end, f"not applied: {present!r} / {absent!r}"


def test_a_packet_rate_limit_drops_the_excess_of_a_burst(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver(policies=False)
    web, prom = cluster.pods["web-1"], cluster.pods["prom-1"]
    try:
        assert _datagrams_through(web, prom) == _BURST
        # Ingress: to prom-1 at most 10 a second, 5 at once.
        felix.send(qos_update(cluster, "prom-1", IngressPacketRate=10, IngressPacketBurst=5))
        ingress = f"{prom.iface} over its ingress packet rate 10/s"
        _applied(cluster, present=ingress)
        through = _datagrams_through(web, prom)
        assert 1 <= through <= 20, through
        # Egress: from web-1; prom-1's limit gone.
        felix.send(qos_update(cluster, "prom-1"))
        felix.send(qos_update(cluster, "web-1", EgressPacketRate=20))  # burst: Felix's 5
        egress = f"{web.iface} over its egress packet rate 20/s"
        _applied(cluster, present=egress, absent=ingress)
        through = _datagrams_through(web, prom)
        assert 1 <= through <= 30, through
        # And with no limit, every datagram again.
        felix.send(qos_update(cluster, "web-1"))
        _applied(cluster, absent=egress)
        assert _datagrams_through(web, prom) == _BURST
    finally:
        felix.close_input()
        felix.wait()


def test_a_connection_limit_refuses_the_next_connection(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver(policies=False)
    web, prom = cluster.pods["web-1"], cluster.pods["prom-1"]
    try:
        felix.send(qos_update(cluster, "prom-1", IngressMaxConnections=2))
        ingress = f"{prom.iface} ingress connection limit 2"
        _applied(cluster, present=ingress)
        with web.hold("tcp", prom.ipv4, 80), web.hold("tcp", prom.ipv4, 80) as second:
            third = web.connect("tcp", prom.ipv4, 80, timeout=2)
            assert not third.ok
            assert "refused" in (third.error or "").lower(), third.error  # a TCP reset
            assert second.check()  # the two open ones go on
        # Closed (both ends: conntrack counts a half-closed one), they no longer count.
        cluster.wait_for(Probe("web-1", "prom-1", "tcp", 80, 4, True))
        # Egress: web-1 may keep one connection open; the limit on prom-1 goes.
        felix.send(qos_update(cluster, "prom-1"))
        felix.send(qos_update(cluster, "web-1", EgressMaxConnections=1))
        egress = f"{web.iface} egress connection limit 1"
        _applied(cluster, present=egress, absent=ingress)
        with web.hold("tcp", prom.ipv4, 80):
            assert not web.can_connect("tcp", prom.ipv4, 8080, timeout=2)
        felix.send(qos_update(cluster, "web-1"))
        _applied(cluster, absent=egress)
        with web.hold("tcp", prom.ipv4, 80):
            assert web.can_connect("tcp", prom.ipv4, 8080, timeout=2)
    finally:
        felix.close_input()
        felix.wait()
