"""Egress DSCP marking (``qos_policies``): the TOS byte as the receiver reads it."""

from __future__ import annotations

import time

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Namespace, Topology
from tests.kernel import scenario
from tests.kernel.cluster import Cluster
from tests.kernel.marks import requires_root
from tests.kernel.qos import tos

pytestmark = [requires_root, pytest.mark.slow]

_PORT = 7002


def _tos(src: Namespace, dst: Namespace) -> int | None:
    """The TOS byte ``dst`` reads on a datagram ``src`` sends it."""
    return tos(src, dst, _PORT)


def _dscp(update: pb.WorkloadEndpointUpdate | pb.HostEndpointUpdate, *values: int) -> None:
    del update.endpoint.qos_policies[:]
    for value in values:
        update.endpoint.qos_policies.add(dscp=value)


def _until(cluster: Cluster, src: Namespace, dst: Namespace, tos: int) -> None:
    end = time.monotonic() + 20
    while (seen := _tos(src, dst)) != tos:
        assert time.monotonic() < end, f"TOS {seen}, want {tos}"


def test_egress_leaving_the_cluster_carries_the_endpoints_dscp(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver(policies=False)
    web, prom = cluster.pods["web-1"], cluster.pods["prom-1"]
    external, node = cluster.node.external, cluster.node
    update = scenario.endpoint(scenario.pod("web-1"), web.iface, policies=False)
    host = pb.HostEndpointUpdate(
        id=pb.HostEndpointID(endpoint_id="node-eth0"),
        endpoint=pb.HostEndpoint(
            name="eth0", profile_ids=["kns.frontend"], expected_ipv4_addrs=[node.address(4)]
        ),
    )
    try:
        assert _tos(web, external) == 0
        _dscp(update, 10)  # AF11: TOS 0x28
        felix.send(update)
        _until(cluster, web, external, 10 << 2)
        # Inside the cluster (to another pod, to the node) it is left alone.
        assert _tos(web, prom) == 0
        # A host endpoint marks what the host sends out.
        assert _tos(node, external) == 0
        _dscp(host, 46)  # EF
        felix.send(host)
        _until(cluster, node, external, 46 << 2)
        # Changed, then gone.
        _dscp(update, 18)
        felix.send(update)
        _until(cluster, web, external, 18 << 2)
        _dscp(update)
        _dscp(host)
        felix.send(update, host)
        _until(cluster, web, external, 0)
        _until(cluster, node, external, 0)
    finally:
        felix.close_input()
        felix.wait()
