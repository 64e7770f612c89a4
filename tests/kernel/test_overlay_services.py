"""Services whose backends live on the other node, over the VXLAN overlay: real packets.

Every node's driver is told of the same service and the same backends (b1
and b2, on node-b), as Felix and kube-proxy tell every node; only
``local`` differs, as it says "on this node". The pods of
:class:`OverlayCluster` answer with their names on TCP 80 and UDP 53, so a
reply says which backend served, and they record who connected.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Family, Topology
from tests.kernel.marks import requires_root
from tests.kernel.overlay_cluster import TCP_PORT, UDP_PORT, OverlayCluster
from tests.kernel.services import VIP4, VIP6, backend_set, served_by, service

pytestmark = [requires_root, pytest.mark.slow]

# The service's own ports differ from the pods' so that reaching a backend
# proves the port was translated too (found by name, as EndpointSlices do).
HTTP_PORT, DNS_PORT, NODE_PORT = 8080, 5353, 30080
BACKENDS = {"b1", "b2"}
# Enough fresh connections that missing one of two equally likely backends
# is vanishingly rare: 2 * (1/2)**30 < 2e-9.
DRAWS = 30


def _start(topology: Topology) -> OverlayCluster:
    """Both nodes, each told of the NodePort service backed by node-b's pods."""
    cluster = OverlayCluster(topology)
    web = service(
        type="NodePort",
        ports=[
            pb.ServicePort(Protocol="TCP", Port=HTTP_PORT, NodePort=NODE_PORT, name="http"),
            pb.ServicePort(Protocol="UDP", Port=DNS_PORT, name="dns"),
        ],
    )
    ports = [
        pb.ServiceBackendPort(name="http", protocol="TCP", port=TCP_PORT),
        pb.ServiceBackendPort(name="dns", protocol="UDP", port=UDP_PORT),
    ]
    for name, node in cluster.nodes.items():
        members = [((p.ipv4, p.address(6)), p.node is node) for p in cluster.pods_of("node-b")]
        extra: list[Message] = [web, backend_set("web", members, ports)]
        cluster.start(name, *extra)
    return cluster


def _peers(cluster: OverlayCluster) -> set[str]:
    """Every source address node-b's backends saw on TCP."""
    return {a for b in sorted(BACKENDS) for a in cluster.pods[b].peers("tcp", TCP_PORT)}


def test_a_pod_reaches_a_cluster_ip_served_on_the_other_node_through_vxlan(
    topology: Topology,
) -> None:
    cluster = _start(topology)
    a1 = cluster.pods["a1"]
    cluster.underlay.reset_counters()
    for vip in (VIP4, VIP6):
        assert set(served_by(a1, vip, HTTP_PORT, DRAWS)) == BACKENDS, vip
        # A fresh source port per datagram: each is a new flow, balanced anew.
        assert set(served_by(a1, vip, DNS_PORT, DRAWS, "udp")) == BACKENDS, vip
    counters = cluster.underlay.counters()
    # DNAT happened on node-a, before routing: what crossed the underlay was
    # VXLAN, never a pod or service address.
    assert counters.vxlan > 0
    assert counters.pod == 0 and counters.other == 0
    # Pod to pod across the pools: DNAT only, the backend sees the pod.
    assert _peers(cluster) == {a1.ipv4, a1.address(6)}


@pytest.mark.parametrize("family", [4, 6])
def test_a_node_port_serves_an_outside_client_from_the_other_nodes_pods_masqueraded(
    topology: Topology, family: Family
) -> None:
    cluster = _start(topology)
    client, node_a = cluster.underlay.client, cluster.nodes["node-a"]
    cluster.underlay.reset_counters()
    assert set(served_by(client, node_a.address(family), NODE_PORT, DRAWS)) == BACKENDS
    # externalTrafficPolicy Cluster: node-a masquerades, as kube-proxy does,
    # or node-b's pods would answer the client directly and the client would
    # drop replies from an address it never spoke to. MASQUERADE takes the
    # address of the interface the DNATed packet leaves by: the route to
    # node-b's block is through vxlan.calico (vxlan-v6.calico), so the
    # backends see node-a's tunnel address -- not its underlay address, and
    # not the client's.
    assert _peers(cluster) == {cluster.specs["node-a"].tunnel(family)}
    counters = cluster.underlay.counters()
    # The client's own packets cross the router as they are ("other"); from
    # node-a on, the connection went through the overlay only.
    assert counters.vxlan > 0 and counters.other > 0
    assert counters.pod == 0
