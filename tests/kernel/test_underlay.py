"""Self-test of the underlay, with real packets on this kernel.

For overlay tests built on it to mean anything, three things must hold: the
underlay routes node addresses between subnets and bridges them within one;
it does NOT route pod addresses, so pods on different nodes only talk through
an overlay; and its counters tell VXLAN from leaked pod traffic. The overlay
here is made by hand with ``ip`` and ``bridge`` commands, as Calico's route
and VXLAN managers would make it, so the bed is proven without the driver.
"""

from __future__ import annotations

import pytest

from testbed.topology import Family, Node, Pod, Topology, TopologyError, list_netns
from testbed.underlay import Subnet, Underlay, UnderlayCounters
from tests.kernel.marks import requires_root
from tests.kernel.overlay_messages import OverlayNode, overlay_node

pytestmark = [requires_root, pytest.mark.slow, pytest.mark.own_backend]

PORT = 8080
VXLAN_DEVICE = {4: "vxlan.calico", 6: "vxlan-v6.calico"}


def _two_subnets(topo: Topology) -> tuple[Underlay, Node, Node]:
    underlay = Underlay(topo)
    a = underlay.add_node("node-a", underlay.add_subnet(101))
    b = underlay.add_node("node-b", underlay.add_subnet(102))
    return underlay, a, b


def _overlay_node(underlay: Underlay, node: Node, number: int) -> OverlayNode:
    return overlay_node(node.name, number, underlay.cidr(node, 4), underlay.cidr(node, 6))


def _pod(node: Node, spec: OverlayNode, name: str) -> Pod:
    """A pod at address 10 of the node's block, routed by the node (the driver's job)."""
    pod = node.add_pod(name, spec.pod_address(4, 10), spec.pod_address(6, 10))
    node.wire_pod_manually(pod)
    pod.listen("tcp", PORT)
    return pod


def _vxlan(node: Node, me: OverlayNode, peers: list[OverlayNode], family: Family) -> None:
    """What Calico's VXLAN manager programs: a device, and per peer a neighbour,
    an FDB entry (its MAC is behind its node's address) and a route to its block."""
    dev, length = VXLAN_DEVICE[family], 32 if family == 4 else 128
    node.ip_batch(
        f"link add {dev} address {me.mac(family)} type vxlan id 4096 dstport 4789"
        f" local {me.address(family)} dev eth0 nolearning",
        f"addr add {me.tunnel(family)}/{length} dev {dev}" + (" nodad" if family == 6 else ""),
        f"link set {dev} up",
        *(
            f"neigh add {peer.tunnel(family)} lladdr {peer.mac(family)} dev {dev} nud permanent"
            for peer in peers
        ),
        *(
            f"route add {block} via {peer.tunnel(family)} dev {dev} onlink"
            for peer in peers
            for block in peer.blocks(family)
        ),
    )
    for peer in peers:
        node.run(
            "bridge", "fdb", "append", peer.mac(family), "dev", dev, "dst", peer.address(family)
        )


def test_subnets_give_nodes_addresses_and_routes_via_the_router(topology: Topology) -> None:
    underlay, a, b = _two_subnets(topology)
    assert (a.address(4), a.address(6)) == ("192.168.101.2", "fd00:101::2")
    assert (b.address(4), b.address(6)) == ("192.168.102.2", "fd00:102::2")
    assert underlay.cidr(a, 4) == "192.168.101.2/24"
    assert underlay.cidr(b, 6) == "fd00:102::2/64"
    assert underlay.subnet_of(b) == Subnet(102)
    assert "default via 192.168.101.1 dev eth0" in a.ip("route").stdout
    assert "default via fd00:101::1 dev eth0" in a.ip("-6", "route").stdout
    assert a.sysctl("net.ipv4.ip_forward") == "1"
    # The router knows its subnets and nothing else: no default, no pods.
    routes = underlay.router.ip("route").stdout + underlay.router.ip("-6", "route").stdout
    assert "default" not in routes
    assert "10.65." not in routes and "fd00:10:65" not in routes
    with pytest.raises(TopologyError, match="already exists"):
        underlay.add_subnet(101)


