"""ServicesManager: services and their backends, as full per-service values.

``ServiceUpdate`` (Felix's, plus our extension fields) and
``ServiceBackendsUpdate`` (ours) are merged into one :class:`Service` value
per service, handed down once its backends are known (a
``ServiceBackendsUpdate``, even an empty one). Felix sends every Service
but never its backends (its own iptables and nftables dataplanes ignore
them, leaving services to kube-proxy), so under the real Felix no service
is programmed from its messages: a node beside kube-proxy gets no service
rule of ours unless the Kubernetes source or an embedder asks. A
:class:`~dataplane.core.diffstore.DiffStore` turns each apply's values
into the services that really changed, so a platform rewrites only
those (kube-proxy's partial sync). ``resync`` hands over everything again
(Contiv's Resync); ``set_backend_health`` takes a backend out of selection
(Cilium's SetBackendHealth) without waiting for the control plane.

With :meth:`ServicesManager.use_source` the services come from another
source (the Kubernetes API, :mod:`dataplane.kube.source`) with their
backends already chosen; the service messages are then ignored, with one
log line: one source of truth per node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar, Protocol

from google.protobuf.message import Message

from dataplane.config import Config
from dataplane.core.diffstore import DiffStore
from dataplane.core.platform import ServicesSink
from dataplane.errors import InputError
from dataplane.managers import convert_services as convert
from dataplane.model.services import Backend, BackendState, Service, ServiceKey, sorted_keys
from dataplane.wire._pb import felixbackend_pb2 as pb

log = logging.getLogger(__name__)


class ServicesSource(Protocol):
    """Whole service values from elsewhere (the Kubernetes API)."""

    def take_dirty(self) -> dict[ServiceKey, Service | None]: ...
    def requeue_all(self) -> None: ...


class ServicesManager:
    def __init__(self, sink: ServicesSink) -> None:
        self._sink = sink
        self._services: dict[ServiceKey, Service] = {}  # without backends
        self._backends: dict[ServiceKey, tuple[Backend, ...]] = {}
        self._unhealthy: set[str] = set()
        self._store: DiffStore[ServiceKey, Service] = DiffStore()
        self._dirty: set[ServiceKey] = set()
        self._node_port_ranges: tuple[tuple[int, int], ...] = Config().kube_node_port_ranges
        self._source: ServicesSource | None = None
        self._from_source: dict[ServiceKey, Service] = {}
        self._said_ignored = False
        self._said_no_backends = False

    def use_source(self, source: ServicesSource) -> None:
        """Take services from ``source`` from now on; ignore the service messages."""
        self._source = source

    @property
    def source(self) -> ServicesSource | None:
        return self._source

    def configure(self, config: Config) -> None:
        changed = config.kube_node_port_ranges != self._node_port_ranges
        self._node_port_ranges = config.kube_node_port_ranges
        if changed and self._source is not None:
            self._source.requeue_all()

    def on_update(self, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is None:
            return
        if self._source is not None:
            if not self._said_ignored:
                self._said_ignored = True
                log.info(
                    "%s ignored: services come from the Kubernetes API on this node (said once)",
                    type(msg).__name__,
                )
            return
        handler(self, msg)

    def _on_update(self, msg: pb.ServiceUpdate) -> None:
        service = convert.service(msg, self._node_port_ranges)
        self._services[service.key] = service
        self._dirty.add(service.key)

    def _on_remove(self, msg: pb.ServiceRemove) -> None:
        key = convert.service_key(msg.namespace, msg.name)
        self._services.pop(key, None)
        self._backends.pop(key, None)
        self._dirty.add(key)

    def _on_backends(self, msg: pb.ServiceBackendsUpdate) -> None:
        key = convert.service_key(msg.namespace, msg.name)
        if key not in self._services:
            raise InputError("name", f"{key}", "backends for a service that does not exist")
        self._backends[key] = convert.backends(msg)
        self._dirty.add(key)

    _handlers: ClassVar[dict[type, Callable[[ServicesManager, Any], None]]] = {
        pb.ServiceUpdate: _on_update,
        pb.ServiceRemove: _on_remove,
        pb.ServiceBackendsUpdate: _on_backends,
    }
    handles: ClassVar[frozenset[type]] = frozenset(_handlers)

    # --- health and resync ------------------------------------------------------

    def set_backend_health(self, address: str, healthy: bool) -> None:
        """A health source's verdict on one backend address (all its services)."""
        if healthy:
            self._unhealthy.discard(address)
        else:
            self._unhealthy.add(address)
        for key, backends in self._backends.items():
            if any(b.address == address for b in backends):
                self._dirty.add(key)
        for key, value in self._from_source.items():
            if any(b.address == address for b in value.backends):
                self._dirty.add(key)

    def resync(self) -> None:
        """Hand every service to the platform again at the next apply."""
        self._dirty |= set(self._services) | set(self._from_source)
        self._store.touch_all()

    # --- deferred work ------------------------------------------------------------

    def _value(self, key: ServiceKey) -> Service:
        if key in self._from_source:
            value = self._from_source[key]
            chosen = value.backends
        else:
            value = self._services[key]
            chosen = self._backends.get(key, ())
        if self._unhealthy:
            chosen = tuple(
                b._replace(state=BackendState.QUARANTINED) if b.address in self._unhealthy else b
                for b in chosen
            )
        # From the source with nothing quarantined (the common case): the
        # source's own value, not a copy of it (one Service fewer per key).
        return value if chosen is value.backends else replace(value, backends=chosen)

    def complete_deferred_work(self) -> None:
        if self._source is not None:
            for key, value in self._source.take_dirty().items():
                if value is None:
                    self._from_source.pop(key, None)
                else:
                    self._from_source[key] = value
                self._dirty.add(key)
        for key in self._dirty:
            if key in self._from_source or (key in self._services and key in self._backends):
                self._store.set(key, self._value(key))
            else:
                self._store.delete(key)
                if key in self._services and not self._said_no_backends:
                    self._said_no_backends = True
                    log.info(
                        "service %s not programmed until its backends arrive"
                        " (ServiceBackendsUpdate): Felix sends Services but never their"
                        " backends, and its own dataplane leaves services to kube-proxy;"
                        " --services-source kubernetes programs them from the API (said once)",
                        key,
                    )
        self._dirty.clear()
        changes = self._store.commit()
        for key in sorted_keys(changes.deletes):
            self._sink.remove_service(key)
        for key in sorted_keys(changes.upserts):
            self._sink.set_service(changes.upserts[key])
