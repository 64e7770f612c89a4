"""The API as the node's one source of services, in the loop (fake API, sim platform)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from dataplane.core.loop import Dataplane
from dataplane.kube.api import ApiClient
from dataplane.kube.connection import Connection
from dataplane.kube.source import KubeServices
from dataplane.model.services import ServiceKey
from dataplane.sim import SimPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.kube.fake_apiserver import FakeApiServer

SERVICES = "/api/v1/services"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
NODES = "/api/v1/nodes"
WEB = ServiceKey("prod", "web")


def _service(name: str, ip: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "prod", "name": name, "labels": labels},
        "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80}]},
    }


def _slice(service: str, *addresses: str, name: str = "", port: Any = 8080) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "prod",
            "name": name or f"{service}-1",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [a], "nodeName": "node-1"} for a in addresses],
    }


def _run(
    server: FakeApiServer, body: Callable[[Dataplane, SimPlatform, KubeServices], Awaitable[None]]
) -> None:
    platform = SimPlatform()
    dp = Dataplane(platform)
    api = ApiClient(
        Connection(server="https://fake.invalid", ca_pem=None, token=lambda: "t"),
        transport=server.transport(),
    )
    source = KubeServices(
        api, "node-1", lambda: dp.config.kube_node_port_ranges, changed=dp.changed
    )
    dp.services.use_source(source)
    dp.add_source("the Kubernetes API", source.run, lambda: source.synced)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            await body(dp, platform, source)
            dp.close_input()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(600):
        while not check():
            await trio.sleep(0.01)


def _backends(platform: SimPlatform, key: ServiceKey = WEB) -> set[tuple[str, int]]:
    service = platform.programmed.services[key]
    return {(b.address, b.ports[0].port) for b in service.backends}


def test_nothing_is_programmed_until_the_api_has_synced_then_everything_is() -> None:
    server = FakeApiServer()
    server.put(SERVICES, _service("web", "10.96.0.10"))
    server.put(SLICES, _slice("web", "10.65.0.1", "10.65.0.2"))
    server.down = True  # the API is not there yet

    async def body(dp: Dataplane, platform: SimPlatform, source: KubeServices) -> None:
        dp.send_message(pb.InSync())
        await trio.sleep(5)
        assert platform.successful_applies == 0 and not dp.in_sync
        server.down = False
        await _until(lambda: dp.in_sync)
        assert _backends(platform) == {("10.65.0.1", 8080), ("10.65.0.2", 8080)}

    _run(server, body)


def test_felix_s_service_messages_are_ignored_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FakeApiServer()
    server.put(SERVICES, _service("web", "10.96.0.10"))
    server.put(NODES, {"metadata": {"name": "node-1"}})

    async def body(dp: Dataplane, platform: SimPlatform, source: KubeServices) -> None:
        with caplog.at_level(logging.INFO, logger="dataplane.managers.services"):
            for name in ("other", "third"):
                dp.send_message(
                    pb.ServiceUpdate(name=name, namespace="prod", cluster_ips=["10.96.0.99"])
                )
            dp.send_message(pb.InSync())
            await _until(lambda: dp.in_sync)
        assert set(platform.programmed.services) == {WEB}
        lines = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
        assert lines == [
            "ServiceUpdate ignored: services come from the Kubernetes API on this node (said once)"
        ]

    _run(server, body)


def test_a_bad_slice_is_refused_alone_and_its_service_keeps_what_it_had(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FakeApiServer()
    server.put(SERVICES, _service("web", "10.96.0.10"))
    server.put(SERVICES, _service("api", "10.96.0.11"))
    server.put(SLICES, _slice("web", "10.65.0.1"))
    server.put(SLICES, _slice("api", "10.65.0.5"))

    async def body(dp: Dataplane, platform: SimPlatform, source: KubeServices) -> None:
        dp.send_message(pb.InSync())
        await _until(lambda: dp.in_sync)
        with caplog.at_level(logging.ERROR, logger="dataplane.kube.source"):
            server.put(SLICES, _slice("web", "10.65.0.9", port=70000))  # out of range
            server.put(SLICES, _slice("api", "10.65.0.6"))
            await _until(
                lambda: _backends(platform, ServiceKey("prod", "api")) == {("10.65.0.6", 8080)}
            )
        assert _backends(platform) == {("10.65.0.1", 8080)}
        (line,) = [r.getMessage() for r in caplog.records]
        assert line == (
            "EndpointSlice prod/web-1 refused: field ports[0].port=70000: a port must be 1-65535"
        )
        assert source.refusals == 1

    _run(server, body)


def test_a_deleted_service_goes_and_its_slices_follow_a_relabel() -> None:
    server = FakeApiServer()
    server.put(SERVICES, _service("web", "10.96.0.10"))
    server.put(SERVICES, _service("api", "10.96.0.11"))
    server.put(SLICES, _slice("web", "10.65.0.1", name="shared"))

    async def body(dp: Dataplane, platform: SimPlatform, source: KubeServices) -> None:
        dp.send_message(pb.InSync())
        await _until(lambda: dp.in_sync and WEB in platform.programmed.services)
        # The slice is relabelled to api: web loses the endpoint, api gains it.
        server.put(SLICES, _slice("api", "10.65.0.1", name="shared"))
        api = ServiceKey("prod", "api")
        await _until(lambda: _backends(platform, api) == {("10.65.0.1", 8080)})
        assert _backends(platform) == set()
        server.remove(SERVICES, "prod", "web")
        await _until(lambda: WEB not in platform.programmed.services)

    _run(server, body)


def test_headless_services_are_left_out_by_the_selector() -> None:
    server = FakeApiServer()
    server.put(SERVICES, _service("web", "10.96.0.10"))
    server.put(SERVICES, _service("db", "10.96.0.12", **{"service.kubernetes.io/headless": ""}))

    async def body(dp: Dataplane, platform: SimPlatform, source: KubeServices) -> None:
        dp.send_message(pb.InSync())
        await _until(lambda: dp.in_sync)
        assert set(platform.programmed.services) == {WEB}

    _run(server, body)


def test_a_new_node_port_range_takes_a_service_refused_under_the_old_one() -> None:
    """The kept Services are read again when the range changes (requeue_all)."""
    server = FakeApiServer()
    web = _service("web", "10.96.0.10")
    web["spec"].update(type="NodePort", ports=[{"name": "http", "port": 80, "nodePort": 40000}])
    server.put(SERVICES, web)
    server.put(SLICES, _slice("web", "10.65.0.1"))

    async def body(dp: Dataplane, platform: SimPlatform, source: KubeServices) -> None:
        dp.send_message(pb.InSync())
        await _until(lambda: dp.in_sync)
        assert WEB not in platform.programmed.services and source.refusals == 1
        dp.send_message(pb.ConfigUpdate(config={"KubeNodePortRanges": "30000:32767,40000"}))
        await _until(lambda: WEB in platform.programmed.services)
        assert platform.programmed.services[WEB].ports[0].node_port == 40000
        assert _backends(platform) == {("10.65.0.1", 8080)}

    _run(server, body)
