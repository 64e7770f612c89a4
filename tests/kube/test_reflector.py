"""The reflector on the fake API server (held to the real one by test_api_contract.py).

Under trio's MockClock: watches that last minutes and backoffs of seconds
take no time.
"""

from __future__ import annotations

import gc
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from dataplane.cli import _setup_logging
from dataplane.kube.api import ApiClient
from dataplane.kube.connection import Connection
from dataplane.kube.reflector import ObjectKey, Reflector, Resource, RetryDelays
from tests.kube.clusters import SERVICES, service
from tests.kube.fake_apiserver import FakeApiServer


class Recorder:
    """The handler: what it was told, in order, and the state that implies."""

    def __init__(self) -> None:
        self.log: list[tuple[str, ObjectKey]] = []
        self.state: dict[ObjectKey, str] = {}  # key -> resourceVersion
        self.synced_at: int | None = None

    def upsert(self, key: ObjectKey, obj: dict[str, Any]) -> None:
        self.log.append(("upsert", key))
        self.state[key] = obj["metadata"]["resourceVersion"]

    def delete(self, key: ObjectKey) -> None:
        self.log.append(("delete", key))
        del self.state[key]

    def synced(self) -> None:
        assert self.synced_at is None
        self.synced_at = len(self.log)


def _truth(server: FakeApiServer) -> dict[ObjectKey, str]:
    return {k: o["metadata"]["resourceVersion"] for k, o in server.objects[SERVICES].items()}


def _run(
    server: FakeApiServer,
    body: Callable[[Reflector, Recorder], Awaitable[None]],
    **options: Any,
) -> tuple[Reflector, Recorder]:
    recorder = Recorder()
    api = ApiClient(
        Connection(server="https://fake.invalid", ca_pem=None, token=lambda: "t"),
        transport=server.transport(),
    )
    reflector = Reflector(api, Resource(SERVICES), recorder, draw=lambda: 0.5, **options)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reflector.run)
            await body(reflector, recorder)
            nursery.cancel_scope.cancel()
        await api.aclose()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return reflector, recorder


async def _until(check: Callable[[], bool]) -> None:
    """Let the reflector run until ``check()`` holds (MockClock: no real time)."""
    with trio.fail_after(3600):
        while not check():
            await trio.sleep(0.01)


def test_the_first_list_is_paged_and_synced_once_with_everything() -> None:
    server = FakeApiServer()
    for i in range(1200):
        server.put(SERVICES, service(f"ns{i % 7}", f"s{i}"))

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: recorder.synced_at is not None)

    reflector, recorder = _run(server, body)
    assert recorder.synced_at == 1200 and recorder.state == _truth(server)
    assert reflector.lists == 1 and server.requests >= 3  # 500 + 500 + 200
    assert reflector.resource_version == str(server.revision)


def test_each_page_is_told_before_the_next_is_asked() -> None:
    """A list's objects are not all held at once (10,000 slices: ~100 MB)."""
    server = FakeApiServer()
    for i in range(5):
        server.put(SERVICES, service("a", f"s{i}"))
    asked_at: list[int] = []  # the server's request count at each upsert

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        told = recorder.upsert

        def upsert(key: ObjectKey, obj: dict[str, Any]) -> None:
            asked_at.append(server.requests)
            told(key, obj)

        recorder.upsert = upsert  # type: ignore[method-assign]
        await _until(lambda: recorder.synced_at is not None)

    _, recorder = _run(server, body, page_size=2)
    assert asked_at == [1, 1, 2, 2, 3] and recorder.state == _truth(server)


class _Streamed(httpx.AsyncByteStream):
    """A body as a connection delivers it: read once, kept by no one after."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        data, self._data = self._data, b""
        yield data


class _Streaming(httpx.AsyncBaseTransport):
    """The fake server's answers streamed, as httpcore's are (a MockTransport's
    responses carry their body from the start)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        answer = await self._inner.handle_async_request(request)
        body = await answer.aread()
        return httpx.Response(answer.status_code, headers=answer.headers, stream=_Streamed(body))


