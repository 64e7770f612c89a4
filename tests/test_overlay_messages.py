"""The two-node VXLAN cluster's Felix messages: shaped as Felix's calculation graph
shapes them, and taken whole by the driver's managers (sim platform, no kernel).

The expected values are written out from ``felix/calc/l3_route_resolver.go``
and ``vxlan_resolver.go`` rather than computed, so a slip in the builder
shows up as a difference here.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from dataplane.core.loop import Dataplane
from dataplane.model import IPPool
from dataplane.model.hosts import Encapsulation, Host
from dataplane.model.routes import PoolType, Route, RouteType, Tunnel, Vtep, VtepAddress
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import run_trio
from tests.kernel.overlay_messages import (
    OverlayNode,
    VxlanMode,
    cluster_messages,
    overlay_messages,
    overlay_node,
)
from tests.kernel.scenario import FELIX_DEFAULTS

A = overlay_node("node-a", 1, "192.168.101.2/24", "fd00:101::2/64")
B = overlay_node("node-b", 2, "192.168.102.2/24", "fd00:102::2/64")
C = overlay_node("node-c", 3, "192.168.101.3/24", "fd00:101::3/64")  # A's subnet
VXLAN = Tunnel(vxlan=True)
_LABELS_A = (("kubernetes.io/hostname", "node-a"),)
_LABELS_B = (("kubernetes.io/hostname", "node-b"),)


def _feed(msgs: list[Message]) -> tuple[SimPlatform, Dataplane]:
    platform = SimPlatform()
    dp = Dataplane(platform)

    async def main() -> None:
        for msg in msgs:
            dp.send_message(msg)
        dp.close_input()
        await dp.run()

    run_trio(main)
    return platform, dp


def _routes(nodes: list[OverlayNode], local: str, mode: VxlanMode = "Always") -> dict[str, Route]:
    platform, dp = _feed(overlay_messages(nodes, local, mode))
    assert dp.stats.rejected == 0
    return platform.programmed.routes


def test_the_driver_takes_every_message_and_programs_the_cluster() -> None:
    platform, dp = _feed(overlay_messages([A, B], "node-a", local_pods=["10.65.1.10"]))
    assert dp.stats.rejected == 0
    assert dp.config.felix_hostname == "node-a"
    assert dp.config.vxlan_vni == 4096
    programmed = platform.programmed
    assert programmed.vteps == {
        "node-a": Vtep(
            "node-a",
            VtepAddress("66:00:00:00:01:04", "10.65.1.0", "192.168.101.2"),
            VtepAddress("66:00:00:00:01:06", "fd00:10:65:1::", "fd00:101::2"),
        ),
        "node-b": Vtep(
            "node-b",
            VtepAddress("66:00:00:00:02:04", "10.65.2.0", "192.168.102.2"),
            VtepAddress("66:00:00:00:02:06", "fd00:10:65:2::", "fd00:102::2"),
        ),
    }
    assert programmed.hosts == {
        "node-a": Host("node-a", "192.168.101.2", "fd00:101::2", 24, 64, "", _LABELS_A),
        "node-b": Host("node-b", "192.168.102.2", "fd00:102::2", 24, 64, "", _LABELS_B),
    }
    assert programmed.ip_pools == {
        "10.65.0.0-16": IPPool("10.65.0.0/16", masquerade=True),
        "fd00:10:65::-48": IPPool("fd00:10:65::/48", masquerade=False),
    }
    assert programmed.encapsulation == Encapsulation(vxlan=True, vxlan_v6=True)
    assert set(programmed.routes) == {
        "10.65.0.0/16",
        "fd00:10:65::/48",
        "10.65.1.0/26",
        "10.65.2.0/26",
        "fd00:10:65:1::/122",
        "fd00:10:65:2::/122",
        "10.65.1.0/32",
        "10.65.2.0/32",
        "fd00:10:65:1::/128",
        "fd00:10:65:2::/128",
        "192.168.101.2/32",
        "192.168.102.2/32",
        "fd00:101::2/128",
        "fd00:102::2/128",
        "10.65.1.10/32",
    }


def test_routes_are_typed_as_felix_types_them() -> None:
    routes = _routes([A, B], "node-a")
    assert routes["10.65.0.0/16"] == Route(
        "10.65.0.0/16", RouteType.CIDR_INFO, PoolType.VXLAN, nat_outgoing=True
    )
    assert routes["fd00:10:65::/48"] == Route(
        "fd00:10:65::/48", RouteType.CIDR_INFO, PoolType.VXLAN, nat_outgoing=False
    )
    assert routes["10.65.2.0/26"] == Route(
        "10.65.2.0/26",
        RouteType.REMOTE_WORKLOAD,
        PoolType.VXLAN,
        "node-b",
        "192.168.102.2",
        nat_outgoing=True,
    )
    assert routes["fd00:10:65:2::/122"] == Route(
        "fd00:10:65:2::/122", RouteType.REMOTE_WORKLOAD, PoolType.VXLAN, "node-b", "fd00:102::2"
    )
    assert routes["10.65.1.0/26"].types == RouteType.LOCAL_WORKLOAD
    # A tunnel address inside a /26 block is a tunnel, not also a workload.
    assert routes["10.65.2.0/32"] == Route(
        "10.65.2.0/32",
        RouteType.REMOTE_TUNNEL,
        PoolType.VXLAN,
        "node-b",
        "192.168.102.2",
        nat_outgoing=True,
        tunnel=VXLAN,
    )
    assert routes["10.65.1.0/32"].types == RouteType.LOCAL_TUNNEL
    assert routes["fd00:10:65:1::/128"].tunnel == VXLAN
    # Host addresses are in no pool.
    assert routes["192.168.102.2/32"] == Route(
        "192.168.102.2/32", RouteType.REMOTE_HOST, PoolType.NONE, "node-b", "192.168.102.2"
    )
    assert routes["fd00:101::2/128"] == Route(
        "fd00:101::2/128", RouteType.LOCAL_HOST, PoolType.NONE, "node-a", "fd00:101::2"
    )
    assert not any(r.same_subnet for r in routes.values())  # "Always": never


def test_a_local_pod_gets_its_own_route_and_remote_pods_only_their_block() -> None:
    msgs = cluster_messages([A, B], "node-a", local_pods=["10.65.1.10", "fd00:10:65:1::a"])
    dsts = {m.dst: m for m in msgs if isinstance(m, pb.RouteUpdate)}
    for dst in ("10.65.1.10/32", "fd00:10:65:1::a/128"):
        assert dsts[dst].types == pb.LOCAL_WORKLOAD
        assert dsts[dst].local_workload
        assert dsts[dst].dst_node_name == "node-a"
    assert "10.65.2.10/32" not in dsts


def test_cross_subnet_marks_routes_to_nodes_in_the_local_nodes_subnet() -> None:
    routes = _routes([A, B, C], "node-a", "CrossSubnet")
    same = {dst for dst, r in routes.items() if r.same_subnet}
    # C shares A's subnet; so does A itself (nodeInOurSubnet holds for self);
    # B is behind the router; pools and hosts never are.
    assert same == {
        *("10.65.3.0/26", "fd00:10:65:3::/122", "10.65.3.0/32", "fd00:10:65:3::/128"),
        *("10.65.1.0/26", "fd00:10:65:1::/122", "10.65.1.0/32", "fd00:10:65:1::/128"),
    }
    # Seen from B, only B's own routes are same-subnet.
    routes_b = _routes([A, B, C], "node-b", "CrossSubnet")
    assert {r.dst_node_name for r in routes_b.values() if r.same_subnet} == {"node-b"}


def test_config_is_the_scenarios_defaults_plus_the_overlays_keys() -> None:
    config = overlay_messages([A, B], "node-b", VXLANVNI="4097")[0]
    assert isinstance(config, pb.ConfigUpdate)
    assert dict(config.config) == {
        **FELIX_DEFAULTS,
        "FelixHostname": "node-b",
        "VXLANVNI": "4097",
        "VXLANPort": "4789",
    }


def test_messages_come_in_felixs_flush_order() -> None:
    kinds = [type(m).__name__ for m in cluster_messages([A, B], "node-b")]
    firsts = [k for i, k in enumerate(kinds) if k not in kinds[:i]]
    assert firsts == [
        "VXLANTunnelEndpointUpdate",
        "RouteUpdate",
        "HostMetadataUpdate",
        "IPAMPoolUpdate",
        "Encapsulation",
    ]
    pools = [
        m
        for m in cluster_messages([A], "node-a", "CrossSubnet")
        if isinstance(m, pb.IPAMPoolUpdate)
    ]
    assert {(p.pool.vxlan_mode, p.pool.ipip_mode) for p in pools} == {("cross-subnet", "")}


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="not among the nodes"):
        cluster_messages([A, B], "node-x")
    with pytest.raises(ValueError, match="unique"):
        cluster_messages([A, A], "node-a")
    with pytest.raises(ValueError, match=r"1\.\.255"):
        overlay_node("n", 0, "192.168.101.2/24", "fd00:101::2/64")
