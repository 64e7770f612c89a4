"""RoutesManager: routes and VTEPs in, validated model values out, only real changes."""

from __future__ import annotations

import logging

import pytest
import trio
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from dataplane.core.loop import Dataplane
from dataplane.errors import InputError
from dataplane.managers import RoutesManager
from dataplane.model.routes import (
    PoolType,
    Route,
    RoutePriority,
    RouteType,
    Tunnel,
    Vtep,
    VtepAddress,
)
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.conftest import run_trio


class ChangeSink:
    """Holds what it is handed and fails on anything that is not a real change."""

    def __init__(self) -> None:
        self.vteps: dict[str, Vtep] = {}
        self.routes: dict[str, Route] = {}
        self.calls = 0

    def set_vtep(self, vtep: Vtep) -> None:
        assert self.vteps.get(vtep.node) != vtep, f"unchanged VTEP handed over: {vtep}"
        self.vteps[vtep.node] = vtep
        self.calls += 1

    def remove_vtep(self, node: str) -> None:
        assert node in self.vteps, f"removal of a VTEP never handed over: {node}"
        del self.vteps[node]
        self.calls += 1

    def set_route(self, route: Route) -> None:
        assert self.routes.get(route.dst) != route, f"unchanged route handed over: {route}"
        self.routes[route.dst] = route
        self.calls += 1

    def remove_route(self, dst: str) -> None:
        assert dst in self.routes, f"removal of a route never handed over: {dst}"
        del self.routes[dst]
        self.calls += 1


def vtep_msg(node: str, n: int = 2, **fields: str) -> pb.VXLANTunnelEndpointUpdate:
    values = {
        "node": node,
        "mac": f"66:1A:2B:3C:4D:{n:02X}",
        "ipv4_addr": f"10.65.{n}.0",
        "parent_device_ip": f"192.0.2.{n}",
    }
    values.update(fields)
    return pb.VXLANTunnelEndpointUpdate(**values)


def remote_block(dst: str, node: str, **fields: object) -> pb.RouteUpdate:
    return pb.RouteUpdate(
        types=pb.REMOTE_WORKLOAD,
        ip_pool_type=pb.VXLAN,
        dst=dst,
        dst_node_name=node,
        **fields,  # type: ignore[arg-type]
    )


def test_every_route_field_converts() -> None:
    sink = ChangeSink()
    mgr = RoutesManager(sink)
    mgr.on_update(
        pb.RouteUpdate(
            types=pb.REMOTE_WORKLOAD | pb.REMOTE_TUNNEL,  # type: ignore[arg-type]
            ip_pool_type=pb.VXLAN,
            dst="10.65.2.7/26",  # host bits cleared, as the kernel would
            dst_node_name="node-2",
            dst_node_ip="192.0.2.2",
            same_subnet=True,
            nat_outgoing=True,
            borrowed=True,
            tunnel_type=pb.TunnelType(vxlan=True),
            priority=pb.ELEVATED,
        )
    )
    mgr.on_update(pb.RouteUpdate(dst="fd00:10:65:0:0::/48"))
    mgr.complete_deferred_work()
    assert sink.routes == {
        "10.65.2.0/26": Route(
            dst="10.65.2.0/26",
            types=RouteType.REMOTE_WORKLOAD | RouteType.REMOTE_TUNNEL,
            pool_type=PoolType.VXLAN,
            dst_node_name="node-2",
            dst_node_ip="192.0.2.2",
            same_subnet=True,
            nat_outgoing=True,
            borrowed=True,
            tunnel=Tunnel(vxlan=True),
            priority=RoutePriority.ELEVATED,
        ),
        "fd00:10:65::/48": Route("fd00:10:65::/48"),
    }
    assert sink.routes["fd00:10:65::/48"].types is RouteType.CIDR_INFO
    # A remove names the destination as Felix spelled it; it is canonicalised the same way.
    mgr.on_update(pb.RouteRemove(dst="10.65.2.7/26"))
    mgr.complete_deferred_work()
    assert set(sink.routes) == {"fd00:10:65::/48"}


