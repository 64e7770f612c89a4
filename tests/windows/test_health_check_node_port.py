"""Health-check node ports on Windows, answered over real HTTP on loopback.

An ``externalTrafficPolicy: Local`` service's ``healthCheckNodePort`` is
served by the driver itself, as kube-proxy serves it: 200 with the count of
local ready endpoints while there are some and the proxy is healthy (its
last apply succeeded), else 503, on the node's addresses.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import trio

from dataplane.core.healthcheck import HealthCheckServer
from dataplane.core.loop import Dataplane
from dataplane.model.services import ServiceKey
from dataplane.windows.platform import WindowsPlatform
from dataplane.wire._pb import felixbackend_pb2 as pb
from tests.waiting import eventually
from tests.windows.services_node import (
    LOCAL_V4,
    REMOTE_V4,
    backend,
    backends,
    overlay_host,
    service,
)
from tests.windows.services_node import messages as service_messages
from tests.windows.windows_node import inline


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return int(r.status), json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)
    except OSError:
        return 0, {}  # not listening (yet)


def test_the_port_answers_as_kube_proxy_does() -> None:
    port = _free_port()
    host = overlay_host()
    local = service(
        "web", type="NodePort", external_traffic_policy="Local", health_check_node_port=port
    )

    async def ask(status: int, local_endpoints: int) -> None:
        want = (
            status,
            {
                "service": {"namespace": "prod", "name": "web"},
                "localEndpoints": local_endpoints,
                "serviceProxyHealthy": True,
            },
        )

        def answered() -> bool:
            return _get(port) == want

        await trio.to_thread.run_sync(lambda: eventually(answered, 10, f"{want}"))

    async def main() -> None:
        platform = WindowsPlatform(host, offload=inline, host_addresses=("127.0.0.1",))
        dp = Dataplane(platform)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dp.run)
            for m in service_messages(local, backends("web", *LOCAL_V4[:2], *REMOTE_V4)):
                dp.send_message(m)
            await ask(200, 2)  # two local pods back it
            dp.send_message(backends("web", *REMOTE_V4))  # none on this node now
            await ask(503, 0)
            dp.send_message(
                backends("web", LOCAL_V4[0], backend(LOCAL_V4[1], state=pb.BACKEND_TERMINATING))
            )
            await ask(200, 1)  # a terminating one does not count while another is ready
            dp.send_message(pb.ServiceRemove(name="web", namespace="prod"))
            await trio.to_thread.run_sync(
                lambda: eventually(lambda: _get(port)[0] == 0, 10, "the port closed")
            )
            dp.close_input()

    trio.run(main)


def test_an_unhealthy_proxy_answers_503_even_with_local_endpoints() -> None:
    healthy = False
    server = HealthCheckServer(("127.0.0.1",), healthy=lambda: healthy)
    server.update({30000: (ServiceKey("prod", "web"), 2)})
    head, _, body = server.response(30000).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    assert json.loads(body) == {
        "service": {"namespace": "prod", "name": "web"},
        "localEndpoints": 2,
        "serviceProxyHealthy": False,
    }
    healthy = True
    assert server.response(30000).startswith(b"HTTP/1.1 200 OK")
