"""VXLAN routes on Windows as HNS ``RemoteSubnetRoute`` network policies (pure).

On a Windows VXLAN node the overlay is an HNS network of type ``Overlay``;
a pod block on another node is reachable through one ``RemoteSubnetRoute``
policy on that network: the block (``DestinationPrefix``), the VNI
(``IsolationId``), the other node's underlay address (``ProviderAddress``)
and its tunnel endpoint's MAC (``DistributedRouterMacAddress``, dashed, as
HNS spells MACs). This follows Felix's Windows VXLAN manager:

* a route qualifies when it is a remote workload block (``REMOTE_WORKLOAD``
  bit) of a VXLAN pool and there is a VTEP for its ``dst_node_name``;
  blocks of this node, and this node's own VTEP, never become routes;
* IPv4 only: Calico has no IPv6 VXLAN on Windows, so an IPv6 block is
  skipped, and the VTEP's IPv4 part is used;
* every ``RemoteSubnetRoute`` on our overlay network is ours: one we do not
  want is removed, whoever added it.

The VNI must be one HNS takes: 4096 or more (Windows reserves the lower
ones; Calico's Windows installer refuses them too) and at most 65535
(``IsolationId`` is 16 bits in HCN's schema).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dataplane.model.routes import PoolType, Route, RouteType, Vtep
from dataplane.windows.hns.hcn import Json

__all__ = [
    "MAX_VNI",
    "MIN_VNI",
    "SubnetRoute",
    "parse_route",
    "prefix_of",
    "render_routes",
    "route_changes",
    "vni_problem",
]

MIN_VNI = 4096
MAX_VNI = 0xFFFF
POLICY_TYPE = "RemoteSubnetRoute"


@dataclass(frozen=True, slots=True, order=True)
class SubnetRoute:
    """One ``RemoteSubnetRoute`` policy's settings, canonical (comparable with HNS's copy)."""

    destination_prefix: str
    isolation_id: int
    provider_address: str
    mac: str  # lower case, dashed

    def policy(self) -> Json:
        """The policy as hcsshim marshals it."""
        return {
            "Type": POLICY_TYPE,
            "Settings": {
                "DestinationPrefix": self.destination_prefix,
                "IsolationId": self.isolation_id,
                "ProviderAddress": self.provider_address,
                "DistributedRouterMacAddress": self.mac,
            },
        }

    def __str__(self) -> str:
        return (
            f"{self.destination_prefix} vni {self.isolation_id}"
            f" via {self.provider_address} mac {self.mac}"
        )


def vni_problem(vni: int) -> str | None:
    """Why HNS cannot take ``vni`` as an ``IsolationId``, or None."""
    if not MIN_VNI <= vni <= MAX_VNI:
        return f"VXLANVNI {vni} is not usable on Windows (must be {MIN_VNI}..{MAX_VNI})"
    return None


def render_routes(
    vteps: Mapping[str, Vtep], routes: Iterable[Route], vni: int, own_node: str
) -> frozenset[SubnetRoute]:
    """The ``RemoteSubnetRoute`` settings the overlay network should hold."""
    out = set()
    for route in routes:
        if (
            not route.types & RouteType.REMOTE_WORKLOAD
            or route.pool_type is not PoolType.VXLAN
            or route.version != 4
            or not route.dst_node_name
            or route.dst_node_name == own_node
        ):
            continue
        vtep = vteps.get(route.dst_node_name)
        if vtep is None or vtep.v4 is None:
            continue  # no tunnel endpoint for that node (yet): nowhere to send it
        out.add(SubnetRoute(route.dst, vni, vtep.v4.parent_address, vtep.v4.mac.replace(":", "-")))
    return frozenset(out)


def parse_route(policy: Json) -> SubnetRoute | None:
    """A listed ``RemoteSubnetRoute``'s settings, canonical; None if they are unreadable."""
    settings = policy.get("Settings")
    if not isinstance(settings, dict):
        return None
    try:
        prefix = ipaddress.ip_network(str(settings["DestinationPrefix"]), strict=False)
        provider = ipaddress.ip_address(str(settings["ProviderAddress"]))
        isolation = settings.get("IsolationId", 0)
        if not isinstance(isolation, int) or isinstance(isolation, bool):
            return None
        mac = str(settings["DistributedRouterMacAddress"]).lower().replace(":", "-")
    except (KeyError, ValueError):
        return None
    return SubnetRoute(str(prefix), isolation, str(provider), mac)


def route_changes(
    network: Json, wanted: frozenset[SubnetRoute]
) -> tuple[list[Json], list[SubnetRoute]]:
    """(policies to remove, exactly as listed; routes to add) to make ``network`` hold ``wanted``.

    A listed route equal to a wanted one is kept (once: a duplicate goes);
    HNS may add settings of its own, so equality is on the four we set.
    """
    kept: set[SubnetRoute] = set()
    removes: list[Json] = []
    for policy in network.get("Policies") or ():
        if policy.get("Type") != POLICY_TYPE:
            continue
        found = parse_route(policy)
        if found is not None and found in wanted and found not in kept:
            kept.add(found)
        else:
            removes.append(policy)
    return removes, sorted(wanted - kept)


def prefix_of(policy: Json) -> str:
    """The ``DestinationPrefix`` a listed policy names, canonical where it can be (a key)."""
    settings = policy.get("Settings")
    raw = str(settings.get("DestinationPrefix", "")) if isinstance(settings, dict) else ""
    try:
        return str(ipaddress.ip_network(raw, strict=False))
    except ValueError:
        return raw
