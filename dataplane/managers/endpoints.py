"""EndpointManager: local workload and host endpoints, as model values.

Each endpoint arrives with its ordered per-tier policy lists for ingress and
egress (and, for host endpoints, the untracked, pre-DNAT and forward tiers);
the manager validates and converts them into the shared
:class:`PolicyIndex`, which resolves each endpoint's effective policy. At
each apply the platform gets exactly the endpoints whose value or effective
policy changed (a policy or profile they name came or went).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from google.protobuf.message import Message

from dataplane.core.platform import EndpointsSink
from dataplane.managers import convert
from dataplane.managers.index import PolicyIndex
from dataplane.wire._pb import felixbackend_pb2 as pb


class EndpointManager:
    def __init__(self, sink: EndpointsSink, index: PolicyIndex) -> None:
        self._sink = sink
        self._index = index

    def on_update(self, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def _on_workload_update(self, msg: pb.WorkloadEndpointUpdate) -> None:
        key = convert.workload_key(msg.id)
        self._index.set_endpoint(key, convert.workload_endpoint(key, msg.endpoint))

    def _on_workload_remove(self, msg: pb.WorkloadEndpointRemove) -> None:
        self._index.set_endpoint(convert.workload_key(msg.id), None)

    def _on_host_update(self, msg: pb.HostEndpointUpdate) -> None:
        key = convert.host_key(msg.id)
        self._index.set_endpoint(key, convert.host_endpoint(key, msg.endpoint))

    def _on_host_remove(self, msg: pb.HostEndpointRemove) -> None:
        self._index.set_endpoint(convert.host_key(msg.id), None)

    _handlers: ClassVar[dict[type, Callable[[EndpointManager, Any], None]]] = {
        pb.WorkloadEndpointUpdate: _on_workload_update,
        pb.WorkloadEndpointRemove: _on_workload_remove,
        pb.HostEndpointUpdate: _on_host_update,
        pb.HostEndpointRemove: _on_host_remove,
    }
    handles: ClassVar[frozenset[type]] = frozenset(_handlers)

    def complete_deferred_work(self) -> None:
        self._index.flush_endpoints(self._sink)
