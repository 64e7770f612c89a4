"""The real control plane of the test bed: what later tests take from it holds.

The services reflector (and whatever else watches the API) will rely on
these: the release it claims, authentication and RBAC as a cluster has
them, kube-controller-manager turning Pods into EndpointSlices, and a watch
from a list's resourceVersion that sees the next change.
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest

from testbed import upstream
from testbed.control_plane import ControlPlane
from tests.waiting import eventually

pytestmark = pytest.mark.slow

_names = itertools.count()
SLICES = "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"


def _namespace(cp: ControlPlane) -> str:
    name = f"t{next(_names)}"
    cp.create("/api/v1/namespaces", {"metadata": {"name": name}})
    return name


def _node(cp: ControlPlane, name: str) -> None:
    cp.create(
        "/api/v1/nodes",
        {"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "zone-a"}}},
    )


def _ready_pod(cp: ControlPlane, ns: str, name: str, ip: str, node: str) -> None:
    """A Pod as a scheduler and a kubelet would leave it: bound, running, Ready."""
    cp.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "c",
                        "image": "none",
                        "ports": [{"name": "http", "containerPort": 8080}],
                    }
                ],
            },
        },
    )
    _set_ready(cp, ns, name, ip, ready=True)


def _set_ready(cp: ControlPlane, ns: str, name: str, ip: str, *, ready: bool) -> None:
    cp.patch_status(
        f"/api/v1/namespaces/{ns}/pods/{name}",
        {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    )


def _wait_slice(cp: ControlPlane, ns: str, deadline_s: float = 30.0) -> dict[str, Any]:
    """The service's one EndpointSlice once the controller has written an endpoint."""
    found: list[dict[str, Any]] = []

    def written() -> bool:
        found[:] = [i for i in cp.get(SLICES.format(ns=ns))["items"] if i.get("endpoints")]
        return bool(found)

    eventually(written, deadline=deadline_s, what=f"an EndpointSlice with endpoints in {ns}")
    return found[0]


def test_the_api_server_is_the_pinned_release(control_plane: ControlPlane) -> None:
    assert control_plane.get("/version")["gitVersion"] == upstream.K8S


def test_an_unknown_token_is_refused_and_rbac_binds_others(control_plane: ControlPlane) -> None:
    stranger = httpx.Client(
        transport=httpx.HTTPTransport(
            uds=str(control_plane.socket), verify=control_plane.ssl_context()
        ),
        base_url=control_plane.client.base_url,
        headers={"Authorization": "Bearer not-a-token"},
    )
    with stranger:
        assert stranger.get("/api/v1/services").status_code == 401
    # A service account's token authenticates, and RBAC grants it nothing yet.
    ns = _namespace(control_plane)
    control_plane.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "sa"}})
    token = control_plane.create(
        f"/api/v1/namespaces/{ns}/serviceaccounts/sa/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    answer = control_plane.client.get(
        "/api/v1/services", headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 403
    assert f"system:serviceaccount:{ns}:sa" in answer.text


def test_the_endpointslice_controller_turns_a_ready_pod_into_a_slice_and_a_watch_sees_it_go(
    control_plane: ControlPlane,
) -> None:
    cp = control_plane
    ns = _namespace(cp)
    _node(cp, f"{ns}-node")
    _ready_pod(cp, ns, "web-1", "10.65.0.2", f"{ns}-node")
    cp.create(
        f"/api/v1/namespaces/{ns}/services",
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
        },
    )
    found = _wait_slice(cp, ns)
    assert found["metadata"]["labels"]["kubernetes.io/service-name"] == "web"
    assert found["addressType"] == "IPv4"
    assert found["ports"] == [{"name": "", "protocol": "TCP", "port": 8080}]
    (endpoint,) = found["endpoints"]
    assert endpoint["addresses"] == ["10.65.0.2"]
    assert endpoint["nodeName"] == f"{ns}-node"
    assert endpoint["zone"] == "zone-a"
    assert endpoint["conditions"] == {"ready": True, "serving": True, "terminating": False}

    listed = cp.get(SLICES.format(ns=ns))
    version = listed["metadata"]["resourceVersion"]
    with cp.watching(SLICES.format(ns=ns), resourceVersion=version) as events:
        _set_ready(cp, ns, "web-1", "10.65.0.2", ready=False)
        event = next(events)
    assert event["type"] == "MODIFIED"
    (endpoint,) = event["object"]["endpoints"]
    assert endpoint["conditions"]["ready"] is False
    assert int(event["object"]["metadata"]["resourceVersion"]) > int(version)
