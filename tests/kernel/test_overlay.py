"""Two nodes, each driven by this program, form a VXLAN overlay: proven with packets."""

from __future__ import annotations

import json

import pytest
from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Node, Topology
from tests.kernel import scenario
from tests.kernel.marks import requires_root
from tests.kernel.overlay_cluster import TCP_PORT, UDP_PORT, OverlayCluster
from tests.kernel.ruleset import rule_packets
from tests.waiting import eventually

pytestmark = [requires_root, pytest.mark.slow]


def _reach(cluster: OverlayCluster, src: str, dst: str, family: int) -> list[str]:
    """What fails of TCP, UDP and ICMP from pod ``src`` to pod ``dst``."""
    s, d = cluster.pods[src], cluster.pods[dst]
    address = d.address(family)  # type: ignore[arg-type]
    out = []
    if not s.can_connect("tcp", address, TCP_PORT, timeout=3.0):
        out.append(f"{src}->{dst} tcp v{family}")
    if not s.can_connect("udp", address, UDP_PORT, timeout=3.0):
        out.append(f"{src}->{dst} udp v{family}")
    if not s.ping(address, timeout=3.0):
        out.append(f"{src}->{dst} icmp v{family}")
    return out


def _cross_pairs() -> list[tuple[str, str]]:
    return [(a, b) for a in ("a1", "a2") for b in ("b1", "b2")] + [
        (b, a) for b in ("b1", "b2") for a in ("a1", "a2")
    ]


def _kernel(node: Node, *argv: str) -> str:
    return node.run(*argv).stdout


def _tx_packets(node: Node, device: str) -> int:
    out = node.ip("-s", "-j", "link", "show", device).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["packets"])


def test_pods_reach_pods_on_the_other_node_only_through_vxlan(topology: Topology) -> None:
    cluster = OverlayCluster(topology)
    cluster.start_all()
    a = cluster.nodes["node-a"]
    routes = _kernel(a, "ip", "route", "show", "proto", "80")
    assert "10.65.2.0/26 via 10.65.2.0 dev vxlan.calico onlink" in routes
    assert "blackhole 10.65.1.0/26" in routes
    link = _kernel(a, "ip", "-d", "link", "show", "vxlan.calico")
    assert "vxlan id 4096" in link and "dstport 4789" in link and "nolearning" in link
    assert "66:00:00:00:01:04" in link and "mtu 1450" in link
    cluster.underlay.reset_counters()
    failures = [
        f
        for family in (4, 6)
        for src, dst in _cross_pairs()
        for f in _reach(cluster, src, dst, family)
    ]
    assert failures == []
    counters = cluster.underlay.counters()
    assert counters.vxlan > 0
    assert counters.pod == 0 and counters.other == 0
    # The receiving pod sees the sending pod's own address: no NAT between pools.
    assert cluster.pods["a1"].ipv4 in cluster.pods["b1"].peers("tcp", TCP_PORT)


def test_policy_still_decides_between_nodes(topology: Topology) -> None:
    cluster = OverlayCluster(topology)
    cluster.start_all()
    deny = pb.ActivePolicyUpdate(
        id=scenario.pid("deny-a1"),
        policy=pb.Policy(
            inbound_rules=[
                pb.Rule(action="deny", src_net=[f"{cluster.pods['a1'].ipv4}/32"]),
                pb.Rule(action="allow"),
            ],
        ),
    )
    tier = pb.TierInfo(name="default", ingress_policies=[scenario.pid("deny-a1")])
    b1 = cluster.pods["b1"]
    felix = cluster.drivers["node-b"]
    felix.send(deny, cluster.endpoint(b1, [tier]))
    a1, a2 = cluster.pods["a1"], cluster.pods["a2"]
    eventually(lambda: not a1.can_connect("tcp", b1.ipv4, TCP_PORT, timeout=0.7), what="deny")
    assert a2.can_connect("tcp", b1.ipv4, TCP_PORT, timeout=3.0)
    assert a1.can_connect("tcp", cluster.pods["b2"].ipv4, TCP_PORT, timeout=3.0)


