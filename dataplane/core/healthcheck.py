"""Health-check node ports for externalTrafficPolicy=Local services.

As kube-proxy does: each such service gets an HTTP server on its
``healthCheckNodePort`` answering any request with JSON naming the service,
its count of local endpoints and whether the proxy is healthy -- 200 when
there is at least one local endpoint and the proxy is healthy, 503
otherwise -- so an external load balancer sends traffic only to nodes that
can serve it locally. Shared by both platforms: Linux listens on every
address, Windows on the node's (``--host-address``) where given.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping

import trio

from dataplane.model.services import ServiceKey

__all__ = ["HealthCheckServer"]

log = logging.getLogger(__name__)

_MAX_REQUEST = 8192


class HealthCheckServer:
    """The listeners, one per wanted port (on each of ``addresses``; none: all).

    ``healthy`` says whether the proxy itself is (kube-proxy's
    ``serviceProxyHealthy``: its rules are programmed); read per request.
    """

    def __init__(
        self, addresses: tuple[str, ...] = (), healthy: Callable[[], bool] = lambda: True
    ) -> None:
        self._addresses = addresses
        self._healthy = healthy
        self._wanted: dict[int, tuple[ServiceKey, int]] = {}
        self._running: dict[int, trio.CancelScope] = {}
        self._changed = trio.Event()

    def update(self, wanted: Mapping[int, tuple[ServiceKey, int]]) -> None:
        """port -> (service, local endpoint count); listeners follow at once."""
        if dict(wanted) != self._wanted:
            self._wanted = dict(wanted)
            self._changed.set()

    def response(self, port: int) -> bytes:
        key, local = self._wanted.get(port, (ServiceKey("", ""), 0))
        healthy = self._healthy()
        body = json.dumps(
            {
                "service": {"namespace": key.namespace, "name": key.name},
                "localEndpoints": local,
                "serviceProxyHealthy": healthy,
            }
        ).encode()
        status = "200 OK" if local > 0 and healthy else "503 Service Unavailable"
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"X-Content-Type-Options: nosniff\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        return head.encode() + body

    async def _handle(self, port: int, stream: trio.SocketStream) -> None:
        with trio.move_on_after(5):  # a slow client cannot hold the server
            request = b""
            while b"\r\n\r\n" not in request and len(request) < _MAX_REQUEST:
                chunk = await stream.receive_some(1024)
                if not chunk:
                    break
                request += chunk
            await stream.send_all(self.response(port))
        await stream.aclose()

    async def _listen(self, port: int, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            listeners: list[trio.SocketListener] = []
            try:
                for host in self._addresses or (None,):
                    listeners += await trio.open_tcp_listeners(port, host=host)
            except OSError as exc:
                for listener in listeners:  # those of the addresses before
                    await listener.aclose()
                log.error("health-check node port %d: cannot listen: %s", port, exc)
                task_status.started(scope)
                return
            task_status.started(scope)

            async def handler(stream: trio.SocketStream) -> None:
                await self._handle(port, stream)

            await trio.serve_listeners(handler, listeners)

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                for port in [p for p in self._running if p not in self._wanted]:
                    self._running.pop(port).cancel()
                for port in self._wanted:
                    if port not in self._running:
                        self._running[port] = await nursery.start(self._listen, port)
                await self._changed.wait()
                self._changed = trio.Event()
