"""RoutesWriter: a route per workload address, and its interface's sysctls.

Only now that policy is in force (the platform writes these after the
tables) do new pods become routable. Routes to other nodes come from the
overlay plan (:mod:`dataplane.linux.writers.overlay`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dataplane.linux.netlink.links import LinkState
from dataplane.linux.netlink.route_target import RouteTarget
from dataplane.model import WorkloadEndpoint, WorkloadEndpointKey

__all__ = ["RoutesWriter"]


class RoutesWriter:
    def __init__(self) -> None:
        self._endpoints: dict[WorkloadEndpointKey, WorkloadEndpoint] = {}

    def set(self, endpoint: WorkloadEndpoint) -> None:
        self._endpoints[endpoint.key] = endpoint

    def remove(self, key: WorkloadEndpointKey) -> None:
        self._endpoints.pop(key, None)

    def routes(self) -> dict[str, RouteTarget]:
        """Destination CIDR -> its interface, for every workload address."""
        return {
            net: RouteTarget.dev(wep.name)
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
