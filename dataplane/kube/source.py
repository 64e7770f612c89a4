"""The Kubernetes API as the node's one source of services.

Three reflectors — Services (with kube-proxy's label selector), EndpointSlices,
and this node's own Node object (for its zone) — feed one
:class:`KubeServices`, which keeps every service's model value and says
which changed. The services manager takes them from here instead of from
``ServiceUpdate``/``ServiceBackendsUpdate`` messages; the loop programs
nothing until all three first lists are complete (:attr:`synced`).

A Service or EndpointSlice the model cannot take is refused alone, with one
line naming it, the field and the value: its service keeps the last value
that was good (or has none), every other service goes on. Nothing here does
I/O but the reflectors' requests.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from dataplane.errors import InputError
from dataplane.kube import endpoints as eps
from dataplane.kube import services as svcs
from dataplane.kube.api import ApiClient
from dataplane.kube.reflector import ObjectKey, Reflector, Resource
from dataplane.model.services import Service, ServiceKey, sorted_keys

__all__ = ["PROXY_SELECTOR", "KubeServices", "ServiceState"]

log = logging.getLogger(__name__)

# kube-proxy's: services another proxy owns, and headless ones, are not ours.
PROXY_SELECTOR = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"
ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(slots=True)
class ServiceState:
    """One service as the API has it: the model value, or why there is none."""

    service: Service | None = None  # None: not proxied, or refused before any good value
    refused: str | None = None  # the last refusal, one line
    slices: dict[str, eps.Slice] = field(default_factory=dict)  # by slice name


class _Handler:
    """One reflector's handler: its upserts and deletes go to the owner."""

    def __init__(
        self,
        upsert: Callable[[ObjectKey, dict[str, Any]], None],
        delete: Callable[[ObjectKey], None],
        on_synced: Callable[[], None],
    ) -> None:
        self.upsert = upsert
        self.delete = delete
        self.on_synced = on_synced
        self.is_synced = False

    def synced(self) -> None:
        self.is_synced = True
        self.on_synced()  # the last of the three may let the loop program


