"""Host endpoints with real packets: all-interfaces endpoints and applyOnForward.

The node's uplink eth0 faces the external namespace; pods hang off cali*
veths (tests/kernel/scenario.py). web-1 admits any ingress through its
allow-all profile, so whatever drops external traffic to it here is host
endpoint policy; db-1 admits only api, and serves as a source.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Topology
from tests.felix_harness import FelixHarness
from tests.kernel import scenario
from tests.kernel.cluster import Cluster, Probe
from tests.kernel.marks import requires_root

pytestmark = [requires_root, pytest.mark.slow]

UDP = pb.Protocol(name="udp")


def _ports(*ports: int) -> list[pb.PortRange]:
    return [pb.PortRange(first=p, last=p) for p in ports]


def _policy(
    name: str, inbound: list[pb.Rule], outbound: list[pb.Rule] | None = None
) -> pb.ActivePolicyUpdate:
    return pb.ActivePolicyUpdate(
        id=pb.PolicyID(name=name),
        policy=pb.Policy(tier="default", inbound_rules=inbound, outbound_rules=outbound or []),
    )


def _tier(*policies: pb.ActivePolicyUpdate, egress: bool = False) -> list[pb.TierInfo]:
    ids = [p.id for p in policies]
    return [
        pb.TierInfo(
            name="default",
            ingress_policies=ids,
            egress_policies=ids if egress else [],
            default_action="Deny",
        )
    ]


def _hep(
    endpoint_id: str,
    name: str,
    node: str,
    tiers: list[pb.TierInfo] | None = None,
    forward_tiers: list[pb.TierInfo] | None = None,
) -> pb.HostEndpointUpdate:
    return pb.HostEndpointUpdate(
        id=pb.HostEndpointID(endpoint_id=endpoint_id),
        endpoint=pb.HostEndpoint(
            name=name,
            tiers=tiers or [],
            forward_tiers=forward_tiers or [],
            expected_ipv4_addrs=[node],
        ),
    )


def _converge(cluster: Cluster, probes: Iterable[Probe]) -> None:
    """Wait for the first probe's verdict, then check them all (in parallel)."""
    probes = list(probes)
    cluster.wait_for(probes[0])
    assert cluster.failures(probes) == []


def _stop(felix: FelixHarness) -> None:
    felix.close_input()
    code, err = felix.wait()
    assert code == 0, err


def test_an_all_interfaces_host_endpoint_polices_the_host_not_its_pods(
    topology: Topology,
) -> None:
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    for port in (22, 8000, 8001):
        node.listen("tcp", port)
    for port in (5000, 5001):
        node.listen("udp", port)
    external.listen("tcp", 8001)
    felix = cluster.start_driver()
    try:
        # Everything reaches the node before any host endpoint exists: the
        # denials below are the endpoint's doing.
        before = [Probe("external", "node", "tcp", 8001, f) for f in (4, 6)]
        before += [Probe("external", "node", "icmp", 0, f) for f in (4, 6)]
        assert cluster.failures(before) == []

        only_8000 = _policy(
            "host-8000",
            [
                pb.Rule(action="allow", protocol=scenario.TCP, dst_ports=_ports(8000)),
                pb.Rule(action="allow", protocol=UDP, dst_ports=_ports(5000)),
            ],
        )
        # Felix sends interfaceName "*" as it is.
        felix.send(only_8000, _hep("all-interfaces", "*", node.address(4), _tier(only_8000)))
        status = felix.recv_until("host_endpoint_status_update")[-1]
        assert status.host_endpoint_status_update.status.status == "up"
        probes = []
        for f in (4, 6):
            probes += [
                Probe("external", "node", "tcp", 8001, f, False),
                Probe("external", "node", "tcp", 8000, f, True),
                Probe("external", "node", "udp", 5000, f, True),
                Probe("external", "node", "udp", 5001, f, False),
                Probe("external", "node", "icmp", 0, f, False),
                Probe("external", "node", "tcp", 22, f, True),  # a default failsafe port
                # Pods are not the host: their traffic through the node, either
                # way, is judged by their own policy only.
                Probe("external", "web-1", "tcp", 8080, f, True),
                Probe("external", "web-1", "udp", 5353, f, True),
                Probe("external", "web-1", "icmp", 0, f, True),
                Probe("db-1", "external", "tcp", 8001, f, True),
            ]
        _converge(cluster, probes)

        # An endpoint of eth0's own shadows "*" there: its policy, not the
        # all-interfaces one, now decides what reaches the node over eth0.
        only_8001 = _policy(
            "host-8001", [pb.Rule(action="allow", protocol=scenario.TCP, dst_ports=_ports(8001))]
        )
        felix.send(only_8001, _hep("uplink", "eth0", node.address(4), _tier(only_8001)))
        probes = []
        for f in (4, 6):
            probes += [
                Probe("external", "node", "tcp", 8000, f, False),
                Probe("external", "node", "tcp", 8001, f, True),
                Probe("external", "node", "udp", 5000, f, False),
                Probe("external", "node", "tcp", 22, f, True),
                Probe("external", "web-1", "tcp", 8080, f, True),
            ]
        _converge(cluster, probes)

        # Without it, "*" is back in charge of eth0.
        felix.send(pb.HostEndpointRemove(id=pb.HostEndpointID(endpoint_id="uplink")))
        _converge(
            cluster,
            [
                Probe("external", "node", "tcp", 8001, 4, False),
                Probe("external", "node", "tcp", 8000, 4, True),
                Probe("external", "node", "tcp", 8000, 6, True),
            ],
        )
    finally:
        _stop(felix)


