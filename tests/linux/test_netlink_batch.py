"""Raw netlink: the batch writer (its encoding as pyroute2 decodes it, the kernel's
answers) and the dump reader (the same fields as pyroute2 reads)."""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroute2.netlink.rtnl.ndmsg import ndmsg  # type: ignore[import-untyped]
from pyroute2.netlink.rtnl.rtmsg import rtmsg  # type: ignore[import-untyped]

from dataplane.linux.netlink.batch import NeighRequest, RouteRequest, encode
from testbed.topology import Topology, kernel_unavailable

REPO = Path(__file__).resolve().parents[2]

v4 = st.ip_addresses(v=4).map(str)
nets = st.one_of(
    st.builds(
        lambda a, n: str(ipaddress.ip_network(f"{a}/{n}", strict=False)), v4, st.integers(0, 32)
    ),
    st.builds(
        lambda a, n: str(ipaddress.ip_network(f"{a}/{n}", strict=False)),
        st.ip_addresses(v=6).map(str),
        st.integers(0, 128),
    ),
)
macs = st.lists(st.integers(0, 255), min_size=6, max_size=6).map(
    lambda b: ":".join(f"{x:02x}" for x in b)
)


@given(
    nets,
    st.sampled_from(["replace", "del"]),
    st.integers(1, 255),
    st.sampled_from([1, 6]),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_route_requests_decode_to_what_was_asked(  # noqa: PLR0917 - hypothesis arguments
    dst: str, command: str, protocol: int, rtype: int, oif: int, onlink: bool
) -> None:
    net = ipaddress.ip_network(dst)
    gateway = str(net.network_address) if rtype == 1 else ""
    request = RouteRequest(
        command, dst, protocol, rtype=rtype, oif=oif, gateway=gateway, onlink=onlink
    )
    msg = rtmsg(encode(request, 7))
    msg.decode()
    assert msg["header"]["sequence_number"] == 7
    assert msg["header"]["type"] == (25 if command == "del" else 24)
    assert (msg["dst_len"], msg["proto"], msg.get("table")) == (net.prefixlen, protocol, 254)
    assert ipaddress.ip_address(msg.get("dst")) == net.network_address
    if command == "del":
        assert (msg["scope"], msg["type"]) == (255, 0)  # any scope, any type: ours by protocol
    else:
        assert msg["type"] == rtype
        assert msg.get("oif") == (oif or None)
        if gateway:
            assert ipaddress.ip_address(msg.get("gateway")) == ipaddress.ip_address(gateway)
        else:
            assert msg.get("gateway") is None
        assert bool(msg["flags"] & 4) == onlink


@given(st.sampled_from([socket.AF_INET, socket.AF_BRIDGE]), v4, macs, st.integers(1, 2**31 - 1))
def test_neighbour_requests_decode_to_what_was_asked(
    family: int, address: str, mac: str, index: int
) -> None:
    msg = ndmsg(encode(NeighRequest("replace", family, index, mac, address, flags=2), 1))
    msg.decode()
    assert (msg["family"], msg["ifindex"], msg["state"], msg["flags"]) == (family, index, 0x80, 2)
    assert (msg.get("NDA_DST"), msg.get("NDA_LLADDR")) == (address, mac)


def _python_in(netns: str, script: str) -> Any:
    """What ``script`` prints as JSON, run in ``netns`` (its own netlink sockets live there)."""
    argv = ["ip", "netns", "exec", netns, sys.executable, "-c", script]
    result = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(result.stdout)


_WRITE = """
import json, socket, sys
from dataplane.linux.netlink.batch import NetlinkBatch, NeighRequest, RouteRequest
eth0 = socket.if_nametoindex("eth0")
requests = [
    RouteRequest("replace", "10.70.0.0/24", 80, oif=eth0, gateway="10.66.0.9", onlink=True),
    RouteRequest("replace", "10.70.1.0/24", 80, gateway="10.99.99.1"),  # no route to it
    RouteRequest("replace", "10.70.2.0/24", 80, rtype=6),
    RouteRequest("replace", "fd00:70::/64", 80, oif=eth0, scope=0),
    RouteRequest("del", "10.70.3.0/24", 80),  # never there
    NeighRequest("replace", socket.AF_INET, eth0, "66:00:00:00:00:09", "10.66.0.9"),
] + [RouteRequest("replace", f"10.71.{i}.0/24", 80, rtype=6) for i in range(256)] + [
    RouteRequest("replace", f"10.72.{i}.0/24", 80, rtype=6) for i in range(256)
]
# Refused requests where a chunk ends (the one that asks for the
# acknowledgement) and where the whole batch ends.
requests[255] = RouteRequest("replace", "10.73.0.0/24", 80, gateway="10.99.99.1")
requests.append(RouteRequest("replace", "10.73.1.0/24", 80, gateway="10.99.99.2"))
print(json.dumps([e.errno if e else 0 for e in NetlinkBatch()(requests)]))
"""


@pytest.mark.skipif(kernel_unavailable() is not None, reason=str(kernel_unavailable()))
def test_the_kernel_answers_each_request_of_a_batch_on_its_own() -> None:
    with Topology() as topology:
        netns = topology.new_netns("nl")
        topology.run(netns, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
        topology.run(netns, "ip", "link", "set", "eth0", "up")
        # The kernel takes an onlink gateway only where some address of
        # that interface could reach out at all.
        topology.run(netns, "ip", "addr", "add", "192.168.5.1/24", "dev", "eth0")
        errors = _python_in(netns, _WRITE)
        # More than two chunks, every answer matched to its request.
        assert len(errors) == 6 + 512 + 1
        assert errors[:6] == [0, 101, 0, 0, 3, 0]  # ENETUNREACH, ESRCH
        assert [i for i, e in enumerate(errors) if e] == [1, 4, 255, 518]
        assert errors[255] == errors[518] == 101
        routes = topology.run(netns, "ip", "route", "show", "proto", "80").stdout
        assert "10.70.0.0/24 via 10.66.0.9 dev eth0 onlink" in routes
        assert "blackhole 10.70.2.0/24" in routes
        assert "10.70.1.0" not in routes
        assert routes.count("blackhole 10.7") == 1 + 512 - 1
        assert "10.73." not in routes
        v6 = topology.run(netns, "ip", "-6", "route", "show", "proto", "80").stdout
        assert "fd00:70::/64 dev eth0" in v6
        neigh = topology.run(netns, "ip", "neigh", "show", "dev", "eth0").stdout
        assert "10.66.0.9 lladdr 66:00:00:00:00:09 PERMANENT" in neigh


_READ = """
import json, socket
from pyroute2 import IPRoute
from dataplane.linux.netlink.dump import dump_links, dump_routes

LINK = ("ifname", "index", "flags", "operstate")
ROUTE = ("proto", "dst", "dst_len", "oif", "gateway", "type", "flags", "table")

def fields(msg, keys):
    return {k: msg.get(k) for k in keys}

ipr = IPRoute()
out = {
    "links": [[fields(m, LINK) for m in ipr.get_links()], [fields(m, LINK) for m in dump_links()]],
}
for family in (socket.AF_INET, socket.AF_INET6):
    for table in (254, 300):
        key = f"routes {family} {table}"
        theirs = [fields(m, ROUTE) for m in ipr.get_routes(family=family, table=table)]
        out[key] = [theirs, [fields(m, ROUTE) for m in dump_routes(family, table)]]
print(json.dumps(out))
"""


@pytest.mark.skipif(kernel_unavailable() is not None, reason=str(kernel_unavailable()))
def test_the_dumps_read_links_and_routes_as_pyroute2_does() -> None:
    with Topology() as topology:
        netns = topology.new_netns("nd")
        run = topology.run
        run(netns, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
        run(netns, "ip", "link", "set", "eth0", "up")  # eth1 down: no carrier on eth0
        run(netns, "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1")
        run(netns, "ip", "link", "set", "up1", "up")
        run(netns, "ip", "link", "set", "up0", "up")
        run(netns, "ip", "link", "set", "lo", "up")
        run(netns, "ip", "addr", "add", "192.168.5.1/24", "dev", "up0")
        run(netns, "ip", "addr", "add", "fd00:5::1/64", "dev", "up0", "nodad")
        for route in (
            "10.70.0.0/24 via 10.66.0.9 dev eth0 onlink proto 80",
            "10.70.1.0/24 via 192.168.5.9 proto 80",
            "blackhole 10.70.2.0/26 proto 80",
            "10.70.3.4 dev up0 scope link proto 80",
            "10.70.4.0/24 dev up0 proto 17",
            "10.70.5.0/24 dev up0 table 300 proto 80",
            "0.0.0.0/0 via 192.168.5.254",
        ):
            run(netns, "ip", "route", "add", *route.split())
        for route in ("fd00:70::/64 dev up0 proto 80", "blackhole fd00:71::/122 proto 80"):
            run(netns, "ip", "-6", "route", "add", *route.split())
        answers = _python_in(netns, _READ)
        for what, (theirs, ours) in answers.items():
            assert ours == theirs, what
        links = {link["ifname"]: link for link in answers["links"][1]}
        assert links["up0"]["operstate"] == "UP"
        assert links["lo"]["operstate"] == "UNKNOWN"
        assert links["eth0"]["operstate"] == "LOWERLAYERDOWN"
        assert len(answers["routes 2 254"][1]) >= 7
        assert [r["dst"] for r in answers["routes 2 300"][1]] == ["10.70.5.0"]


_EVENTS = """
import json, subprocess
from pyroute2 import IPRoute
from dataplane.linux.netlink.dump import FastReads

KEYS = ("event", "ifname", "index", "flags", "operstate", "mtu")
ours = FastReads(IPRoute)
ours.bind(1)  # RTMGRP_LINK, as the link monitor binds
theirs = IPRoute()
theirs.bind(groups=1)
for command in (
    "link add ev0 type veth peer name ev1", "link set ev0 mtu 1400", "link set ev1 up",
    "link set ev0 up", "link del ev0",
):
    subprocess.run(["ip", *command.split()], check=True)

def until_both_gone(get):
    seen = []
    while {"ev0", "ev1"} - {m.get("ifname") for m in seen if m.get("event") == "RTM_DELLINK"}:
        seen += [{k: m.get(k) for k in KEYS} for m in get()]
    return seen

print(json.dumps([until_both_gone(ours.get), until_both_gone(theirs.get)]))
"""


@pytest.mark.skipif(kernel_unavailable() is not None, reason=str(kernel_unavailable()))
def test_link_notifications_read_on_our_own_socket_as_pyroute2_reads_them() -> None:
    with Topology() as topology:
        netns = topology.new_netns("ne")
        ours, theirs = _python_in(netns, _EVENTS)
        assert ours == theirs
        ev0 = [m for m in ours if m["ifname"] == "ev0"]
        assert ev0[0]["event"] == "RTM_NEWLINK"
        assert ev0[-1]["event"] == "RTM_DELLINK"
        assert {m["mtu"] for m in ev0} >= {1500, 1400}
        assert "UP" in {m["operstate"] for m in ours if m["ifname"] == "ev1"}
