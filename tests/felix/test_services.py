"""Services from the API under the real Felix, the EndpointSlices from the real controller.

Felix starts the driver with ``DATAPLANE_SERVICES_SOURCE=kubernetes`` (as
an operator sets it on calico-node, kube-proxy off); kube-controller-manager
turns the pods the CNI plugin made into EndpointSlices; connections to a
ClusterIP and a NodePort say which pods serve it.
"""

from __future__ import annotations

import pytest

from tests.felix.cluster import PORT, PROGRAMMED, Cluster
from tests.waiting import eventually

pytestmark = pytest.mark.slow

SPEC = {
    "selector": {"app": "web"},
    "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
}


def _serving(cluster: Cluster, src: str, address: str, port: int, want: set[str]) -> None:
    """Wait until connections from ``src`` reach exactly the pods ``want``.

    Each check is 24 connections: all must be answered, by members of
    ``want`` only, and every member must answer at least once (24 over two
    backends miss one of them once in 8 million checks).
    """
    seen: list[str | None] = []

    def holds() -> bool:
        seen[:] = [cluster.served_by(src, address, port) for _ in range(24)]
        return None not in seen and set(seen) == want

    try:
        eventually(holds, PROGRAMMED, f"{address}:{port} served by {sorted(want)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from exc


def test_a_cluster_ip_follows_the_pods_its_selector_picks(cluster: Cluster) -> None:
    with cluster.service("alpha", "web", SPEC) as svc:
        vip = svc["spec"]["clusterIP"]
        _serving(cluster, "client", vip, 80, {"web"})
        cluster.pod("alpha", "web-2", app="web")
        try:
            _serving(cluster, "client", vip, 80, {"web", "web-2"})
            _serving(cluster, "other", vip, 80, {"web", "web-2"})
        finally:
            cluster.remove_pod("web-2")
        _serving(cluster, "client", vip, 80, {"web"})


def test_a_node_port_from_the_external_host(cluster: Cluster) -> None:
    spec = {**SPEC, "type": "NodePort"}
    with cluster.service("alpha", "web-np", spec) as svc:
        node_port = svc["spec"]["ports"][0]["nodePort"]
        _serving(cluster, "external", cluster.node.address(4), node_port, {"web"})


def test_a_service_without_endpoints_is_refused_at_once(cluster: Cluster) -> None:
    spec = {**SPEC, "selector": {"app": "nobody"}}
    with cluster.service("alpha", "empty", spec) as svc:
        vip = svc["spec"]["clusterIP"]

        def refused() -> bool:
            probe = cluster.pods["client"].connect("tcp", vip, 80, timeout=0.5)
            return not probe.ok and probe.error == "refused"

        eventually(refused, PROGRAMMED, f"{vip}:80 refused (kube-proxy's REJECT)")
    # The pod itself is unaffected.
    assert cluster.served_by("client", cluster.pods["web"].ipv4, PORT) == "web"
