"""The VXLAN overlay this node should have, computed from Felix's values.

Pure: from the VTEPs, routes and encapsulation the managers handed over,
and the configuration, :func:`plan_overlay` returns per IP family the
tunnel device, the permanent neighbour and FDB entries for every other
node's tunnel endpoint, and the routes, the way Felix's VXLAN and route
managers decide them:

- a remote node's block in a VXLAN pool goes via that node's tunnel
  address on the VXLAN device, onlink; when Felix says the node shares our
  subnet (``same_subnet``, CrossSubnet pools only) it goes straight to the
  node's own address instead, unencapsulated;
- a remote node's tunnel address (or an address it borrowed from another
  node's block) goes straight out of the device;
- this node's own blocks are blackholed: a block address with no pod yet
  must not leak to the default route;
- a route whose node has no VTEP yet waits (Felix's calculation graph sends
  VTEPs first, but a VTEP can go before its routes).

The programmers turn the plan into netlink calls; nothing here does I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from dataplane.config import Config
from dataplane.linux.netlink.route_target import RouteKind, RouteTarget
from dataplane.model.hosts import Encapsulation
from dataplane.model.routes import PoolType, Route, RouteType, Vtep, VtepAddress

__all__ = [
    "ALL_HOSTS_SET",
    "DEVICE_NAMES",
    "VXLAN_SOURCES_SET",
    "FdbEntry",
    "Neighbour",
    "OverlayPlan",
    "VxlanDevice",
    "plan_overlay",
    "resolve_encapsulation",
    "vxlan_enabled",
]

DEVICE_NAMES = {4: "vxlan.calico", 6: "vxlan-v6.calico"}
# Internal IP set ids, as Felix names its own sets: who may send us VXLAN,
# and every node's address.
VXLAN_SOURCES_SET = "all-vxlan-net"
ALL_HOSTS_SET = "all-hosts-net"
# Outer headers VXLAN adds: Ethernet 14 + VXLAN 8 + UDP 8 + IP 20 (IPv6: 40).
_OVERHEAD = {4: 50, 6: 70}


@dataclass(frozen=True, slots=True)
class VxlanDevice:
    """This node's tunnel device for one family."""

    name: str
    version: int
    vni: int
    port: int
    mac: str
    local: str  # the parent interface's address: source of encapsulated packets
    address: str  # the tunnel address, the next hop other nodes route to
    mtu: int  # 0: the parent interface's MTU less ``overhead``
    overhead: int


@dataclass(frozen=True, slots=True, order=True)
class Neighbour:
    """A permanent ARP/NDP entry: a remote tunnel address is at that node's VTEP MAC."""

    device: str
    address: str
    mac: str


@dataclass(frozen=True, slots=True, order=True)
class FdbEntry:
    """A bridge FDB entry: frames for a VTEP MAC go, encapsulated, to its node."""

    device: str
    mac: str
    remote: str


@dataclass(frozen=True, slots=True)
class FamilyPlan:
    device: VxlanDevice | None = None
    neighbours: frozenset[Neighbour] = frozenset()
    fdb: frozenset[FdbEntry] = frozenset()
    routes: Mapping[str, RouteTarget] | None = None
    # Who may send us VXLAN: every other node's parent address, plus
    # ExternalNodesCIDRList (Felix's all-vxlan-net set).
    vxlan_sources: frozenset[str] = frozenset()
    waiting: frozenset[str] = frozenset()  # routes whose node has no VTEP yet


@dataclass(frozen=True, slots=True)
class OverlayPlan:
    families: Mapping[int, FamilyPlan]

    def routes(self) -> dict[str, RouteTarget]:
        return {
            dst: target
            for plan in self.families.values()
            for dst, target in (plan.routes or {}).items()
        }


def resolve_encapsulation(config: Config, encapsulation: Encapsulation) -> Config:
    """``config`` with the overlay switches Felix left unset taken from the IP pools."""

    def pick(forced: bool | None, derived: bool) -> bool:
        return derived if forced is None else forced

    return replace(
        config,
        vxlan_enabled=pick(config.vxlan_enabled, encapsulation.vxlan),
        vxlan_enabled_v6=pick(config.vxlan_enabled_v6, encapsulation.vxlan_v6),
        ipip_enabled=pick(config.ipip_enabled, encapsulation.ipip),
    )


