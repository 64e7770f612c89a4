"""List, then watch, one kind of object, as client-go's reflector does.

Each round: a paged list (``limit``/``continue``, a consistent snapshot at
the first page's ``resourceVersion``) replaces what is known — new or
changed objects (by ``resourceVersion``) upserted page by page as they
come, the rest left alone, and once the list is complete the objects it
no longer holds deleted — then watches from that version with
``allowWatchBookmarks``; every event and bookmark advances the version. A
watch the server closes (its ``timeoutSeconds``, 5 to 10 minutes drawn at
random as client-go does) resumes from the last version without a list.
Only 410 Gone (or a watch ``ERROR`` event of 410, "too old resource
version") lists again. Any other failure — refused, cut, a status, a body
that is not JSON — waits (exponential backoff with jitter) and resumes
from the last version, or lists again if no list ever completed. What is
known is never dropped on a failure: the dataplane keeps what it has.

The handler hears upserts and deletes, and ``synced()`` once, after the
first complete list: nothing before it describes the whole cluster.

Invariants: ``versions`` (each object's ``resourceVersion``, all a relist
needs to tell the difference; the objects themselves go to the handler
and are not kept here) is what the last list and the events since say
(while a list is under way: with the pages so far taken in); the handler
has been told exactly the differences, in order. So during a relist the
dataplane may hold, for a moment, the pages so far beside what was there
before of the objects the list has not reached yet (deleted or not).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from dataplane.kube.api import ApiClient, ApiError, ExpiredError, TransportError

__all__ = ["Handler", "ObjectKey", "Reflector", "Resource", "RetryDelays", "object_key"]

log = logging.getLogger(__name__)

ObjectKey = tuple[str, str]  # (namespace, name)
PAGE_SIZE = 500  # client-go's


def object_key(obj: dict[str, Any]) -> ObjectKey | None:
    """(namespace, name), or None for an object without a name or version."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    name, version = meta.get("name"), meta.get("resourceVersion")
    if not isinstance(name, str) or not name or not isinstance(version, str):
        return None
    namespace = meta.get("namespace") or ""
    return (str(namespace), name)


