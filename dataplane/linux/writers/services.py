"""ServiceWriter: services as kube-proxy's nat chains, or in the services table.

On iptables each service is one unit of chains in nat; the dispatch tree
and the filter reject chain change only when some frontend did (a backend
change rewrites just that service's chains). On nftables services are
elements of a table of their own
(:class:`~dataplane.linux.nftables.service_table.ServiceTable`, one per
family): the writer hands it each changed service and the IP pools, and
leaves the chains the nat and filter tables jump to for services empty.
Either way it tells the conntrack cleaner which flows lost their backend
and the health-check server which node ports to answer; both do their
I/O when the platform runs them.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from dataplane.core.healthcheck import HealthCheckServer
from dataplane.linux.iptables.chains import IptRule
from dataplane.linux.kernel.conntrack import ConntrackCleaner
from dataplane.linux.render.nat import ALL_POOLS_SET
from dataplane.linux.render.service import (
    Frontend,
    RenderedService,
    ServiceRenderer,
    local_endpoints,
)
from dataplane.linux.rules.chain import Chain
from dataplane.linux.writers.groups import ChainGroups
from dataplane.linux.writers.shapes import RuleTable
from dataplane.linux.writers.target import R, Target
from dataplane.model.services import Service, ServiceKey

if TYPE_CHECKING:
    from dataplane.linux.nftables.service_table import ServiceTable

__all__ = ["ServiceWriter"]

log = logging.getLogger(__name__)

_PREFIX = "svc:"


class ServiceWriter:
    def __init__(self, conntrack: ConntrackCleaner, health: HealthCheckServer) -> None:
        self._conntrack = conntrack
        self._health = health
        self._services: dict[ServiceKey, Service] = {}
        self._dirty: set[ServiceKey] = set()
        self._frontends: dict[tuple[int, ServiceKey], list[Frontend]] = {}
        self._local_endpoints: dict[ServiceKey, int] = {}
        # The services with a health-check node port (Local load balancers),
        # kept as they change: a write that walked every service for them
        # cost each change time in proportion to the node's services.
        self._health_checked: set[ServiceKey] = set()
        self._groups = ChainGroups()
        self._pools: frozenset[str] = frozenset()
        self._pools_dirty = True

    def set_pools(self, cidrs: Iterable[str]) -> None:
        """The IP pools' prefixes (the services table tells pods by them)."""
        pools = frozenset(cidrs)
        if pools != self._pools:
            self._pools = pools
            self._pools_dirty = True

    def set(self, service: Service) -> None:
        self._services[service.key] = service
        self._dirty.add(service.key)

    def remove(self, key: ServiceKey) -> None:
        self._services.pop(key, None)
        self._dirty.add(key)

    def service_of(self, table: str, version: int, chain: str) -> ServiceKey | None:
        """The service whose unit of chains holds ``chain`` (for reports)."""
        group = self._groups.group_of(table, version, chain)
        if group is None or not group.startswith(_PREFIX):
            return None
        return next((k for k in self._services if f"{_PREFIX}{k}" == group), None)

    def write(self, target: Target[R], everything: bool) -> None:
        if not (everything or self._dirty or (target.services and self._pools_dirty)):
            return
        keys = set(self._services) | self._dirty if everything else self._dirty
        for key in keys:
            self._local_endpoints.pop(key, None)
            self._conntrack.observe(key, self._services.get(key), target.versions)
        for version in target.versions:
            table = target.services.get(version)
            if table is not None:
                self._write_table(table, target, version, keys, everything)
                continue
            renderer = ServiceRenderer(
                version,
                target.names,
                target.renderer("filter", version).marks,
                target.ipsets.kernel_name(ALL_POOLS_SET, version),
            )
            # kube-proxy's chains are iptables' own layout: with no services
            # table the backend is iptables, and its rules are IptRules.
            nat = cast("RuleTable[IptRule]", target.table("nat", version))
            filt = cast("RuleTable[IptRule]", target.table("filter", version))
            frontends_changed = everything
            for key in keys:
                service = self._services.get(key)
                rendered = renderer.render(service) if service else RenderedService()
                self._groups.set(nat, f"{_PREFIX}{key}", rendered.chains)
                old = self._frontends.pop((version, key), [])
                frontends_changed |= old != rendered.frontends
                if service is not None:
                    self._frontends[(version, key)] = rendered.frontends
                    self._local_endpoints[key] = max(
                        rendered.local_endpoints, self._local_endpoints.get(key, 0)
                    )
            if not frontends_changed:
                continue  # only backends changed: the tree and reject chain stand
            frontends = [f for (v, _), fs in self._frontends.items() if v == version for f in fs]
            # Only the dispatch tree's leaves for changed frontends differ, so
            # the table rewrites just those chains.
            self._groups.set(nat, "svc-dispatch", renderer.dispatch(frontends))
            filt.update_chain(renderer.rejects(frontends))
        self._pools_dirty = False
        for key in keys:
            service = self._services.get(key)
            if service is not None and service.external_local and service.health_check_node_port:
                self._health_checked.add(key)
            else:
                self._health_checked.discard(key)
        self._health.update(
            {
                self._services[key].health_check_node_port: (
                    key,
                    self._local_endpoints.get(key, 0),
                )
                for key in sorted(self._health_checked)
            }
        )
        self._dirty.clear()

    def _write_table(
        self,
        table: ServiceTable,
        target: Target[R],
        version: int,
        keys: Iterable[ServiceKey],
        everything: bool,
    ) -> None:
        """Services as elements of ``table``; the iptables layout's hooks empty."""
        if everything:
            # The nat and filter tables jump here on either backend; on this
            # one the services table does the work (its own hooks run first).
            self._groups.set(
                target.table("nat", version), "svc-dispatch", [Chain(target.names.top("SERVICES"))]
            )
            target.table("filter", version).update_chain(Chain(target.names.top("svc-reject")))
        if everything or self._pools_dirty:
            table.set_pools(p for p in self._pools if ipaddress.ip_network(p).version == version)
        for key in keys:
            service = self._services.get(key)
            if service is None:
                table.remove_service(key)
                continue
            table.set_service(service)
            local = service.usable(local_only=True)
            self._local_endpoints[key] = max(
                local_endpoints(local, version), self._local_endpoints.get(key, 0)
            )