def vxlan_enabled(config: Config, version: int) -> bool:
    """Whether ``version``'s VXLAN device should exist (config as resolved above)."""
    return bool(config.vxlan_enabled if version == 4 else config.vxlan_enabled_v6)


def _address(vtep: Vtep | None, version: int) -> VtepAddress | None:
    if vtep is None:
        return None
    return vtep.v4 if version == 4 else vtep.v6


def _host_length(dst: str) -> bool:
    return ipaddress.ip_network(dst).prefixlen == (32 if ":" not in dst else 128)


# Plain ints: an IntFlag's own ``&`` builds a new flag each time, which
# made planning 2,500 routes cost milliseconds per change.
_REMOTE_WORKLOAD = int(RouteType.REMOTE_WORKLOAD)
_LOCAL_WORKLOAD = int(RouteType.LOCAL_WORKLOAD)
_REMOTE_TUNNEL = int(RouteType.REMOTE_TUNNEL)


def _has(route: Route, kind: int) -> bool:
    return int(route.types) & kind == kind


def _target(
    route: Route, device: str, vteps: Mapping[str, Vtep], version: int
) -> RouteTarget | None:
    """Where one remote route goes, or None while its node's VTEP is unknown."""
    if route.same_subnet and route.dst_node_ip:
        return RouteTarget(RouteKind.GATEWAY, gateway=route.dst_node_ip)
    remote_tunnel = _has(route, _REMOTE_TUNNEL)
    if remote_tunnel and (_has(route, _REMOTE_WORKLOAD) or route.borrowed):
        return RouteTarget.dev(device)
    address = _address(vteps.get(route.dst_node_name), version)
    if address is None:
        return None
    return RouteTarget(RouteKind.ONLINK, device, address.address)


def _family(
    version: int,
    node: str,
    config: Config,
    vteps: Mapping[str, Vtep],
    routes: Iterable[Route],
) -> FamilyPlan:
    name = DEVICE_NAMES[version]
    own = _address(vteps.get(node), version)
    device = None
    if own is not None:
        device = VxlanDevice(
            name,
            version,
            config.vxlan_vni,
            config.vxlan_port,
            own.mac,
            own.parent_address,
            own.address,
            config.vxlan_mtu if version == 4 else config.vxlan_mtu_v6,
            _OVERHEAD[version],
        )
    remote = [
        (n, a) for n, v in vteps.items() if n != node and (a := _address(v, version)) is not None
    ]
    external = (c for c in config.external_nodes_cidrs if (":" in c) == (version == 6))
    planned: dict[str, RouteTarget] = {}
    waiting = set()
    for route in routes:
        if route.version != version or route.pool_type is not PoolType.VXLAN:
            continue
        if _has(route, _LOCAL_WORKLOAD):
            if not route.local_workload and not _host_length(route.dst):
                planned[route.dst] = RouteTarget(RouteKind.BLACKHOLE)
            continue
        if not (_has(route, _REMOTE_WORKLOAD) or route.borrowed):
            continue
        target = _target(route, name, vteps, version)
        if target is None:
            waiting.add(route.dst)
        else:
            planned[route.dst] = target
    return FamilyPlan(
        device,
        frozenset(Neighbour(name, a.address, a.mac) for _, a in remote),
        frozenset(FdbEntry(name, a.mac, a.parent_address) for _, a in remote),
        planned,
        frozenset(a.parent_address for _, a in remote) | frozenset(external),
        frozenset(waiting),
    )


def plan_overlay(
    node: str,
    config: Config,
    vteps: Mapping[str, Vtep],
    routes: Iterable[Route],
    *,
    versions: Iterable[int] = (4, 6),
) -> OverlayPlan:
    """The overlay of every enabled family (a disabled family plans nothing: removal).

    ``config`` is resolved (:func:`resolve_encapsulation`).
    """
    routes = list(routes)
    families = {
        v: _family(v, node, config, vteps, routes) if vxlan_enabled(config, v) else FamilyPlan()
        for v in versions
    }
    return OverlayPlan(families)
