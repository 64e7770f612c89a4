"""The operator's HTTP server: ``/metrics``, ``/livez``, ``/readyz``, ``/state``.

Off unless asked for (``--listen``), on a port of its own: never Felix's
9091 (metrics) or 9099 (health). It runs in a daemon thread and only ever
reads values the main loop has already published (prometheus-client's
thread-safe metrics, the :class:`~dataplane.ops.health.Health` state, the
last :class:`~dataplane.ops.objects.Snapshot`), so a scrape never waits for
the loop and a stuck loop still gets its ``/livez`` 503 served.

``/healthz`` answers as ``/livez`` (kube-proxy serves both). ``/explain``
answers ``explain`` for a live node from the same snapshot.

``/metrics`` is rendered at most once per :data:`METRICS_MAX_AGE` while
no apply ends; a scraper asking more often gets the same page, and the
first scrape after an apply always sees its results. Rendering the registry
is pure Python under the GIL (4.8 ms at 5,000 endpoints), the rest of a
request 0.4 ms, so a scraper every 100 ms costs the process at most 0.8 %
of one core (``benchmarks/bench_scrape_cost.py``); no scrape interval worth
having is shorter than a second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import choose_encoder

from dataplane.ops.address import ListenAddress
from dataplane.ops.objects import Snapshot
from dataplane.ops.observer import Observer
from dataplane.ops.records import state_document

__all__ = ["FELIX_PORTS", "OpsServer"]

log = logging.getLogger(__name__)

# Felix's own Prometheus (9091) and health (9099) ports, on the same host
# network: never ours unless named on purpose.
FELIX_PORTS = frozenset({9091, 9099})
METRICS_MAX_AGE = 1.0


Handler = Callable[[dict[str, list[str]]], tuple[int, dict[str, Any]]]


class OpsServer:
    """The HTTP server of one driver, in a daemon thread.

    Args:
        observer: what is served (metrics registry, health, snapshots).
        address: where to listen (port 0: any free port, see :attr:`port`).
        explain: answers ``/explain`` queries (None: 404).
        metrics_max_age: seconds a rendered ``/metrics`` page is served for.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        observer: Observer,
        address: ListenAddress,
        explain: Handler | None = None,
        *,
        metrics_max_age: float = METRICS_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._observer = observer
        self._explain = explain
        self._max_age = metrics_max_age
        self._clock = clock
        # content type -> (rendered at, the snapshot then current, page)
        self._pages: dict[str, tuple[float, Snapshot, bytes]] = {}
        self._pages_lock = threading.Lock()
        self._state_page: tuple[Snapshot, bytes] | None = None
        handler = self._handler_class()
        family_server = ThreadingHTTPServer
        if ":" in address.host:
            family_server = _V6Server
        self._httpd = family_server((address.host, address.port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="dataplane-ops-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # --- endpoints -----------------------------------------------------------------

    def _state(self) -> bytes:
        """``/state`` of the last published snapshot, rendered once per snapshot.

        A snapshot changes only when an apply ends, and rendering one is
        pure Python under the GIL (≈ 50 ms at 500 endpoints), so repeated
        reads between applies are served the same bytes.
        """
        snap = self._observer.snapshot()
        with self._pages_lock:
            if self._state_page is not None and self._state_page[0] is snap:
                return self._state_page[1]
            body = state_document(snap)
            page = _json_bytes(body)
            self._state_page = (snap, page)
            return page

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            server_version = "dataplane"

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                # A client that went away needs no answer.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    server._route(self, url.path, parse_qs(url.query))

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("http %s", format % args)

        return _Handler

    def _route(
        self, request: BaseHTTPRequestHandler, path: str, query: dict[str, list[str]]
    ) -> None:
        obs = self._observer
        if path == "/metrics":
            encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
            _send(request, 200, self._metrics_page(encoder, content_type), content_type)
        elif path in {"/livez", "/healthz"}:
            report = obs.health.liveness()
            _send_json(request, report.status, report.to_json())
        elif path == "/readyz":
            report = obs.health.readiness()
            _send_json(request, report.status, report.to_json())
        elif path == "/state":
            _send(request, 200, self._state(), "application/json")
        elif path == "/explain" and self._explain is not None:
            status, body = self._explain(query)
            _send_json(request, status, body)
        else:
            _send_json(request, 404, {"error": f"no such path {path!r}"})

    def _metrics_page(self, encoder: Callable[[Any], bytes], content_type: str) -> bytes:
        now, snap = self._clock(), self._observer.snapshot()
        with self._pages_lock:
            cached = self._pages.get(content_type)
            if cached is not None and cached[1] is snap and now - cached[0] < self._max_age:
                return cached[2]
            # Rendered under the lock: parallel scrapers wait for one render
            # rather than each paying for their own.
            if cached is None or cached[1] is not snap:
                self._observer.count_objects(snap)
            page = encoder(self._observer.metrics.registry)
            self._pages[content_type] = (now, snap, page)
            return page


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _send(request: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
    request.send_response(status)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


def _json_bytes(body: object) -> bytes:
    return (json.dumps(body, indent=1) + "\n").encode()


def _send_json(request: BaseHTTPRequestHandler, status: int, body: object) -> None:
    _send(request, status, _json_bytes(body), "application/json")
