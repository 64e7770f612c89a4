"""Endpoint oper-status reporting: model statuses -> Felix status messages.

After every successful apply the loop asks the platform for the status of
each endpoint; the reporter sends only what changed since it last reported,
plus a remove for each endpoint that disappeared, as Felix expects.

A workload's update carries the endpoint as Felix sent it (field 3,
``endpoint``), as Felix's own dataplane does: the endpoint-status file
(``<prefix>/endpoint-status/<id>``, the file the CNI plugin waits for) is
made from its interface, MAC, addresses and BGP peer. Felix's reporter
would write it but never does for an external driver (it never sees our
``DataplaneInSync``), so :mod:`dataplane.core.status_files` writes it from
these same updates. So the reporter keeps each workload endpoint as last
accepted (:meth:`StatusReporter.record`) and reports again when it
changes, not only when the status does, or the file would go stale.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.message import Message

from dataplane.core.platform import EndpointKey
from dataplane.core.status_book import StatusBook
from dataplane.model import EndpointStatus, HostEndpointKey, WorkloadEndpointKey
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["StatusReporter"]


def _workload_id(key: WorkloadEndpointKey) -> pb.WorkloadEndpointID:
    return pb.WorkloadEndpointID(
        orchestrator_id=key.orchestrator_id,
        workload_id=key.workload_id,
        endpoint_id=key.endpoint_id,
    )


def _remove(key: EndpointKey) -> Message:
    if isinstance(key, HostEndpointKey):
        return pb.HostEndpointStatusRemove(id=pb.HostEndpointID(endpoint_id=key.endpoint_id))
    return pb.WorkloadEndpointStatusRemove(id=_workload_id(key))


class StatusReporter:
    def __init__(self) -> None:
        # What Felix was last told: the status, and which version of the
        # workload endpoint went with it.
        self._reported: dict[EndpointKey, tuple[EndpointStatus, int]] = {}
        self._endpoints: dict[WorkloadEndpointKey, tuple[int, pb.WorkloadEndpoint]] = {}
        self._version = 0
        # A StatusBook read before, and where: the next look compares only
        # the endpoints written since, and those recorded since.
        self._book: StatusBook | None = None
        self._position = 0
        self._recorded: dict[WorkloadEndpointKey, None] = {}

    def record(self, msg: pb.WorkloadEndpointUpdate | pb.WorkloadEndpointRemove) -> None:
        """Keep a workload endpoint as accepted (call after the managers took it)."""
        wid = msg.id
        key = WorkloadEndpointKey(wid.orchestrator_id, wid.workload_id, wid.endpoint_id)
        self._recorded[key] = None
        if isinstance(msg, pb.WorkloadEndpointRemove):
            self._endpoints.pop(key, None)
            return
        self._version += 1
        self._endpoints[key] = (self._version, msg.endpoint)

    def _update(self, key: EndpointKey, status: EndpointStatus) -> Message:
        body = pb.EndpointStatus(status=status.value)
        if isinstance(key, HostEndpointKey):
            return pb.HostEndpointStatusUpdate(
                id=pb.HostEndpointID(endpoint_id=key.endpoint_id), status=body
            )
        update = pb.WorkloadEndpointStatusUpdate(id=_workload_id(key), status=body)
        recorded = self._endpoints.get(key)
        if recorded is not None:
            update.endpoint.CopyFrom(recorded[1])
        return update

    def _version_of(self, key: EndpointKey) -> int:
        if isinstance(key, HostEndpointKey):
            return 0
        recorded = self._endpoints.get(key)
        return 0 if recorded is None else recorded[0]

    def changes(self, current: Mapping[EndpointKey, EndpointStatus]) -> list[Message]:
        """Status payloads that bring Felix's view up to ``current``."""
        recorded, self._recorded = self._recorded, {}
        if isinstance(current, StatusBook):
            since = current.changed_since(self._position) if current is self._book else None
            self._book, self._position = current, current.position
            if since is not None:
                return self._changes_of(current, [*since, *recorded])
        else:
            self._book = None
        reported = {key: (status, self._version_of(key)) for key, status in current.items()}
        out = [
            self._update(key, status)
            for key, (status, version) in reported.items()
            if self._reported.get(key) != (status, version)
        ]
        out.extend(_remove(key) for key in self._reported if key not in current)
        self._reported = reported
        return out

    def _changes_of(
        self, current: Mapping[EndpointKey, EndpointStatus], keys: list[EndpointKey]
    ) -> list[Message]:
        """The same as a full comparison, for only ``keys`` (the rest are as reported)."""
        updates: list[Message] = []
        removes: list[Message] = []
        for key in dict.fromkeys(keys):
            status = current.get(key)
            if status is None:
                if self._reported.pop(key, None) is not None:
                    removes.append(_remove(key))
                continue
            now = (status, self._version_of(key))
            if self._reported.get(key) != now:
                self._reported[key] = now
                updates.append(self._update(key, status))
        return updates + removes
