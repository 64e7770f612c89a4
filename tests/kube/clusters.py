"""One interface over the fake API server and the real one, for contract tests.

A test writes Services through :class:`Cluster` and reads them back through
the driver's own :class:`~dataplane.kube.api.ApiClient`; the same test runs
against :class:`~tests.kube.fake_apiserver.FakeApiServer` (under trio's
MockClock) and against the real kube-apiserver of the test bed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import httpx
import trio
import trio.testing

from dataplane.kube.api import ApiClient
from dataplane.kube.connection import Connection
from testbed.control_plane import API_HOST, ControlPlane
from tests.kube.fake_apiserver import FakeApiServer

SERVICES = "/api/v1/services"


def service(namespace: str, name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]},
    }


class Cluster(Protocol):
    name: str

    def client(self) -> ApiClient: ...
    def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def update(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def delete(self, namespace: str, name: str) -> None: ...
    def namespace(self) -> str: ...
    def compact(self) -> None: ...
    def run(self, fn: Callable[[], Awaitable[None]]) -> None: ...


class FakeCluster:
    name = "fake"

    def __init__(self) -> None:
        self.server = FakeApiServer()
        self._namespaces = 0

    def client(self) -> ApiClient:
        connection = Connection(server="https://fake.invalid", ca_pem=None, token=lambda: "t")
        return ApiClient(connection, transport=self.server.transport())

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.server.put(SERVICES, obj)

    update = create

    def delete(self, namespace: str, name: str) -> None:
        self.server.remove(SERVICES, namespace, name)

    def namespace(self) -> str:
        self._namespaces += 1
        return f"ns{self._namespaces}"

    def compact(self) -> None:
        self.server.compact()

    def run(self, fn: Callable[[], Awaitable[None]]) -> None:
        trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


class RealCluster:
    name = "real"

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self._namespaces = 0

    def client(self) -> ApiClient:
        cp = self.cp
        connection = Connection(
            server=f"https://{API_HOST}",
            ca_pem=(cp.pki / "ca.crt").read_text(),
            token=lambda: cp.token,
        )
        transport = httpx.AsyncHTTPTransport(uds=str(cp.socket), verify=cp.ssl_context())
        return ApiClient(connection, transport=transport)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"]["namespace"]
        return self.cp.create(f"/api/v1/namespaces/{ns}/services", obj)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/services/{meta['name']}"
        current = self.cp.get(path)
        obj = {
            **obj,
            "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]},
        }
        obj["spec"] = {**current["spec"], **obj["spec"]}
        return self.cp.request("PUT", path, obj)

    def delete(self, namespace: str, name: str) -> None:
        self.cp.delete(f"/api/v1/namespaces/{namespace}/services/{name}")

    def namespace(self) -> str:
        self._namespaces += 1
        name = f"contract{self._namespaces}"
        self.cp.create("/api/v1/namespaces", {"metadata": {"name": name}})
        return name

    def compact(self) -> None:
        self.cp.compact()

    def run(self, fn: Callable[[], Awaitable[None]]) -> None:
        trio.run(fn)
