"""OverlayWriter: other nodes' tunnel endpoints, routes and metadata, and the overlay plan.

It keeps what the routes and hosts managers hand over (every node's VTEP,
Felix's routes by destination, node metadata, the pools' encapsulation)
and, when any of it or the configuration changed, computes the overlay
plan (:mod:`dataplane.linux.netlink.overlay_plan`) once for the apply. It writes
the IP sets the overlay's rules match: ``all-vxlan-net`` (who may send us
VXLAN) and ``all-hosts-net`` (every node's address, for
``NATOutgoingExclusions=IPPoolsAndHostIPs``). The VXLAN programmer and the
route programmer take the plan from here.
"""

from __future__ import annotations

from dataplane.config import Config
from dataplane.linux.netlink.overlay_plan import (
    ALL_HOSTS_SET,
    VXLAN_SOURCES_SET,
    OverlayPlan,
    plan_overlay,
)
from dataplane.linux.writers.target import R, Target
from dataplane.model import IPSet, IPSetType
from dataplane.model.hosts import Encapsulation, Host
from dataplane.model.routes import Route, Vtep

__all__ = ["OverlayWriter"]


class OverlayWriter:
    def __init__(self) -> None:
        self._vteps: dict[str, Vtep] = {}
        self._routes: dict[str, Route] = {}
        self._hosts: dict[str, Host] = {}
        self.encapsulation = Encapsulation()
        self._plan: OverlayPlan | None = None
        self._planned_for: tuple[Config, tuple[int, ...]] | None = None
        # What the IP sets were last written for; None: written before the
        # last change. Kept apart from the plan's cache because the platform
        # computes the plan before the writers run, so a fresh plan cannot
        # tell write() that something changed.
        self._sets_for: tuple[Config, tuple[int, ...]] | None = None

    def _changed(self) -> None:
        self._plan = None
        self._sets_for = None

    def set_vtep(self, vtep: Vtep) -> None:
        self._vteps[vtep.node] = vtep
        self._changed()

    def remove_vtep(self, node: str) -> None:
        if self._vteps.pop(node, None) is not None:
            self._changed()

    def set_route(self, route: Route) -> None:
        self._routes[route.dst] = route
        self._changed()

    def remove_route(self, dst: str) -> None:
        if self._routes.pop(dst, None) is not None:
            self._changed()

    def set_host(self, host: Host) -> None:
        self._hosts[host.name] = host
        self._changed()

    def remove_host(self, name: str) -> None:
        if self._hosts.pop(name, None) is not None:
            self._changed()

    def set_encapsulation(self, encapsulation: Encapsulation) -> None:
        self.encapsulation = encapsulation
        self._changed()

    def plan(self, config: Config, versions: tuple[int, ...]) -> OverlayPlan:
        """The overlay for ``config`` (resolved), computed again only after a change."""
        if self._plan is None or self._planned_for != (config, versions):
            self._plan = plan_overlay(
                config.felix_hostname, config, self._vteps, self._routes.values(), versions=versions
            )
            self._planned_for = (config, versions)
        return self._plan

    def write(self, target: Target[R], everything: bool) -> None:
        key = (target.config, target.versions)
        if not everything and self._sets_for == key:
            return
        plan = self.plan(*key)
        sources = frozenset(s for f in plan.families.values() for s in f.vxlan_sources)
        target.ipsets.replace(IPSet(VXLAN_SOURCES_SET, IPSetType.NET, sources))
        addresses = frozenset(a for h in self._hosts.values() for a in (h.ipv4, h.ipv6) if a)
        target.ipsets.replace(IPSet(ALL_HOSTS_SET, IPSetType.NET, addresses))
        self._sets_for = key

    def dump(self, plan: OverlayPlan) -> list[str]:
        out = []
        for version, family in sorted(plan.families.items()):
            if family.device is not None:
                d = family.device
                out.append(
                    f"  {d.name} vni {d.vni} port {d.port} mac {d.mac} local {d.local}"
                    f" address {d.address} mtu {d.mtu or f'parent-{d.overhead}'}"
                )
            out.extend(
                f"  neigh {n.address} lladdr {n.mac} dev {n.device}"
                for n in sorted(family.neighbours)
            )
            out.extend(f"  fdb {e.mac} dst {e.remote} dev {e.device}" for e in sorted(family.fdb))
            if family.waiting:
                out.append(
                    f"  IPv{version} routes waiting for a VTEP: {', '.join(sorted(family.waiting))}"
                )
        return out
