"""Services in, the wanted load balancer of each frontend out, as a diff.

The platform hands over each service's full value when it changes
(KPNG's full state per service); this keeps them, renders the changed ones
(:mod:`dataplane.windows.services.lb_render`) and puts every load balancer into a
:class:`~dataplane.core.diffstore.DiffStore` keyed by its frontend, so an
apply learns exactly which frontends changed. When the node's options
change (configuration, HNS version, network type) every service is
rendered again, and the store still reports only real differences.

Two services claiming one frontend (a cluster IP reused before the old
service is gone) cannot both have it on HNS: the first by name keeps it,
and the other is reported until the clash is over.
"""

from __future__ import annotations

from collections import defaultdict

from dataplane.core.diffstore import Changes, DiffStore
from dataplane.model.services import Service, ServiceKey
from dataplane.windows.services.lb_render import (
    CLASH,
    LbKey,
    LbOptions,
    Note,
    RenderedLbs,
    WantedLb,
    render_service,
)

__all__ = ["WantedLbs"]


class WantedLbs:
    def __init__(self) -> None:
        self._services: dict[str, Service] = {}
        self._rendered: dict[str, RenderedLbs] = {}
        self._claims: defaultdict[LbKey, set[str]] = defaultdict(set)
        self._store: DiffStore[LbKey, WantedLb] = DiffStore()
        self._dirty: set[str] = set()
        self._options: LbOptions | None = None
        self.rendered = False  # whether the last take_changes rendered any service

    def set_service(self, service: Service) -> None:
        name = str(service.key)
        self._services[name] = service
        self._dirty.add(name)

    def remove_service(self, key: ServiceKey) -> None:
        self._services.pop(str(key), None)
        self._dirty.add(str(key))

    def __bool__(self) -> bool:
        return bool(self._services)

    def take_changes(self, options: LbOptions) -> Changes[LbKey, WantedLb]:
        """Render what changed under ``options``; the frontends whose load balancer changed."""
        if options != self._options:
            self._options = options
            self._dirty |= set(self._services) | set(self._rendered)
        touched: set[LbKey] = set()
        self.rendered = bool(self._dirty)
        for name in self._dirty:
            old = self._rendered.pop(name, None)
            for lb in old.balancers if old else ():
                self._claims[lb.key].discard(name)
                touched.add(lb.key)
            service = self._services.get(name)
            if service is None:
                continue
            rendered = self._rendered[name] = render_service(service, options)
            for lb in rendered.balancers:
                self._claims[lb.key].add(name)
                touched.add(lb.key)
        self._dirty.clear()
        for key in touched:
            claimants = sorted(self._claims.get(key, ()))
            if claimants:
                self._store.set(key, self._balancer(claimants[0], key))
            else:
                self._claims.pop(key, None)
                self._store.delete(key)
        return self._store.commit()

    def _balancer(self, name: str, key: LbKey) -> WantedLb:
        return next(lb for lb in self._rendered[name].balancers if lb.key == key)

    def get(self, key: LbKey) -> WantedLb | None:
        return self._store.get(key)

    def keys(self) -> list[LbKey]:
        return self._store.keys()

    def health_checks(self) -> dict[int, tuple[ServiceKey, int]]:
        """``healthCheckNodePort`` -> (its service, local ready endpoints), for
        ``externalTrafficPolicy: Local`` services (kube-proxy counts endpoints,
        not ports: one per address)."""
        return {
            s.health_check_node_port: (s.key, len({b.address for b in s.usable(local_only=True)}))
            for s in self._services.values()
            if s.external_local and s.health_check_node_port
        }

    def by_service(self) -> dict[str, RenderedLbs]:
        return dict(self._rendered)

    def notes(self) -> list[Note]:
        """Everything reported: what HNS cannot express, and frontends two services claim."""
        notes = [n for r in self._rendered.values() for n in r.notes]
        for key, claimants in self._claims.items():
            if len(claimants) > 1:
                first, *others = sorted(claimants)
                notes += [
                    Note(o, f"{key}: frontend also claimed by {first}, which keeps it", CLASH)
                    for o in others
                ]
        return sorted(notes)