def test_vteps_convert_per_family_with_canonical_macs() -> None:
    sink = ChangeSink()
    mgr = RoutesManager(sink)
    mgr.on_update(vtep_msg("node-2"))
    mgr.on_update(
        pb.VXLANTunnelEndpointUpdate(
            node="node-3",
            mac_v6="66-1a-2b-3c-4d-03",
            ipv6_addr="fd00:10:65:3::0",
            parent_device_ipv6="2001:db8::3",
        )
    )
    mgr.complete_deferred_work()
    assert sink.vteps == {
        "node-2": Vtep("node-2", v4=VtepAddress("66:1a:2b:3c:4d:02", "10.65.2.0", "192.0.2.2")),
        "node-3": Vtep(
            "node-3", v6=VtepAddress("66:1a:2b:3c:4d:03", "fd00:10:65:3::", "2001:db8::3")
        ),
    }
    mgr.on_update(pb.VXLANTunnelEndpointRemove(node="node-2"))
    mgr.complete_deferred_work()
    assert set(sink.vteps) == {"node-3"}


@pytest.mark.parametrize(
    ("msg", "field", "value"),
    [
        (remote_block("10.65.2.300/26", "n"), "dst", "10.65.2.300/26"),
        (remote_block("10.65.2.0/33", "n"), "dst", "10.65.2.0/33"),
        (remote_block("", "n"), "dst", ""),
        (remote_block("10.65.2.0/26", "n", dst_node_ip="node-2"), "dst_node_ip", "node-2"),
        (pb.RouteUpdate(dst="10.0.0.0/8", types=64), "types", 64),  # type: ignore[arg-type]
        (pb.RouteUpdate(dst="10.0.0.0/8", ip_pool_type=9), "ip_pool_type", 9),  # type: ignore[arg-type]
        (pb.RouteUpdate(dst="10.0.0.0/8", priority=5), "priority", 5),  # type: ignore[arg-type]
        (pb.RouteRemove(dst="ten/8"), "dst", "ten/8"),
        (vtep_msg(""), "node", ""),
        (vtep_msg("n", mac="66:1a:2b:3c:4d"), "mac", "66:1a:2b:3c:4d"),
        (vtep_msg("n", mac="66:1a-2b:3c:4d:5e"), "mac", "66:1a-2b:3c:4d:5e"),
        (vtep_msg("n", mac="01:00:5e:00:00:01"), "mac", "01:00:5e:00:00:01"),
        (vtep_msg("n", ipv4_addr="fd00::1"), "ipv4_addr", "fd00::1"),
        (vtep_msg("n", parent_device_ip="192.0.2.256"), "parent_device_ip", "192.0.2.256"),
        (vtep_msg("n", parent_device_ip=""), "parent_device_ip", ""),
        (vtep_msg("n", mac_v6="66:1a:2b:3c:4d:5e"), "ipv6_addr", ""),
        (pb.VXLANTunnelEndpointUpdate(node="n"), "mac", ""),
        (pb.VXLANTunnelEndpointRemove(node=""), "node", ""),
    ],
)
def test_bad_input_names_field_and_value_and_changes_nothing(
    msg: Message, field: str, value: object
) -> None:
    sink = ChangeSink()
    mgr = RoutesManager(sink)
    mgr.on_update(remote_block("10.65.2.0/26", "n"))
    mgr.on_update(vtep_msg("n"))
    mgr.complete_deferred_work()
    before = (dict(sink.vteps), dict(sink.routes), sink.calls)
    with pytest.raises(InputError) as info:
        mgr.on_update(msg)
    assert (info.value.field, info.value.value) == (field, value)
    mgr.complete_deferred_work()
    assert (sink.vteps, sink.routes, sink.calls) == before