def test_pods_cannot_send_vxlan_and_strangers_cannot_inject_it(topology: Topology) -> None:
    cluster = OverlayCluster(topology)
    cluster.start_all()
    a, b = cluster.nodes["node-a"], cluster.nodes["node-b"]
    # (The kernel's own VXLAN socket listens on the port; what matters is
    # which rule judged the packet.)
    cluster.pods["a1"].connect("udp", b.address(4), 4789, timeout=0.3)
    assert rule_packets(a, "VXLAN encapsulated packets from workloads") >= 1
    cluster.underlay.client.connect("udp", b.address(4), 4789, timeout=0.3)
    assert rule_packets(b, "VXLAN from anywhere else") >= 1
    # While the other node's VXLAN is accepted.
    assert _reach(cluster, "a1", "b1", 4) == []
    assert rule_packets(b, "VXLAN from other nodes") >= 1


def test_cross_subnet_on_one_subnet_goes_unencapsulated(topology: Topology) -> None:
    cluster = OverlayCluster(topology, "CrossSubnet", one_subnet=True)
    cluster.start_all()
    a = cluster.nodes["node-a"]
    b_address = cluster.specs["node-b"].address(4)
    routes = _kernel(a, "ip", "route", "show", "proto", "80")
    assert f"10.65.2.0/26 via {b_address} dev eth0" in routes
    before = _tx_packets(a, "vxlan.calico")
    failures = [
        f
        for family in (4, 6)
        for src, dst in _cross_pairs()[:4]
        for f in _reach(cluster, src, dst, family)
    ]
    assert failures == []
    assert _tx_packets(a, "vxlan.calico") == before


def test_a_removed_node_leaves_nothing_behind(topology: Topology) -> None:
    cluster = OverlayCluster(topology)
    cluster.start_all()
    a = cluster.nodes["node-a"]
    b = cluster.specs["node-b"]
    removals: list[Message] = [pb.VXLANTunnelEndpointRemove(node="node-b")]
    removals += [pb.RouteRemove(dst=d) for d in (*b.blocks(4), *b.blocks(6))]
    removals += [pb.RouteRemove(dst=f"{b.tunnel(4)}/32"), pb.RouteRemove(dst=f"{b.tunnel(6)}/128")]
    removals += [pb.HostMetadataRemove(hostname="node-b")]
    cluster.drivers["node-a"].send(*removals)

    def gone() -> bool:
        state = (
            _kernel(a, "ip", "route", "show", "proto", "80")
            + _kernel(a, "ip", "-6", "route", "show", "proto", "80")
            + _kernel(a, "ip", "neigh", "show", "nud", "permanent")
            + _kernel(a, "ip", "-6", "neigh", "show", "nud", "permanent")
            + _kernel(a, "bridge", "fdb", "show")
        )
        return "10.65.2." not in state and "fd00:10:65:2:" not in state and ":02:04" not in state

    eventually(gone, what="node-b's routes, neighbours and FDB entries gone from node-a")
    assert not cluster.pods["a1"].can_connect("tcp", cluster.pods["b1"].ipv4, TCP_PORT, 0.7)