@pytest.mark.parametrize("family", [4, 6])
def test_nodes_on_two_subnets_reach_each_other_through_the_router(
    topology: Topology, family: Family
) -> None:
    underlay, a, b = _two_subnets(topology)
    a.listen("tcp", PORT)
    underlay.reset_counters()
    assert b.ping(a.address(family))
    assert b.connect("tcp", a.address(family), PORT).reply == "node-a"
    assert a.peers("tcp", PORT) == [b.address(family)]  # routed, not NATed
    seen = underlay.counters(family)
    assert seen.other > 0
    assert (seen.vxlan, seen.pod) == (0, 0)
    assert underlay.counters(4 if family == 6 else 6) == UnderlayCounters()


def test_same_subnet_nodes_are_bridged_and_not_counted(topology: Topology) -> None:
    underlay = Underlay(topology)
    subnet = underlay.add_subnet(101)
    a, c = underlay.add_node("node-a", subnet), underlay.add_node("node-c", subnet)
    assert c.address(4) == "192.168.101.3"
    underlay.reset_counters()
    for family in (4, 6):
        assert a.ping(c.address(family))
    # The same pings to a node behind the router are counted: the zero
    # above is the bridge's doing, not a counter that cannot count.
    assert underlay.counters() == UnderlayCounters()
    b = underlay.add_node("node-b", underlay.add_subnet(102))
    assert a.ping(b.address(4))
    assert underlay.counters().other > 0


def test_the_client_is_every_nodes_external_and_reaches_nodes_not_pods(
    topology: Topology,
) -> None:
    underlay, a, b = _two_subnets(topology)
    client = underlay.client
    assert a.external is client and b.external is client
    assert topology.external is client
    assert client.address(4) == "192.168.100.2"
    assert underlay.subnet_of(client).index == 100
    pod = _pod(a, _overlay_node(underlay, a, 1), "pod-a")
    for family in (4, 6):
        assert client.ping(a.address(family))
        assert client.ping(b.address(family))
        assert not client.can_connect("tcp", pod.address(family), PORT, timeout=0.3)


@pytest.mark.parametrize("family", [4, 6])
def test_the_router_does_not_route_pod_cidrs(topology: Topology, family: Family) -> None:
    underlay, a, b = _two_subnets(topology)
    pod_a = _pod(a, _overlay_node(underlay, a, 1), "pod-a")
    pod_b = _pod(b, _overlay_node(underlay, b, 2), "pod-b")
    # Each node reaches its own pod: the pods themselves are fine.
    assert a.can_connect("tcp", pod_a.address(family), PORT)
    assert b.can_connect("tcp", pod_b.address(family), PORT)
    underlay.reset_counters()
    assert not pod_a.can_connect("tcp", pod_b.address(family), PORT, timeout=0.3)
    assert not pod_a.ping(pod_b.address(family), timeout=0.3)
    # ... and the counters saw the pod packets the router dropped.
    assert underlay.counters(family).pod > 0


@pytest.mark.parametrize("family", [4, 6])
def test_a_hand_made_vxlan_overlay_carries_pod_traffic_as_vxlan_only(
    topology: Topology, family: Family
) -> None:
    underlay, a, b = _two_subnets(topology)
    spec_a, spec_b = _overlay_node(underlay, a, 1), _overlay_node(underlay, b, 2)
    pod_a, pod_b = _pod(a, spec_a, "pod-a"), _pod(b, spec_b, "pod-b")
    _vxlan(a, spec_a, [spec_b], family)
    _vxlan(b, spec_b, [spec_a], family)
    underlay.reset_counters()
    reply = pod_a.connect("tcp", pod_b.address(family), PORT, timeout=3.0)
    assert reply.ok, reply
    assert reply.reply == "pod-b"
    assert pod_b.peers("tcp", PORT) == [pod_a.address(family)]  # the pod's own address
    assert pod_b.ping(pod_a.address(family))
    seen = underlay.counters(family)
    assert seen.vxlan > 0
    assert seen.pod == 0
    assert seen.other == 0


def test_namespaces_are_gone_after_the_topology_closes() -> None:
    with Topology() as topo:
        underlay, a, _ = _two_subnets(topo)
        _pod(a, _overlay_node(underlay, a, 1), "pod-a")
        names = {ns.netns for ns in topo.namespaces()}
        assert underlay.router.netns in names
        assert underlay.client.netns in names
        assert len(names) == 5  # router, client, two nodes, one pod
        assert set(topo.leftovers()) == names
    assert not names & set(list_netns())
