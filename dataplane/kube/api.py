"""The two calls a reflector makes: a page of a list, and a watch.

Over ``httpx.AsyncClient``, which runs under trio (through anyio), so the
reflector shares the driver's loop and never blocks the Felix pipe. The
answers are JSON as the API server sends them; what they mean is the
caller's business. Failures come out as three errors:

* :class:`ExpiredError`: 410 Gone, as an HTTP status or as a watch's
  ``ERROR`` event with code 410 ("too old resource version"): relist.
* :class:`ApiError`: any other answer that is not the data asked for
  (a status >= 300, a watch ``ERROR`` event, a body that is not JSON).
* :class:`TransportError`: no answer (connect refused, TLS, a cut
  stream, a read that timed out).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from dataplane.errors import DataplaneError
from dataplane.kube.connection import Connection

__all__ = ["ApiClient", "ApiError", "ExpiredError", "Page", "TransportError", "WatchEvent"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
LIST_TIMEOUT = 60.0
# A watch is closed by the server after timeoutSeconds; a read that waits
# this much longer means the connection died without a word.
WATCH_GRACE = 30.0


class KubeApiError(DataplaneError):
    """Base of the API client's errors."""


class ApiError(KubeApiError):
    def __init__(self, what: str, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"{what}: {status} {message}")


class ExpiredError(ApiError):
    """410: the resource version asked for is older than the server keeps."""


class TransportError(KubeApiError):
    """No answer came (connect, TLS, a cut stream, a timeout)."""


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


def _status_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200] or response.reason_phrase
    if isinstance(body, dict) and body.get("kind") == "Status":
        return str(body.get("message", ""))[:200]
    return response.reason_phrase


class ApiClient:
    """One HTTP/1.1 client to the API server; ``transport`` is for tests' fakes."""

    def __init__(
        self, connection: Connection, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.connection = connection
        self.requests = 0  # every request sent, for the metrics and the benchmark
        self._extensions = (
            {"sni_hostname": connection.tls_server_name} if connection.tls_server_name else {}
        )
        self._client = httpx.AsyncClient(
            base_url=connection.server,
            verify=connection.ssl_context() if transport is None else True,
            transport=transport,
            timeout=httpx.Timeout(LIST_TIMEOUT, connect=CONNECT_TIMEOUT),
            headers={"Accept": "application/json"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def list_page(self, path: str, params: dict[str, str]) -> Page:
        """One page of a list (``limit``/``continue`` in ``params``).

        Raises:
            ExpiredError: the continue token expired (410).
            ApiError, TransportError: see the module docstring.
        """
        what = f"list {path}"
        # The body is read into a buffer of our own, never cached on the
        # response: httpx's response sits in reference cycles, so a body it
        # holds (up to a megabyte a page) lives until the collector runs,
        # and the driver holds the collector off until its first apply
        # (core/heap.py) -- at 10,000 services the pages were 20 MB of it.
        try:
            async with self._open(what, path, params) as response:
                content = b"".join([chunk async for chunk in response.aiter_bytes()])
        except httpx.TransportError as exc:
            raise TransportError(f"{what}: {type(exc).__name__}: {exc}") from exc
        try:
            body = json.loads(content)
            meta = body["metadata"]
            return Page(
                list(body.get("items") or []),
                str(meta["resourceVersion"]),
                str(meta.get("continue") or ""),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ApiError(what, response.status_code, f"not a list: {exc}") from exc

    @asynccontextmanager
    async def watch(
        self, path: str, params: dict[str, str], timeout_seconds: int
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """A watch from ``params['resourceVersion']``: yields its events as they come.

        The iterator ends when the server closes the watch (``timeoutSeconds``).

        Raises:
            ExpiredError: 410, as a status or an ``ERROR`` event.
            ApiError, TransportError: see the module docstring.
        """
        query = {**params, "watch": "true", "timeoutSeconds": str(timeout_seconds)}
        timeout = httpx.Timeout(timeout_seconds + WATCH_GRACE, connect=CONNECT_TIMEOUT)
        async with self._open(f"watch {path}", path, query, timeout) as response:
            yield _events(response, path)

    @asynccontextmanager
    async def _open(
        self,
        what: str,
        path: str,
        params: dict[str, str],
        timeout: httpx.Timeout | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """A GET whose body is the caller's to stream; an error status raised
        (its body read for the message), the response closed after.

        Raises:
            ExpiredError, ApiError: an error status.
            TransportError: no answer came.
        """
        self.requests += 1
        request = self._client.build_request(
            "GET",
            path,
            params=params,
            headers=self.connection.headers(),
            extensions=self._extensions,
            timeout=self._client.timeout if timeout is None else timeout,
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise TransportError(f"{what}: {type(exc).__name__}: {exc}") from exc
        log.debug("%s: %s %s", what, response.status_code, request.url)
        try:
            if response.status_code >= 300:
                await response.aread()
                raise _status_error(response, what)
            yield response
        finally:
            await response.aclose()


def _status_error(response: httpx.Response, what: str) -> ApiError:
    """The error an error status (>= 300) is: 410 expired, any other refused."""
    error = ExpiredError if response.status_code == 410 else ApiError
    return error(what, response.status_code, _status_message(response))


async def _events(response: httpx.Response, path: str) -> AsyncIterator[WatchEvent]:
    what = f"watch {path}"
    try:
        async for line in response.aiter_lines():
            if not line.strip():
                continue
            try:
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if not isinstance(obj, dict) or not isinstance(kind, str):
                    raise TypeError("type or object missing")
            except (ValueError, KeyError, TypeError) as exc:
                raise ApiError(what, response.status_code, f"not a watch event: {exc}") from exc
            if kind == "ERROR":
                code = int(obj.get("code") or 500)
                error = ExpiredError if code == 410 else ApiError
                raise error(what, code, str(obj.get("message", ""))[:200])
            yield WatchEvent(kind, obj)
    except httpx.TransportError as exc:
        raise TransportError(f"{what}: {type(exc).__name__}: {exc}") from exc