def test_a_rejected_message_is_one_log_line_naming_seq_field_and_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    platform = SimPlatform()
    dp = Dataplane(platform)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            dp.send_message(remote_block("10.65.2.0/26", "node-2"))
            dp.send_message(pb.InSync())
            dp.send_message(remote_block("10.65.2.0/26", "node-2", dst_node_ip="10.0.0.999"))
            dp.close_input()

    with caplog.at_level(logging.ERROR, logger="dataplane"):
        run_trio(main)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert line == ("seq=3 RouteUpdate rejected: field dst_node_ip='10.0.0.999': not an IP address")
    assert platform.programmed.routes["10.65.2.0/26"].dst_node_ip == ""


def test_only_real_changes_reach_the_platform() -> None:
    sink = ChangeSink()
    mgr = RoutesManager(sink)
    for _ in range(2):  # Felix resends unchanged routes: the second time is nothing
        mgr.on_update(remote_block("10.65.2.0/26", "node-2"))
        mgr.on_update(vtep_msg("node-2"))
        mgr.complete_deferred_work()
    assert sink.calls == 2
    # Removing what was never handed over, or adding and removing within one
    # batch, hands over nothing.
    mgr.on_update(pb.RouteRemove(dst="10.99.0.0/26"))
    mgr.on_update(remote_block("10.65.3.0/26", "node-3"))
    mgr.on_update(pb.RouteRemove(dst="10.65.3.0/26"))
    mgr.on_update(pb.VXLANTunnelEndpointRemove(node="node-9"))
    mgr.complete_deferred_work()
    assert sink.calls == 2


def test_vteps_are_handed_over_before_the_routes_through_them() -> None:
    order: list[str] = []

    class Ordered(ChangeSink):
        def set_vtep(self, vtep: Vtep) -> None:
            order.append(f"vtep {vtep.node}")

        def set_route(self, route: Route) -> None:
            order.append(f"route {route.dst}")

    mgr = RoutesManager(Ordered())
    mgr.on_update(remote_block("10.65.2.0/26", "node-2"))
    mgr.on_update(vtep_msg("node-2"))
    mgr.complete_deferred_work()
    assert order == ["vtep node-2", "route 10.65.2.0/26"]


_dsts = st.sampled_from(["10.65.1.0/26", "10.65.2.0/26", "10.65.2.5/26", "fd00::/122"])
_nodes = st.sampled_from(["a", "b", "c"])
_ops = st.one_of(
    st.builds(
        lambda dst, node, nat: remote_block(dst, node, nat_outgoing=nat),
        _dsts,
        _nodes,
        st.booleans(),
    ),
    st.builds(lambda dst: pb.RouteRemove(dst=dst), _dsts),
    st.builds(vtep_msg, _nodes, st.integers(2, 3)),
    st.builds(lambda node: pb.VXLANTunnelEndpointRemove(node=node), _nodes),
    st.just("apply"),
)


@given(st.lists(_ops, max_size=30))
def test_the_platform_always_holds_the_last_word_on_every_key(ops: list[object]) -> None:
    """Any interleaving of updates, removes and applies: after each apply the
    sink holds exactly the latest value per key, and was only handed changes."""
    sink = ChangeSink()
    mgr = RoutesManager(sink)
    routes: dict[str, tuple[str, bool]] = {}
    vteps: dict[str, str] = {}
    for op in [*ops, "apply"]:
        if op == "apply":
            mgr.complete_deferred_work()
            assert {d: (r.dst_node_name, r.nat_outgoing) for d, r in sink.routes.items()} == routes
            assert {n: v.v4.parent_address for n, v in sink.vteps.items() if v.v4} == vteps
            continue
        assert isinstance(op, Message)
        mgr.on_update(op)
        if isinstance(op, pb.RouteUpdate):
            key = "10.65.2.0/26" if op.dst == "10.65.2.5/26" else op.dst
            routes[key] = (op.dst_node_name, op.nat_outgoing)
        elif isinstance(op, pb.RouteRemove):
            routes.pop("10.65.2.0/26" if op.dst == "10.65.2.5/26" else op.dst, None)
        elif isinstance(op, pb.VXLANTunnelEndpointUpdate):
            vteps[op.node] = op.parent_device_ip
        elif isinstance(op, pb.VXLANTunnelEndpointRemove):
            vteps.pop(op.node, None)