class KubeServices:
    """Services with their backends, for this node, from the API."""

    def __init__(
        self,
        api: ApiClient,
        node_name: str,
        node_port_ranges: Callable[[], Sequence[tuple[int, int]]],
        changed: Callable[[], None] = lambda: None,
        arrived: Callable[[], None] = lambda: None,
    ) -> None:
        self.api = api
        self.arrived = arrived  # a change arrived (for the event-to-kernel latency)
        self.node_name = node_name
        self.node_port_ranges = node_port_ranges
        self.changed = changed
        self.zone = ""
        self.states: dict[ServiceKey, ServiceState] = {}
        self.dirty: set[ServiceKey] = set()
        self.refusals = 0
        # Each Service as the model reads it, compact JSON: kept for a requeue
        # (a new node-port range) to parse again, and 10x smaller than the
        # decoded objects (23 MB of them at 10,000 services).
        self._raw_services: dict[ServiceKey, str] = {}
        self._slice_owner: dict[ObjectKey, ServiceKey] = {}
        self._services = _Handler(self._service_upsert, self._service_delete, self._wake)
        self._slices = _Handler(self._slice_upsert, self._slice_delete, self._wake)
        self._node = _Handler(self._node_upsert, lambda _k: None, self._wake)
        node = Resource("/api/v1/nodes", field_selector=f"metadata.name={node_name}", kind="node")
        self.reflectors = (
            Reflector(api, Resource("/api/v1/services", PROXY_SELECTOR), self._services),
            Reflector(
                api,
                Resource("/apis/discovery.k8s.io/v1/endpointslices", kind="endpointslices"),
                self._slices,
            ),
            Reflector(api, node, self._node),
        )

    def _wake(self) -> None:
        self.changed()

    @property
    def synced(self) -> bool:
        return self._services.is_synced and self._slices.is_synced and self._node.is_synced

    def node(self) -> eps.NodeInfo:
        return eps.NodeInfo(self.node_name, self.zone)

    async def run(self) -> None:
        """Follow the API until cancelled."""
        async with trio.open_nursery() as nursery:
            for reflector in self.reflectors:
                nursery.start_soon(reflector.run)

    # --- what the reflectors say ---------------------------------------------------------

    def _service_upsert(self, key: ObjectKey, obj: dict[str, Any]) -> None:
        skey = ServiceKey(*key)
        # Only what the model reads (a requeue parses it again): not the
        # managedFields and the rest, a third of the memory at 10,000.
        meta = obj.get("metadata") or {}
        raw = {
            "metadata": {"namespace": meta.get("namespace"), "name": meta.get("name")},
            "spec": obj.get("spec"),
            "status": obj.get("status"),
        }
        self._raw_services[skey] = json.dumps(raw, separators=(",", ":"))
        self._rebuild(skey, raw)

    def _service_delete(self, key: ObjectKey) -> None:
        skey = ServiceKey(*key)
        self._raw_services.pop(skey, None)
        state = self.states.get(skey)
        if state is not None:
            state.service, state.refused = None, None
            if not state.slices:
                del self.states[skey]
        self._mark(skey)

    def _slice_upsert(self, key: ObjectKey, obj: dict[str, Any]) -> None:
        try:
            parsed = eps.parse_slice(obj)
        except InputError as exc:
            self._refuse("EndpointSlice", key, exc)
            return  # the slice's last good value stays
        owner = parsed.service if parsed is not None else None
        if self._slice_owner.get(key) != owner:
            self._slice_delete(key)  # it moved to another service, or is FQDN now
        if parsed is None:
            return
        self._slice_owner[key] = parsed.service
        self.states.setdefault(parsed.service, ServiceState()).slices[parsed.name] = parsed
        self._slices_changed(parsed.service)

    def _slice_delete(self, key: ObjectKey) -> None:
        owner = self._slice_owner.pop(key, None)
        if owner is None:
            return
        state = self.states.get(owner)
        if state is not None:
            state.slices.pop(key[1], None)
            self._slices_changed(owner)

    def _node_upsert(self, key: ObjectKey, obj: dict[str, Any]) -> None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        zone = str(labels.get(ZONE_LABEL) or "")
        if zone != self.zone:
            log.info("this node's zone is %r (label %s)", zone, ZONE_LABEL)
            self.zone = zone
            for skey in self.states:
                self._mark(skey)

    # --- the model ---------------------------------------------------------------------

    def _rebuild(self, skey: ServiceKey, raw: dict[str, Any]) -> None:
        state = self.states.setdefault(skey, ServiceState())
        try:
            state.service = svcs.service(raw, self.node_port_ranges())
            state.refused = None
        except InputError as exc:
            state.refused = str(exc)
            self._refuse("Service", (skey.namespace, skey.name), exc)
            return  # the last good value stays
        self._mark(skey)

    def _slices_changed(self, skey: ServiceKey) -> None:
        """Its slices changed, the Service did not: no need to parse it again."""
        state = self.states[skey]
        if state.service is None and not state.slices and skey not in self._raw_services:
            del self.states[skey]
        self._mark(skey)

    def _refuse(self, kind: str, key: ObjectKey, exc: InputError) -> None:
        self.refusals += 1
        log.error("%s %s/%s refused: %s", kind, key[0], key[1], exc)

    def _mark(self, skey: ServiceKey) -> None:
        self.dirty.add(skey)
        self.arrived()
        self.changed()

    def value(self, skey: ServiceKey) -> Service | None:
        """The service's model value with its backends for this node; None: none."""
        state = self.states.get(skey)
        if state is None or state.service is None:
            return None
        slices = state.slices.values()
        return replace(
            state.service,
            backends=eps.backends(slices, self.node()),
            not_ready=eps.not_ready(slices),
        )

    def take_dirty(self) -> dict[ServiceKey, Service | None]:
        """What changed since the last call: each service's value, or None (gone)."""
        out = {skey: self.value(skey) for skey in sorted_keys(self.dirty)}
        self.dirty.clear()
        return out

    def requeue_all(self) -> None:
        """Every service again (a resync, or the node ports' range changed)."""
        for skey, text in list(self._raw_services.items()):
            self._rebuild(skey, json.loads(text))
        self.dirty |= set(self.states)
