"""RoutesWriter: a route per workload address, and its interface's sysctls.

Only now that policy is in force (the platform writes these after the
tables) do new pods become routable. Routes to other nodes come from the
overlay plan (:mod:`dataplane.linux.writers.overlay`); a workload's address
wins over the plan's route to the same CIDR.

The routes are kept as endpoints come and go, and handed to the route
programmer as what changed since the last hand-over: a new pod costs its
own addresses, not a walk over every endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from dataplane.linux.netlink.links import LinkState
from dataplane.linux.netlink.overlay_plan import OverlayPlan
from dataplane.linux.netlink.route_target import RouteTarget
from dataplane.model import WorkloadEndpoint, WorkloadEndpointKey

__all__ = ["RouteSink", "RoutesWriter"]


class RouteSink(Protocol):
    """What takes the routes (the route programmer)."""

    def set_routes(self, desired: Mapping[str, RouteTarget]) -> None: ...

    def update_routes(self, changes: Mapping[str, RouteTarget | None]) -> None: ...


def _nets(endpoint: WorkloadEndpoint | None) -> tuple[str, ...]:
    return () if endpoint is None else endpoint.ipv4_nets + endpoint.ipv6_nets


class RoutesWriter:
    def __init__(self) -> None:
        self._endpoints: dict[WorkloadEndpointKey, WorkloadEndpoint] = {}
        # Two endpoints may claim one address (a bad input Felix passes on):
        # the one that came last wins, and when it goes the other has it.
        self._arrival: dict[WorkloadEndpointKey, int] = {}
        self._arrivals = 0
        self._owners: dict[str, set[WorkloadEndpointKey]] = {}
        self._routes: dict[str, RouteTarget] = {}
        self._changed: set[str] = set()  # CIDRs whose route changed since the hand-over
        # The last hand-over: to which sink, for which plan (and its routes).
        self._sink: RouteSink | None = None
        self._plan: OverlayPlan | None = None
        self._plan_routes: dict[str, RouteTarget] = {}

    def set(self, endpoint: WorkloadEndpoint) -> None:
        key = endpoint.key
        old = self._endpoints.get(key)
        if old is None:
            self._arrival[key] = self._arrivals
            self._arrivals += 1
        self._endpoints[key] = endpoint
        if old is None or old.name != endpoint.name or _nets(old) != _nets(endpoint):
            self._reown(key, _nets(old), _nets(endpoint))

    def remove(self, key: WorkloadEndpointKey) -> None:
        old = self._endpoints.pop(key, None)
        if old is not None:
            self._reown(key, _nets(old), ())
            del self._arrival[key]

    def _reown(self, key: WorkloadEndpointKey, old: Iterable[str], new: Iterable[str]) -> None:
        touched = set(old) | set(new)
        for cidr in old:
            self._owners[cidr].discard(key)
        for cidr in new:
            self._owners.setdefault(cidr, set()).add(key)
        for cidr in touched:
            owners = self._owners[cidr]
            if not owners:
                del self._owners[cidr]
                self._routes.pop(cidr, None)
            else:
                last = max(owners, key=self._arrival.__getitem__)
                self._routes[cidr] = RouteTarget.dev(self._endpoints[last].name)
        self._changed |= touched

    def routes(self) -> Mapping[str, RouteTarget]:
        """Destination CIDR -> its interface, for every workload address."""
        return self._routes

    def hand_over(self, plan: OverlayPlan, sink: RouteSink) -> None:
        """Give ``sink`` every route we want, the plan's and the workloads':
        all of them the first time, then only what changed."""
        plan_routes = self._plan_routes if plan is self._plan else plan.routes()
        if sink is not self._sink:
            sink.set_routes(plan_routes | self._routes)
        else:
            changed = self._changed
            if plan is not self._plan:
                before = self._plan_routes
                changed |= {
                    cidr
                    for cidr in before.keys() | plan_routes.keys()
                    if before.get(cidr) != plan_routes.get(cidr)
                }
            if changed:
                sink.update_routes(
                    {cidr: self._routes.get(cidr) or plan_routes.get(cidr) for cidr in changed}
                )
        self._sink, self._plan, self._plan_routes = sink, plan, plan_routes
        self._changed = set()

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
