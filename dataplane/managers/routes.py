"""RoutesManager: Felix's routes and VXLAN tunnel endpoints, as model values.

``RouteUpdate``/``RouteRemove`` are keyed by destination CIDR and
``VXLANTunnelEndpointUpdate``/``Remove`` by node name; each update replaces
the previous value for its key. Two diff stores turn each apply's values
into what really changed, so a platform is handed a route or VTEP only when
it is new, different or gone (Felix resends unchanged routes whenever a
block's neighbours move).

Every VTEP is handed over, this node's own included: Linux needs its own to
configure the tunnel device; a platform that only routes to other nodes
(Windows) skips it there. Deciding which routes to program (remote VXLAN
blocks on Windows) is likewise the platform's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from google.protobuf.message import Message

from dataplane.core.diffstore import DiffStore
from dataplane.core.platform import RoutesSink
from dataplane.managers import convert_routes as convert
from dataplane.model.routes import Route, Vtep
from dataplane.wire._pb import felixbackend_pb2 as pb

__all__ = ["RoutesManager"]


class RoutesManager:
    def __init__(self, sink: RoutesSink) -> None:
        self._sink = sink
        self._routes: DiffStore[str, Route] = DiffStore()
        self._vteps: DiffStore[str, Vtep] = DiffStore()

    def on_update(self, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(self, msg)

    # Each handler converts (and so validates) before it stores anything:
    # a rejected message leaves no trace.

    def _on_route_update(self, msg: pb.RouteUpdate) -> None:
        value = convert.route(msg)
        self._routes.set(value.dst, value)

    def _on_route_remove(self, msg: pb.RouteRemove) -> None:
        self._routes.delete(convert.route_dst(msg.dst))

    def _on_vtep_update(self, msg: pb.VXLANTunnelEndpointUpdate) -> None:
        value = convert.vtep(msg)
        self._vteps.set(value.node, value)

    def _on_vtep_remove(self, msg: pb.VXLANTunnelEndpointRemove) -> None:
        self._vteps.delete(convert.vtep_node(msg.node))

    _handlers: ClassVar[dict[type, Callable[[RoutesManager, Any], None]]] = {
        pb.RouteUpdate: _on_route_update,
        pb.RouteRemove: _on_route_remove,
        pb.VXLANTunnelEndpointUpdate: _on_vtep_update,
        pb.VXLANTunnelEndpointRemove: _on_vtep_remove,
    }
    handles: ClassVar[frozenset[type]] = frozenset(_handlers)

    def complete_deferred_work(self) -> None:
        # Removals first, then VTEPs before the routes that go through them,
        # so a platform that programs as it is handed things never routes
        # via a tunnel endpoint it has not been given yet.
        routes = self._routes.commit()
        vteps = self._vteps.commit()
        for dst in sorted(routes.deletes):
            self._sink.remove_route(dst)
        for node in sorted(vteps.deletes):
            self._sink.remove_vtep(node)
        for node in sorted(vteps.upserts):
            self._sink.set_vtep(vteps.upserts[node])
        for dst in sorted(routes.upserts):
            self._sink.set_route(routes.upserts[dst])
