"""Endpoint oper-status reporting: model statuses -> Felix status messages.

After every successful apply the loop asks the platform for the status of
each endpoint; the reporter sends only what changed since it last reported,
plus a remove for each endpoint that disappeared, as Felix expects.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.message import Message

from dataplane.core.platform import EndpointKey
from dataplane.model import EndpointStatus, HostEndpointKey, WorkloadEndpointKey
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["StatusReporter"]


def _workload_id(key: WorkloadEndpointKey) -> pb.WorkloadEndpointID:
    return pb.WorkloadEndpointID(
        orchestrator_id=key.orchestrator_id,
        workload_id=key.workload_id,
        endpoint_id=key.endpoint_id,
    )


def _update(key: EndpointKey, status: EndpointStatus) -> Message:
    body = pb.EndpointStatus(status=status.value)
    if isinstance(key, HostEndpointKey):
        return pb.HostEndpointStatusUpdate(
            id=pb.HostEndpointID(endpoint_id=key.endpoint_id), status=body
        )
    return pb.WorkloadEndpointStatusUpdate(id=_workload_id(key), status=body)


def _remove(key: EndpointKey) -> Message:
    if isinstance(key, HostEndpointKey):
        return pb.HostEndpointStatusRemove(id=pb.HostEndpointID(endpoint_id=key.endpoint_id))
    return pb.WorkloadEndpointStatusRemove(id=_workload_id(key))


class StatusReporter:
    def __init__(self) -> None:
        self._reported: dict[EndpointKey, EndpointStatus] = {}

    def changes(self, current: Mapping[EndpointKey, EndpointStatus]) -> list[Message]:
        """Status payloads that bring Felix's view up to ``current``."""
        out = [
            _update(key, status)
            for key, status in current.items()
            if self._reported.get(key) is not status
        ]
        out.extend(_remove(key) for key in self._reported if key not in current)
        self._reported = dict(current)
        return out
