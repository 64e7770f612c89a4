"""ServiceWriter: kube-proxy's nat chains, dispatch tree and reject rules.

Each service is one unit of chains in nat; the dispatch tree and the
filter reject chain change only when some frontend did (a backend change
rewrites just that service's chains). It also tells the conntrack cleaner
which flows lost their backend and the health-check server which node
ports to answer; both do their I/O when the platform runs them.
"""

from __future__ import annotations

from dataplane.core.healthcheck import HealthCheckServer
from dataplane.linux.kernel.conntrack import ConntrackCleaner
from dataplane.linux.render.nat import ALL_POOLS_SET
from dataplane.linux.render.service import Frontend, RenderedService, ServiceRenderer
from dataplane.linux.writers.groups import ChainGroups
from dataplane.linux.writers.target import Target
from dataplane.model.services import Service, ServiceKey

__all__ = ["ServiceWriter"]

_PREFIX = "svc:"


class ServiceWriter:
    def __init__(self, conntrack: ConntrackCleaner, health: HealthCheckServer) -> None:
        self._conntrack = conntrack
        self._health = health
        self._services: dict[ServiceKey, Service] = {}
        self._dirty: set[ServiceKey] = set()
        self._frontends: dict[tuple[int, ServiceKey], list[Frontend]] = {}
        self._local_endpoints: dict[ServiceKey, int] = {}
        self._groups = ChainGroups()

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

    def write(self, target: Target, everything: bool) -> None:
        if not (everything or self._dirty):
            return
        keys = set(self._services) | self._dirty if everything else self._dirty
        for key in keys:
            self._local_endpoints.pop(key, None)
            self._conntrack.observe(key, self._services.get(key), target.versions)
        for version in target.versions:
            renderer = ServiceRenderer(
                version,
                target.names,
                target.filters[version].marks,
                target.ipsets.kernel_name(ALL_POOLS_SET, version),
            )
            nat = target.table("nat", version)
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
            target.table("filter", version).update_chain(renderer.rejects(frontends))
        self._health.update(
            {
                s.health_check_node_port: (key, self._local_endpoints.get(key, 0))
                for key, s in self._services.items()
                if s.external_local and s.health_check_node_port
            }
        )
        self._dirty.clear()