def _version(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


@dataclass(frozen=True)
class Resource:
    path: str  # the collection, e.g. /api/v1/services
    label_selector: str = ""
    field_selector: str = ""
    kind: str = ""  # for log lines and metrics; the path's last part if empty

    @property
    def name(self) -> str:
        return self.kind or self.path.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class RetryDelays:
    """Exponential backoff with jitter: many nodes must not retry in step."""

    initial: float = 0.8  # client-go's reflector backoff starts at 800 ms
    maximum: float = 30.0
    jitter: float = 1.0  # up to this fraction added, at random

    def delay(self, failures: int, draw: Callable[[], float]) -> float:
        base: float = min(self.maximum, self.initial * 2.0 ** min(failures - 1, 32))
        return base * (1.0 + self.jitter * draw())


class Handler(Protocol):
    def upsert(self, key: ObjectKey, obj: dict[str, Any]) -> None: ...
    def delete(self, key: ObjectKey) -> None: ...
    def synced(self) -> None: ...


class Reflector:
    """Keeps ``versions`` equal to the cluster's, telling ``handler`` each change."""

    def __init__(
        self,
        api: ApiClient,
        resource: Resource,
        handler: Handler,
        *,
        page_size: int = PAGE_SIZE,
        retry: RetryDelays = RetryDelays(),
        draw: Callable[[], float] = random.random,
        watch_seconds: tuple[int, int] = (300, 600),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.resource = resource
        self.handler = handler
        self.page_size = page_size
        self.retry = retry
        self.draw = draw
        self.watch_seconds = watch_seconds
        self.versions: dict[ObjectKey, str] = {}
        self.resource_version: str | None = None
        self.synced = False
        # Since when the source has not been following the cluster (a failed
        # list or watch), None while it is; for /readyz.
        self.broken_since: float | None = None
        # The same moment on the monotonic clock, for /readyz's thread.
        self.broken_at: float | None = None
        self.monotonic = monotonic
        self.last_error: str | None = None
        self.lists = 0  # complete lists
        self.relists = 0  # lists after a 410
        self.watches = 0
        self.events = 0
        self.bad_objects = 0

    async def run(self) -> None:
        """Follow the cluster until cancelled. Never raises for the API's sake."""
        failures = 0
        must_list = True
        while True:
            try:
                if must_list:
                    await self._list()
                    must_list = False
                await self._watch()
                failures = 0
            except ExpiredError as exc:
                self.relists += 1
                must_list = True
                log.info("%s: %s; listing again", self.resource.name, exc)
            except (ApiError, TransportError) as exc:
                failures += 1
                self._broken(str(exc))
                delay = self.retry.delay(failures, self.draw)
                log.warning(
                    "%s: %s; retrying in %.1f s (%s)",
                    self.resource.name,
                    exc,
                    delay,
                    "from the last version" if not must_list else "with a list",
                )
                await trio.sleep(delay)

    def _broken(self, error: str) -> None:
        self.last_error = error
        if self.broken_since is None:
            self.broken_since = trio.current_time()
            self.broken_at = self.monotonic()

    def _healthy(self) -> None:
        if self.broken_since is not None:
            log.info("%s: following the API server again", self.resource.name)
        self.broken_since = None
        self.broken_at = None
        self.last_error = None

    def _params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.resource.label_selector:
            params["labelSelector"] = self.resource.label_selector
        if self.resource.field_selector:
            params["fieldSelector"] = self.resource.field_selector
        return params

    async def _list(self) -> None:
        # Each page is told as it comes and then dropped: holding a whole
        # list of decoded objects (at 10,000 slices, ~100 MB) first would
        # set the process's peak. Only the keys seen are kept, to delete
        # what the list no longer holds once it is complete.
        seen: set[ObjectKey] = set()
        version: str | None = None
        token = ""
        while True:
            params = {**self._params(), "limit": str(self.page_size)}
            if token:
                params["continue"] = token
            page = await self.api.list_page(self.resource.path, params)
            # Every page is of the first page's snapshot.
            version = version or page.resource_version
            for obj in page.items:
                key = self._checked_key(obj)
                if key is not None:
                    seen.add(key)
                    self._upsert_if_changed(key, obj)
            token = page.continue_token
            if not token:
                break
        for key in [k for k in self.versions if k not in seen]:
            del self.versions[key]
            self.handler.delete(key)
        self.resource_version = version
        self.lists += 1
        self._healthy()
        if not self.synced:
            self.synced = True
            log.info("%s: listed %d; synced", self.resource.name, len(seen))
            self.handler.synced()

    def _upsert_if_changed(self, key: ObjectKey, obj: dict[str, Any]) -> None:
        version = _version(obj)
        if self.versions.get(key) != version:
            self.versions[key] = version
            self.handler.upsert(key, obj)

    def _checked_key(self, obj: dict[str, Any]) -> ObjectKey | None:
        key = object_key(obj)
        if key is None:
            self.bad_objects += 1
            log.error(
                "%s: object without metadata.name or resourceVersion skipped: %.200s",
                self.resource.name,
                obj,
            )
        return key

    async def _watch(self) -> None:
        """One watch, until the server ends it."""
        assert self.resource_version is not None
        params = {
            **self._params(),
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
        }
        low, high = self.watch_seconds
        seconds = low + int((high - low) * self.draw())
        self.watches += 1
        async with self.api.watch(self.resource.path, params, seconds) as events:
            self._healthy()
            async for event in events:
                self._event(event.type, event.object)

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        self.events += 1
        if kind == "BOOKMARK":
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if isinstance(version, str) and version:
                self.resource_version = version
            return
        key = self._checked_key(obj)
        if key is None:
            return
        version = self.resource_version = _version(obj)
        if kind == "DELETED":
            if self.versions.pop(key, None) is not None:
                self.handler.delete(key)
        elif kind in ("ADDED", "MODIFIED"):
            self.versions[key] = version
            self.handler.upsert(key, obj)
        else:
            log.warning("%s: unknown watch event type %r ignored", self.resource.name, kind)
