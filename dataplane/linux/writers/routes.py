"""RoutesWriter: a route per workload address, and its interface's sysctls.

Only now that policy is in force (the platform writes these after the
tables) do new pods become routable.

It also keeps Felix's routes to other nodes' blocks, the nodes' VXLAN
tunnel endpoints and metadata, and the encapsulation, as the managers hand
them over. They are not programmed
yet (routes via the VXLAN device and its neighbours are issue 12's); they
are held so that nothing handed over is lost, ready for that work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from dataplane.linux.links import LinkState
from dataplane.model import WorkloadEndpoint, WorkloadEndpointKey
from dataplane.model.hosts import Encapsulation, Host
from dataplane.model.routes import Route, Vtep

__all__ = ["RoutesWriter"]


class RoutesWriter:
    def __init__(self) -> None:
        self._endpoints: dict[WorkloadEndpointKey, WorkloadEndpoint] = {}
        self._vteps: dict[str, Vtep] = {}
        self._node_routes: dict[str, Route] = {}
        self._hosts: dict[str, Host] = {}
        self.encapsulation = Encapsulation()

    def set(self, endpoint: WorkloadEndpoint) -> None:
        self._endpoints[endpoint.key] = endpoint

    def remove(self, key: WorkloadEndpointKey) -> None:
        self._endpoints.pop(key, None)

    def set_vtep(self, vtep: Vtep) -> None:
        self._vteps[vtep.node] = vtep

    def remove_vtep(self, node: str) -> None:
        self._vteps.pop(node, None)

    def set_host(self, host: Host) -> None:
        self._hosts[host.name] = host

    def remove_host(self, name: str) -> None:
        self._hosts.pop(name, None)

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        self.encapsulation = encapsulation

    @property
    def hosts(self) -> Mapping[str, Host]:
        """Every node's metadata, by name (held for the overlay and host matches)."""
        return MappingProxyType(self._hosts)

    def set_node_route(self, route: Route) -> None:
        self._node_routes[route.dst] = route

    def remove_node_route(self, dst: str) -> None:
        self._node_routes.pop(dst, None)

    @property
    def vteps(self) -> Mapping[str, Vtep]:
        """Every node's VXLAN tunnel endpoint, by node name (held, not programmed)."""
        return MappingProxyType(self._vteps)

    @property
    def node_routes(self) -> Mapping[str, Route]:
        """Felix's routes by destination CIDR (held, not programmed)."""
        return MappingProxyType(self._node_routes)

    def routes(self) -> dict[str, str]:
        """Destination CIDR -> interface, for every workload address."""
        return {
            net: wep.name
            for wep in self._endpoints.values()
            for net in wep.ipv4_nets + wep.ipv6_nets
        }

    def sysctls(self, links: Mapping[str, LinkState]) -> Iterable[tuple[str, int, bool]]:
        """(interface, index, strict reverse-path filter) of every present interface."""
        return (
            (wep.name, links[wep.name].index, not wep.allow_spoofed_source_prefixes)
            for wep in self._endpoints.values()
            if wep.name in links
        )

    def endpoints_failing(
        self, routes: frozenset[str], interfaces: Iterable[str]
    ) -> frozenset[WorkloadEndpointKey]:
        """Endpoints with a refused route or an interface whose sysctls failed."""
        ifaces = frozenset(interfaces)
        return frozenset(
            key
            for key, wep in self._endpoints.items()
            if wep.name in ifaces or routes.intersection(wep.ipv4_nets + wep.ipv6_nets)
        )

    def dump(self) -> list[str]:
        return [f"  {net} dev {iface}" for net, iface in self.routes().items()]
