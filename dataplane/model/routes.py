"""Route and VXLAN tunnel endpoint values: the node-to-node routing Felix computes.

Felix's calculation graph sends one ``RouteUpdate`` per destination CIDR it
knows of (pool CIDRs, IPAM blocks on this and other nodes, host and tunnel
addresses), with a bitmap of what the destination is, and one
``VXLANTunnelEndpointUpdate`` per node with a VXLAN tunnel device. These are
the validated forms; platforms decide what to program from them (Windows:
a ``RemoteSubnetRoute`` per remote VXLAN block; Linux: routes and the VXLAN
device's neighbours, issue 12).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["PoolType", "Route", "RoutePriority", "RouteType", "Tunnel", "Vtep", "VtepAddress"]


class RouteType(enum.IntFlag):
    """What a destination is (Felix's bitmap; no bit set is a pool's CIDR, ``CIDR_INFO``)."""

    CIDR_INFO = 0
    REMOTE_WORKLOAD = 1
    REMOTE_HOST = 2
    LOCAL_WORKLOAD = 4
    LOCAL_HOST = 8
    REMOTE_TUNNEL = 16
    LOCAL_TUNNEL = 32


class PoolType(enum.Enum):
    """The encapsulation of the IP pool the destination belongs to."""

    NONE = "none"  # not in any pool
    NO_ENCAP = "no-encap"
    VXLAN = "vxlan"
    IPIP = "ipip"


class RoutePriority(enum.Enum):
    NORMAL = "normal"
    ELEVATED = "elevated"


@dataclass(frozen=True, slots=True)
class Tunnel:
    """The tunnels a host or tunnel address belongs to."""

    ipip: bool = False
    vxlan: bool = False
    wireguard: bool = False


@dataclass(frozen=True, slots=True, order=True)
class Route:
    """One destination CIDR and what Felix knows about it.

    ``dst`` is canonical CIDR text (host bits cleared) and is the key: a
    later update for the same ``dst`` replaces this one.
    """

    dst: str
    types: RouteType = RouteType.CIDR_INFO
    pool_type: PoolType = PoolType.NONE
    dst_node_name: str = ""
    dst_node_ip: str = ""  # canonical address text, or empty
    same_subnet: bool = False
    nat_outgoing: bool = False
    local_workload: bool = False
    borrowed: bool = False
    tunnel: Tunnel = Tunnel()
    priority: RoutePriority = RoutePriority.NORMAL

    @property
    def version(self) -> int:
        return 6 if ":" in self.dst else 4


@dataclass(frozen=True, slots=True)
class VtepAddress:
    """One family of a node's VXLAN tunnel endpoint.

    Attributes:
        mac: the tunnel device's MAC, lower case, colon-separated.
        address: the tunnel device's own address (the next hop inside the overlay).
        parent_address: the address of the device the tunnel runs over
            (the outer destination of encapsulated packets).
    """

    mac: str
    address: str
    parent_address: str


@dataclass(frozen=True, slots=True)
class Vtep:
    """A node's VXLAN tunnel endpoint, per family (a family the node lacks is None)."""

    node: str
    v4: VtepAddress | None = None
    v6: VtepAddress | None = None
