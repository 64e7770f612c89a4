"""/readyz and /metrics for the API source (fake API server, MockClock)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest

from dataplane.kube.api import ApiClient
from dataplane.kube.connection import Connection
from dataplane.kube.source import KubeServices
from dataplane.ops.kube import KubeCollector, kube_readiness
from tests.kube.fake_apiserver import FakeApiServer

SERVICES = "/api/v1/services"


def _run(server: FakeApiServer, body: Callable[[KubeServices], Awaitable[None]]) -> None:
    api = ApiClient(
        Connection(server="https://fake.invalid", ca_pem=None, token=lambda: "t"),
        transport=server.transport(),
    )
    source = KubeServices(api, "node-1", lambda: ((30000, 32767),))
    clock = [100.0]
    for reflector in source.reflectors:
        reflector.monotonic = lambda: clock[0]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(source.run)
            await body(source)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(600):
        while not check():
            await trio.sleep(0.01)


def test_ready_only_once_synced_and_unready_after_the_grace_of_an_outage() -> None:
    server = FakeApiServer()
    server.put(
        SERVICES,
        {"metadata": {"namespace": "a", "name": "web"}, "spec": {"clusterIP": "10.96.0.1"}},
    )
    server.down = True

    async def body(source: KubeServices) -> None:
        check = kube_readiness(source, 60.0, 100.0)
        assert not check.ok
        assert check.detail == "waiting for the first list of services, endpointslices, node"
        server.down = False
        await _until(lambda: source.synced)
        assert kube_readiness(source, 60.0, 100.0).ok
        assert kube_readiness(source, 60.0, 100.0).detail == "following: 1 services"
        server.down = True
        server.cut_watches()
        services = source.reflectors[0]
        await _until(lambda: services.broken_at is not None)
        assert kube_readiness(source, 60.0, 159.0).ok  # within the grace
        late = kube_readiness(source, 60.0, 161.0)
        assert not late.ok
        assert late.detail.startswith("services: not following the API for 61s (grace 60s): ")
        assert late.detail.endswith("; programmed services are kept")

    _run(server, body)


def test_the_metrics_count_requests_lists_relists_and_events() -> None:
    server = FakeApiServer()

    async def body(source: KubeServices) -> None:
        await _until(lambda: source.synced and all(r.watches for r in source.reflectors))
        server.put(
            SERVICES,
            {"metadata": {"namespace": "a", "name": "web"}, "spec": {"clusterIP": "10.96.0.1"}},
        )
        await _until(lambda: source.reflectors[0].events == 1)
        server.cut_watches()
        server.down = True
        await _until(lambda: all(r.broken_at is not None for r in source.reflectors))
        server.compact()  # the slices' and node's versions predate it; the services' does not
        server.down = False
        await _until(lambda: source.reflectors[1].relists == 1)
        registry = CollectorRegistry()
        registry.register(KubeCollector(source))
        text = generate_latest(registry).decode()
        assert 'dataplane_kube_relists_total{resource="endpointslices"} 1.0' in text
        assert 'dataplane_kube_lists_total{resource="endpointslices"} 2.0' in text
        assert 'dataplane_kube_relists_total{resource="services"} 0.0' in text
        assert 'dataplane_kube_events_total{resource="services"} 1.0' in text
        assert 'dataplane_kube_synced{resource="node"} 1.0' in text
        assert f"dataplane_kube_requests_total {float(source.api.requests)}" in text
        assert source.api.requests == server.requests

    _run(server, body)