def test_apply_on_forward_policy_judges_traffic_routed_to_and_from_pods(
    topology: Topology,
) -> None:
    cluster = Cluster(topology)
    node, external = cluster.node, cluster.node.external
    for port in (8001, 8002):
        external.listen("tcp", port)
    felix = cluster.start_driver()
    try:
        open_before = []
        for f in (4, 6):
            open_before += [
                Probe("external", "web-1", "tcp", 8080, f),
                Probe("external", "web-1", "icmp", 0, f),
                Probe("db-1", "external", "tcp", 8002, f),
            ]
        assert cluster.failures(open_before) == []

        # Forwarded traffic through eth0: in, only TCP 80 and UDP 5353 to
        # pods; out, only TCP 8001.
        forward = _policy(
            "uplink-forward",
            [
                pb.Rule(action="allow", protocol=scenario.TCP, dst_ports=_ports(80)),
                pb.Rule(action="allow", protocol=UDP, dst_ports=_ports(5353)),
            ],
            [pb.Rule(action="allow", protocol=scenario.TCP, dst_ports=_ports(8001))],
        )
        # Normal policy for the node itself admits only ICMP: it must not
        # leak into forwarded traffic (see the end of the test).
        host = _policy(
            "uplink-host",
            [
                pb.Rule(action="allow", protocol=pb.Protocol(name="icmp")),
                pb.Rule(action="allow", protocol=pb.Protocol(name="icmpv6")),
            ],
            [pb.Rule(action="allow")],
        )
        with_forward = _hep(
            "uplink",
            "eth0",
            node.address(4),
            tiers=_tier(host, egress=True),
            forward_tiers=_tier(forward, egress=True),
        )
        felix.send(forward, host, with_forward)
        probes = []
        for f in (4, 6):
            probes += [
                Probe("external", "web-1", "tcp", 8080, f, False),
                Probe("external", "web-1", "tcp", 80, f, True),
                Probe("external", "web-1", "udp", 5353, f, True),
                Probe("external", "web-1", "udp", 53, f, False),
                Probe("external", "web-1", "icmp", 0, f, False),
                Probe("db-1", "external", "tcp", 8002, f, False),
                Probe("db-1", "external", "tcp", 8001, f, True),
                # The pod's own policy still applies: the endpoint's allow is
                # not the last word (api admits only web and monitoring).
                Probe("external", "api-1", "tcp", 80, f, False),
                # Pod to pod on the node never crosses eth0.
                Probe("db-1", "web-1", "tcp", 8080, f, True),
                # The node itself answers under the endpoint's normal policy.
                Probe("external", "node", "icmp", 0, f, True),
            ]
        _converge(cluster, probes)

        # The same endpoint without forward policy leaves forwarded traffic alone.
        felix.send(_hep("uplink", "eth0", node.address(4), tiers=_tier(host, egress=True)))
        probes = []
        for f in (4, 6):
            probes += [
                Probe("external", "web-1", "tcp", 8080, f, True),
                Probe("external", "web-1", "icmp", 0, f, True),
                Probe("external", "web-1", "udp", 53, f, True),
                Probe("db-1", "external", "tcp", 8002, f, True),
                Probe("external", "api-1", "tcp", 80, f, False),
            ]
        _converge(cluster, probes)
    finally:
        _stop(felix)