def test_tampering_is_repaired_within_a_refresh_interval(topology: Topology) -> None:
    cluster = OverlayCluster(topology)
    cluster.start_all(RouteRefreshInterval="2")
    a = cluster.nodes["node-a"]
    a.ip("link", "set", "vxlan.calico", "mtu", "1300")
    a.ip("link", "set", "vxlan-v6.calico", "down")
    a.run(
        "bridge", "fdb", "del", "66:00:00:00:02:04", "dev", "vxlan.calico", "dst", "192.168.102.2"
    )
    a.ip("neigh", "del", "10.65.2.0", "dev", "vxlan.calico")
    a.ip("route", "del", "10.65.2.0/26")
    eventually(
        lambda: (
            not cluster.pods["a1"].can_connect("tcp", cluster.pods["b1"].ipv4, TCP_PORT, 0.5)
            or True
        )
    )

    def repaired() -> bool:
        return not _reach(cluster, "a1", "b1", 4) and not _reach(cluster, "a1", "b1", 6)

    eventually(repaired, deadline=20.0, what="the overlay repaired")
    assert "mtu 1450" in _kernel(a, "ip", "link", "show", "vxlan.calico")
    # A deleted device is back at once (the driver follows link events).
    a.ip("link", "del", "vxlan.calico")
    eventually(lambda: not _reach(cluster, "a1", "b1", 4), deadline=20.0, what="device back")
    # A device whose VNI changed cannot be fixed in place: it is made again.
    # (Swapped while the driver is down, or it would win the race.)
    cluster.drivers["node-a"].kill()
    a.ip("link", "del", "vxlan.calico")
    a.ip_batch(f"link add vxlan.calico type vxlan id 77 local {a.address(4)} dstport 4789 dev eth0")
    cluster.start("node-a", RouteRefreshInterval="2")
    assert "vxlan id 4096" in _kernel(a, "ip", "-d", "link", "show", "vxlan.calico")
    eventually(lambda: not _reach(cluster, "a1", "b1", 4), deadline=20.0, what="v4 again")


def test_restart_keeps_established_cross_node_connections(topology: Topology) -> None:
    cluster = OverlayCluster(topology)
    cluster.start_all()
    a1, b1 = cluster.pods["a1"], cluster.pods["b1"]
    held = a1.hold("tcp", b1.ipv4, TCP_PORT)
    held6 = a1.hold("tcp", b1.address(6), TCP_PORT)
    try:
        for felix in cluster.drivers.values():
            felix.kill()
        assert held.check() and held6.check()
        cluster.start_all()
        assert held.check() and held6.check()
        assert _reach(cluster, "a2", "b2", 4) == []
    finally:
        held.close()
        held6.close()


def test_a_route_the_kernel_refuses_leaves_the_rest_of_the_apply_landing(
    topology: Topology,
) -> None:
    cluster = OverlayCluster(topology)
    cluster.start_all()
    a = cluster.nodes["node-a"]
    felix = cluster.drivers["node-a"]
    felix.drain()
    vxlan, remote = pb.VXLAN, pb.REMOTE_WORKLOAD
    felix.send(
        pb.VXLANTunnelEndpointUpdate(
            node="node-c",
            mac="66:00:00:00:03:04",
            ipv4_addr="10.65.3.0",
            parent_device_ip="192.168.103.2",
        ),
        # Said to share our subnet, but its address is nowhere we can reach:
        # the kernel refuses the direct route (ENETUNREACH).
        pb.RouteUpdate(
            types=remote,
            ip_pool_type=vxlan,
            dst="10.65.3.0/26",
            dst_node_name="node-c",
            dst_node_ip="10.200.0.9",
            same_subnet=True,
        ),
        pb.RouteUpdate(
            types=remote,
            ip_pool_type=vxlan,
            dst="10.65.3.64/26",
            dst_node_name="node-c",
            dst_node_ip="192.168.103.2",
        ),
    )

    def landed() -> bool:
        return "10.65.3.64/26 via 10.65.3.0 dev vxlan.calico onlink" in _kernel(
            a, "ip", "route", "show", "proto", "80"
        )

    eventually(landed, what="the other route of the same apply")
    assert "10.65.3.0/26" not in _kernel(a, "ip", "route", "show", "proto", "80")
    assert "66:00:00:00:03:04 dev vxlan.calico dst 192.168.103.2" in _kernel(
        a, "bridge", "fdb", "show"
    )
    eventually(lambda: "route to 10.65.3.0/26 refused" in felix.stderr_so_far())
    assert felix.stderr_so_far().count("route to 10.65.3.0/26 refused") == 1
    # Everything programmed before is untouched.
    assert _reach(cluster, "a1", "b1", 4) == []