def test_a_page_body_is_not_left_on_a_response_for_the_collector() -> None:
    """The driver holds the collector off until its first apply (core/heap.py),
    and httpx's responses sit in reference cycles: a body cached on one
    (a megabyte a page) would live until then, 20 MB at 10,000 services."""
    server = FakeApiServer()
    for i in range(5):
        server.put(SERVICES, service("a", f"s{i}"))
    api = ApiClient(
        Connection(server="https://fake.invalid", ca_pem=None, token=lambda: "t"),
        transport=_Streaming(server.transport()),
    )

    async def main() -> None:
        page = await api.list_page(SERVICES, {"limit": "500"})
        assert len(page.items) == 5
        await api.aclose()

    gc.collect()
    gc.disable()
    try:
        trio.run(main)
        kept = [o for o in gc.get_objects() if isinstance(o, httpx.Response)]
        bodies = [o for o in kept if getattr(o, "_content", None)]
    finally:
        gc.enable()
    assert kept and not bodies  # the response is still about; its body is not


def test_each_request_is_said_at_debug_by_the_client_not_at_info_by_httpx(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At INFO a start of 10,000 services is not 40 lines of httpx's; at
    DEBUG (a flag, or Felix's LogSeverityScreen on our logger) each request
    is still said, with its status."""
    server = FakeApiServer()
    server.put(SERVICES, service("a", "s0"))
    api = ApiClient(
        Connection(server="https://fake.invalid", ca_pem=None, token=lambda: "t"),
        transport=server.transport(),
    )

    async def main() -> None:
        await api.list_page(SERVICES, {"limit": "500"})
        await api.aclose()

    caplog.set_level(logging.INFO)  # the driver's default level
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        _setup_logging(None)  # as the driver's command line sets it up
        with caplog.at_level(logging.DEBUG, logger="dataplane"):
            trio.run(main)
    finally:
        logging.getLogger("httpx").setLevel(logging.NOTSET)
        root.handlers[:] = handlers
    assert [r.getMessage() for r in caplog.records if r.name.startswith("httpx")] == []
    said = [r.getMessage() for r in caplog.records if r.name == "dataplane.kube.api"]
    assert said == [f"list {SERVICES}: 200 https://fake.invalid{SERVICES}?limit=500"]


def test_events_after_the_list_reach_the_handler_in_order() -> None:
    server = FakeApiServer()
    server.put(SERVICES, service("a", "one"))

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: recorder.synced_at is not None)
        server.put(SERVICES, service("a", "two"))
        server.put(SERVICES, service("a", "one", changed="yes"))
        server.remove(SERVICES, "a", "two")
        await _until(lambda: len(recorder.log) == 4)

    reflector, recorder = _run(server, body)
    assert recorder.log == [
        ("upsert", ("a", "one")),
        ("upsert", ("a", "two")),
        ("upsert", ("a", "one")),
        ("delete", ("a", "two")),
    ]
    assert recorder.state == _truth(server) and reflector.lists == 1


def test_a_cut_watch_resumes_from_the_last_version_without_a_list() -> None:
    server = FakeApiServer()
    server.put(SERVICES, service("a", "one"))

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: reflector.watches == 1)
        server.cut_watches()
        server.put(SERVICES, service("a", "two"))  # while no watch is open
        await _until(lambda: ("a", "two") in recorder.state)

    reflector, recorder = _run(server, body)
    assert reflector.lists == 1 and reflector.watches == 2
    assert recorder.state == _truth(server)


def test_a_closed_watch_resumes_at_once() -> None:
    server = FakeApiServer()

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: reflector.watches == 3)

    started = 0.0

    async def timed(reflector: Reflector, recorder: Recorder) -> None:
        nonlocal started
        started = trio.current_time()
        await body(reflector, recorder)
        assert trio.current_time() - started < 2 * 600  # two full watches, no backoff

    reflector, _ = _run(server, timed)
    assert reflector.lists == 1 and reflector.broken_since is None


def test_410_after_a_compaction_lists_again_and_tells_only_the_difference() -> None:
    server = FakeApiServer()
    for name in ("keep", "change", "vanish"):
        server.put(SERVICES, service("a", name))

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: reflector.watches == 1)
        server.down = True
        server.cut_watches()
        await _until(lambda: reflector.broken_since is not None)
        server.put(SERVICES, service("a", "change", v="2"))
        server.remove(SERVICES, "a", "vanish")
        server.put(SERVICES, service("a", "new"))
        server.compact()
        recorder.log.clear()
        server.down = False
        await _until(lambda: reflector.lists == 2)

    reflector, recorder = _run(server, body)
    assert reflector.relists == 1
    # What is new or changed as the pages come; what vanished once the list is whole.
    assert recorder.log == [
        ("upsert", ("a", "change")),
        ("upsert", ("a", "new")),
        ("delete", ("a", "vanish")),
    ]
    assert recorder.state == _truth(server) and reflector.broken_since is None


def test_an_outage_keeps_what_is_known_and_backs_off_with_jitter() -> None:
    server = FakeApiServer()
    server.put(SERVICES, service("a", "one"))

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: reflector.watches == 1)
        server.down = True
        server.cut_watches()
        down_at = trio.current_time()
        await _until(lambda: len(server.refused_at) == 4)
        assert list(recorder.state) == [("a", "one")]
        assert reflector.broken_since == down_at
        server.down = False
        await _until(lambda: reflector.broken_since is None)

    retry = RetryDelays(initial=1.0, maximum=4.0, jitter=1.0)
    reflector, recorder = _run(server, body, retry=retry)
    # draw() is 0.5: each delay is 1.5x its base of 1, 2, 4, then 4 seconds.
    times = server.refused_at
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(times)]
    assert gaps == [3.0, 6.0, 6.0]
    assert reflector.lists == 1 and recorder.state == _truth(server)


def test_a_garbage_answer_is_retried_and_nothing_known_is_lost() -> None:
    server = FakeApiServer()
    server.put(SERVICES, service("a", "one"))
    server.garbage_next()  # the first list

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: recorder.synced_at is not None)
        assert reflector.last_error is None
        server.fail_next(500)  # and now a watch
        server.cut_watches()
        server.put(SERVICES, service("a", "two"))
        await _until(lambda: ("a", "two") in recorder.state)

    reflector, recorder = _run(server, body)
    assert reflector.lists == 1 and recorder.state == _truth(server)


def test_nothing_is_synced_until_a_whole_list_is_read() -> None:
    server = FakeApiServer()
    server.put(SERVICES, service("a", "one"))
    server.fail_next(403, 403, 503)

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: reflector.last_error is not None)
        assert recorder.synced_at is None and recorder.log == []
        await _until(lambda: recorder.synced_at is not None)

    reflector, _ = _run(server, body)
    assert reflector.lists == 1


def test_a_bookmark_moves_the_version_on() -> None:
    server = FakeApiServer(bookmark_every=30.0)
    server.put(SERVICES, service("a", "one"))
    server.put("/api/v1/endpoints", {"metadata": {"name": "x", "namespace": "a"}})

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: reflector.watches == 1)
        listed = reflector.resource_version
        server.put("/api/v1/endpoints", {"metadata": {"name": "y", "namespace": "a"}})
        await _until(lambda: reflector.resource_version != listed)

    reflector, recorder = _run(server, body)
    assert reflector.resource_version == str(server.revision)
    assert recorder.log == [("upsert", ("a", "one"))]


def test_an_object_without_a_name_is_skipped_alone() -> None:
    server = FakeApiServer()
    server.put(SERVICES, service("a", "one"))
    server.put(SERVICES, {"metadata": {"name": "", "namespace": "a"}})

    async def body(reflector: Reflector, recorder: Recorder) -> None:
        await _until(lambda: recorder.synced_at is not None)

    reflector, recorder = _run(server, body)
    assert list(recorder.state) == [("a", "one")] and reflector.bad_objects == 1
