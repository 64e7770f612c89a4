"""Protobuf -> route and VTEP model conversion, with validation.

Like :mod:`dataplane.managers.convert`: returns model values or raises
:class:`InputError` naming the field and the value; no side effects.
Everything that can reach a kernel route or an HNS policy (CIDRs,
addresses, MACs, the enum values) is checked here, once.
"""

from __future__ import annotations

import re

from dataplane.errors import InputError
from dataplane.managers.scalars import address, cidr, non_empty
from dataplane.model.routes import (
    PoolType,
    Route,
    RoutePriority,
    RouteType,
    Tunnel,
    Vtep,
    VtepAddress,
)
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["mac", "route", "route_dst", "vtep", "vtep_node"]

_POOL_TYPES = {
    pb.NONE: PoolType.NONE,
    pb.NO_ENCAP: PoolType.NO_ENCAP,
    pb.VXLAN: PoolType.VXLAN,
    pb.IPIP: PoolType.IPIP,
}
_PRIORITIES = {pb.NORMAL: RoutePriority.NORMAL, pb.ELEVATED: RoutePriority.ELEVATED}
_ALL_TYPES = 0
for _flag in RouteType:
    _ALL_TYPES |= _flag.value

# Six octets, one separator throughout (Felix sends colons; HNS spells dashes).
_MAC = re.compile(r"[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(\1[0-9A-Fa-f]{2}){4}")


def mac(text: str, field: str) -> str:
    """A unicast MAC address as lower-case, colon-separated text."""
    if not _MAC.fullmatch(text):
        raise InputError(field, text, "not a MAC address (six hex octets)")
    if int(text[:2], 16) & 1:
        raise InputError(field, text, "a multicast MAC cannot be a tunnel endpoint")
    return text.lower().replace("-", ":")


def route_dst(text: str, field: str = "dst") -> str:
    """A route's key: its destination as canonical CIDR text."""
    return cidr(non_empty(text, field), field)


def route(msg: pb.RouteUpdate) -> Route:
    dst = route_dst(msg.dst)
    types = int(msg.types)
    if types & ~_ALL_TYPES:
        raise InputError("types", types, "unknown route type bits")
    pool_type = _POOL_TYPES.get(msg.ip_pool_type)
    if pool_type is None:
        raise InputError("ip_pool_type", int(msg.ip_pool_type), "unknown IP pool type")
    priority = _PRIORITIES.get(msg.priority)
    if priority is None:
        raise InputError("priority", int(msg.priority), "unknown route priority")
    node_ip = address(msg.dst_node_ip, "dst_node_ip") if msg.dst_node_ip else ""
    tunnel = msg.tunnel_type
    return Route(
        dst=dst,
        types=RouteType(types),
        pool_type=pool_type,
        dst_node_name=msg.dst_node_name,
        dst_node_ip=node_ip,
        same_subnet=msg.same_subnet,
        nat_outgoing=msg.nat_outgoing,
        local_workload=msg.local_workload,
        borrowed=msg.borrowed,
        tunnel=Tunnel(tunnel.ipip, tunnel.vxlan, tunnel.wireguard),
        priority=priority,
    )


def vtep_node(text: str) -> str:
    return non_empty(text, "node")


def _family(
    version: int, fields: tuple[tuple[str, str], tuple[str, str], tuple[str, str]]
) -> VtepAddress | None:
    """One family's three fields: all set (validated) or all empty (the node lacks it)."""
    if not any(value for _, value in fields):
        return None
    for name, value in fields:
        if not value:
            raise InputError(name, value, f"the other IPv{version} tunnel fields are set")
    (mac_field, mac_text), (addr_field, addr), (parent_field, parent) = fields
    return VtepAddress(
        mac(mac_text, mac_field),
        address(addr, addr_field, version),
        address(parent, parent_field, version),
    )


def vtep(msg: pb.VXLANTunnelEndpointUpdate) -> Vtep:
    node = vtep_node(msg.node)
    v4 = _family(
        4,
        (
            ("mac", msg.mac),
            ("ipv4_addr", msg.ipv4_addr),
            ("parent_device_ip", msg.parent_device_ip),
        ),
    )
    v6 = _family(
        6,
        (
            ("mac_v6", msg.mac_v6),
            ("ipv6_addr", msg.ipv6_addr),
            ("parent_device_ipv6", msg.parent_device_ipv6),
        ),
    )
    if v4 is None and v6 is None:
        raise InputError("mac", "", "a tunnel endpoint needs an IPv4 or an IPv6 address")
    return Vtep(node, v4, v6)
