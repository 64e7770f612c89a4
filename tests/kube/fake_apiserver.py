"""A model of kube-apiserver's list and watch, as an httpx transport.

Semantics, held to the real API server by tests/kube/test_api_contract.py:

* one revision counter for every write (etcd's); an object's
  ``resourceVersion`` is the revision that last wrote it;
* a list is a snapshot at the revision it was asked at: ``limit`` pages it,
  each page says the first page's ``resourceVersion``, ``continue`` carries
  the snapshot; a continue token whose revision was compacted is 410;
* ``labelSelector`` terms ``key``, ``!key``, ``key=value``, ``key!=value``;
* a watch from revision R sends every later change in order (ADDED,
  MODIFIED, DELETED with the object at that revision), then waits for more
  until ``timeoutSeconds`` and ends; a watch from a compacted R is a 200
  whose only event is ``ERROR`` with code 410 ("too old resource
  version"), as an etcd-backed watch answers; with ``allowWatchBookmarks``
  a ``BOOKMARK`` with the current revision every ``bookmark_every`` seconds.

Faults a test turns on: the next requests answered with a status, a body
that is not JSON, the server down (connect errors), every open watch cut
mid-stream. Time is trio's (MockClock in tests).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx
import trio

__all__ = ["FakeApiServer"]


def _matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class _Change:
    revision: int
    type: str
    collection: str
    object: dict[str, Any]


@dataclass
class FakeApiServer:
    bookmark_every: float = 60.0
    revision: int = 1
    compacted: int = 0
    objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    history: list[_Change] = field(default_factory=list)  # every change, kept whole
    down: bool = False
    refused_at: list[float] = field(default_factory=list)  # when a request met `down`
    requests: int = 0
    _statuses: list[int] = field(default_factory=list)
    _garbage: int = 0
    _changed: trio.Event = field(default_factory=trio.Event)
    _cut: trio.Event = field(default_factory=trio.Event)

    # --- writes (what a test, or a controller, does) -------------------------------------

    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", ""), meta["name"])
        self.revision += 1
        meta["resourceVersion"] = str(self.revision)
        store = self.objects.setdefault(collection, {})
        kind = "MODIFIED" if key in store else "ADDED"
        store[key] = obj
        self._record(kind, collection, obj)
        return obj

    def remove(self, collection: str, namespace: str, name: str) -> None:
        obj = copy.deepcopy(self.objects[collection].pop((namespace, name)))
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        self._record("DELETED", collection, obj)

    def compact(self) -> None:
        """Forget history up to now, as etcd compaction does (for watches and lists)."""
        self.compacted = self.revision

    def fail_next(self, *statuses: int) -> None:
        self._statuses.extend(statuses)

    def garbage_next(self, count: int = 1) -> None:
        self._garbage += count

    def cut_watches(self) -> None:
        self._cut.set()
        self._cut = trio.Event()

    def _record(self, kind: str, collection: str, obj: dict[str, Any]) -> None:
        self.history.append(_Change(self.revision, kind, collection, copy.deepcopy(obj)))
        self._changed.set()
        self._changed = trio.Event()

    # --- the transport -------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        if self.down:
            self.refused_at.append(trio.current_time())
            raise httpx.ConnectError("connection refused", request=request)
        self.requests += 1
        if self._statuses:
            code = self._statuses.pop(0)
            return httpx.Response(code, json=_status(code, "injected failure"))
        if self._garbage:
            self._garbage -= 1
            return httpx.Response(200, content=b"<html>not the API</html>")
        params = {k: v[-1] for k, v in parse_qs(request.url.query.decode()).items()}
        collection, namespace = request.url.path, None
        scoped = _NAMESPACED.fullmatch(collection)
        if scoped:  # /api/v1/namespaces/NS/services: the collection, in one namespace
            collection, namespace = f"{scoped[1]}/{scoped[3]}", scoped[2]
        if params.get("watch") == "true":
            events = self._watch(collection, namespace, params)
            return httpx.Response(200, stream=_Stream(events))
        return self._list(collection, namespace, params)

    def _list(
        self, collection: str, namespace: str | None, params: dict[str, str]
    ) -> httpx.Response:
        selector = params.get("labelSelector", "")
        token = params.get("continue")
        if token:
            snapshot, offset = (int(x) for x in base64.b64decode(token).decode().split(":"))
            if snapshot < self.compacted:
                return httpx.Response(410, json=_status(410, "continue token expired"))
        else:
            snapshot, offset = self.revision, 0
        items = sorted(
            (o for o in self._at(collection, snapshot) if _wanted(o, namespace, selector)),
            key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )
        limit = int(params.get("limit") or 0) or len(items) or 1
        page = items[offset : offset + limit]
        more = offset + limit < len(items)
        meta: dict[str, Any] = {"resourceVersion": str(snapshot)}
        if more:
            meta["continue"] = base64.b64encode(f"{snapshot}:{offset + limit}".encode()).decode()
        return httpx.Response(200, json={"kind": "List", "metadata": meta, "items": page})

    def _at(self, collection: str, revision: int) -> list[dict[str, Any]]:
        """The collection as it was at ``revision``: the changes up to it, replayed."""
        state: dict[tuple[str, str], dict[str, Any]] = {}
        for change in self.history:
            if change.revision > revision:
                break
            if change.collection != collection:
                continue
            meta = change.object["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            if change.type == "DELETED":
                state.pop(key, None)
            else:
                state[key] = change.object
        return [copy.deepcopy(o) for o in state.values()]

    async def _watch(
        self, collection: str, namespace: str | None, params: dict[str, str]
    ) -> AsyncIterator[bytes]:
        since = int(params.get("resourceVersion") or self.revision)
        selector = params.get("labelSelector", "")
        bookmarks = params.get("allowWatchBookmarks") == "true"
        deadline = trio.current_time() + float(params.get("timeoutSeconds") or 1800)
        if since < self.compacted:
            yield _line("ERROR", _status(410, "too old resource version", reason="Expired"))
            return
        next_bookmark = trio.current_time() + self.bookmark_every
        cut = self._cut
        while True:
            for change in [c for c in self.history if c.revision > since]:
                since = change.revision
                if change.collection == collection and _wanted(change.object, namespace, selector):
                    yield _line(change.type, change.object)
            wake = min(deadline, next_bookmark if bookmarks else deadline)
            changed = self._changed
            with trio.move_on_at(wake):
                async with trio.open_nursery() as nursery:

                    async def wait(event: trio.Event) -> None:
                        await event.wait()
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(wait, changed)
                    nursery.start_soon(wait, cut)
            if cut.is_set():
                raise httpx.ReadError("connection reset by peer")
            now = trio.current_time()
            if now >= deadline:
                return
            if bookmarks and now >= next_bookmark:
                next_bookmark = now + self.bookmark_every
                yield _line("BOOKMARK", {"metadata": {"resourceVersion": str(self.revision)}})


_NAMESPACED = re.compile(r"(/api/v1|/apis/[^/]+/v1)/namespaces/([^/]+)/([a-z]+)")


def _wanted(obj: dict[str, Any], namespace: str | None, selector: str) -> bool:
    meta = obj["metadata"]
    if namespace is not None and meta.get("namespace") != namespace:
        return False
    return _matches(selector, meta.get("labels") or {})


def _status(code: int, message: str, reason: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


class _Stream(httpx.AsyncByteStream):
    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        await self._chunks.aclose()  # type: ignore[attr-defined]
