"""The overlay plan: Felix's VXLAN and route manager decisions, as values."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from dataplane.config import Config
from dataplane.linux.netlink.overlay_plan import (
    FdbEntry,
    Neighbour,
    plan_overlay,
    resolve_encapsulation,
)
from dataplane.linux.netlink.route_target import RouteKind, RouteTarget
from dataplane.model.hosts import Encapsulation
from dataplane.model.routes import PoolType, Route, RouteType, Vtep, VtepAddress

A = Vtep(
    "a",
    VtepAddress("66:00:00:00:00:0a", "10.65.0.1", "192.168.101.2"),
    VtepAddress("66:00:00:00:01:0a", "fd00:10:65::1", "fd00:101::2"),
)
B = Vtep(
    "b",
    VtepAddress("66:00:00:00:00:0b", "10.65.1.1", "192.168.102.2"),
    VtepAddress("66:00:00:00:01:0b", "fd00:10:65:1::1", "fd00:102::2"),
)
ON = resolve_encapsulation(Config(felix_hostname="a"), Encapsulation(vxlan=True, vxlan_v6=True))
RW, LW = RouteType.REMOTE_WORKLOAD, RouteType.LOCAL_WORKLOAD


def remote_block(dst: str = "10.65.1.0/26", **kw: object) -> Route:
    fields: dict[str, object] = {
        "types": RW,
        "pool_type": PoolType.VXLAN,
        "dst_node_name": "b",
        "dst_node_ip": "192.168.102.2",
    }
    fields.update(kw)
    return Route(dst, **fields)  # type: ignore[arg-type]


def test_remote_block_goes_via_the_remote_tunnel_address_onlink() -> None:
    plan = plan_overlay("a", ON, {"a": A, "b": B}, [remote_block()])
    assert plan.routes() == {
        "10.65.1.0/26": RouteTarget(RouteKind.ONLINK, "vxlan.calico", "10.65.1.1")
    }
    v4 = plan.families[4]
    assert v4.device is not None
    assert (v4.device.name, v4.device.mac, v4.device.local, v4.device.address) == (
        "vxlan.calico",
        "66:00:00:00:00:0a",
        "192.168.101.2",
        "10.65.0.1",
    )
    assert (v4.device.vni, v4.device.port, v4.device.mtu, v4.device.overhead) == (4096, 4789, 0, 50)
    assert v4.neighbours == {Neighbour("vxlan.calico", "10.65.1.1", "66:00:00:00:00:0b")}
    assert v4.fdb == {FdbEntry("vxlan.calico", "66:00:00:00:00:0b", "192.168.102.2")}
    assert v4.vxlan_sources == {"192.168.102.2"}


def test_ipv6_uses_its_own_device_mac_and_overhead() -> None:
    route = remote_block("fd00:10:65:1::/122", dst_node_ip="fd00:102::2")
    plan = plan_overlay("a", replace(ON, vxlan_mtu_v6=1400), {"a": A, "b": B}, [route])
    v6 = plan.families[6]
    assert v6.device is not None
    assert (v6.device.name, v6.device.mac, v6.device.mtu) == (
        "vxlan-v6.calico",
        "66:00:00:00:01:0a",
        1400,
    )
    assert plan.routes() == {
        "fd00:10:65:1::/122": RouteTarget(RouteKind.ONLINK, "vxlan-v6.calico", "fd00:10:65:1::1")
    }


def test_same_subnet_goes_straight_to_the_node_unencapsulated() -> None:
    plan = plan_overlay("a", ON, {"a": A, "b": B}, [remote_block(same_subnet=True)])
    assert plan.routes() == {
        "10.65.1.0/26": RouteTarget(RouteKind.GATEWAY, gateway="192.168.102.2")
    }


def test_remote_tunnel_address_goes_out_of_the_device() -> None:
    tunnel = remote_block("10.65.1.1/32", types=RW | RouteType.REMOTE_TUNNEL)
    plan = plan_overlay("a", ON, {"a": A, "b": B}, [tunnel])
    assert plan.routes() == {"10.65.1.1/32": RouteTarget.dev("vxlan.calico")}


def test_own_blocks_are_blackholed_but_not_own_workloads_or_other_pools() -> None:
    routes = [
        Route("10.65.0.0/26", LW, PoolType.VXLAN, "a"),
        Route("10.65.0.5/32", LW, PoolType.VXLAN, "a", local_workload=True),
        Route("10.66.0.0/26", LW, PoolType.NO_ENCAP, "a"),
        Route("10.65.0.0/16", RouteType.CIDR_INFO, PoolType.VXLAN),
    ]
    plan = plan_overlay("a", ON, {"a": A}, routes)
    assert plan.routes() == {"10.65.0.0/26": RouteTarget(RouteKind.BLACKHOLE)}


def test_a_route_whose_node_has_no_vtep_waits() -> None:
    plan = plan_overlay("a", ON, {"a": A}, [remote_block()])
    assert plan.routes() == {}
    assert plan.families[4].waiting == {"10.65.1.0/26"}


def test_vxlan_off_plans_nothing_and_config_overrides_the_pools() -> None:
    off = resolve_encapsulation(Config(felix_hostname="a"), Encapsulation())
    plan = plan_overlay("a", off, {"a": A, "b": B}, [remote_block()])
    assert all(f.device is None and not f.routes for f in plan.families.values())
    forced = resolve_encapsulation(Config(felix_hostname="a", vxlan_enabled=True), Encapsulation())
    assert plan_overlay("a", forced, {"a": A, "b": B}, [remote_block()]).routes()


def test_external_nodes_may_send_vxlan() -> None:
    config = replace(ON, external_nodes_cidrs=("172.16.0.0/12", "fd00:99::/64"))
    plan = plan_overlay("a", config, {"a": A, "b": B}, [])
    assert plan.families[4].vxlan_sources == {"192.168.102.2", "172.16.0.0/12"}
    assert plan.families[6].vxlan_sources == {"fd00:102::2", "fd00:99::/64"}


nodes = st.lists(st.integers(1, 250), unique=True, max_size=20)


@given(nodes, st.data())
def test_every_remote_vtep_has_one_neighbour_and_fdb_entry_and_no_local_one(
    numbers: list[int], data: st.DataObject
) -> None:
    vteps = {"a": A} | {
        f"n{i}": Vtep(
            f"n{i}",
            VtepAddress(f"66:00:00:00:00:{i:02x}", f"10.65.{i}.1", f"192.168.{i}.2"),
        )
        for i in numbers
    }
    routes = [
        remote_block(f"10.65.{i}.0/26", dst_node_name=f"n{i}", dst_node_ip=f"192.168.{i}.2")
        for i in numbers
        if data.draw(st.booleans())
    ]
    v4 = plan_overlay("a", ON, vteps, routes).families[4]
    assert {n.address for n in v4.neighbours} == {f"10.65.{i}.1" for i in numbers}
    assert {e.remote for e in v4.fdb} == {f"192.168.{i}.2" for i in numbers}
    assert v4.routes is not None
    assert all(t.gateway in {n.address for n in v4.neighbours} for t in v4.routes.values())
    assert len(v4.routes) == len(routes)
