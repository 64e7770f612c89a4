"""Services under the real Felix with the driver's default services source.

A node that installs the driver beside kube-proxy leaves services to
kube-proxy. Felix in KDD mode sends every Service (``ServiceUpdate``)
and never its backends, and Felix's own iptables and nftables dataplanes
program nothing from them: so neither does the driver, whose default
source is Felix's messages. This module has a cluster of its own
(:func:`tests.felix.cluster.running` without services from the API).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.felix.cluster import PROGRAMMED, Cluster, complaints, own_cluster
from tests.waiting import eventually

pytestmark = pytest.mark.slow

SPEC = {
    "selector": {"app": "web"},
    "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
}


@pytest.fixture(scope="module")
def beside_kube_proxy(
    felix_setup: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with own_cluster(
        felix_setup, tmp_path_factory, "default-services", services_from_api=False
    ) as made:
        made.expect({("client", "web"): True})
        yield made


def _ruleset(cluster: Cluster) -> str:
    """Everything of ours in the kernel's tables, rules and set elements."""
    node = cluster.node
    if cluster.nftables_mode == "Enabled":
        return node.run("nft", "list", "ruleset").stdout
    return node.run("iptables-save").stdout + node.run("ipset", "save").stdout


def test_a_service_felix_sends_is_left_to_kube_proxy(beside_kube_proxy: Cluster) -> None:
    cluster = beside_kube_proxy
    received = cluster.metric("felix_int_dataplane_messages_total", type="service_update")
    with cluster.service("alpha", "web-svc", SPEC) as service:
        vip = service["spec"]["clusterIP"]
        # Felix sent it, and the driver applied what came with it.
        eventually(
            lambda: (
                cluster.metric("felix_int_dataplane_messages_total", type="service_update")
                > received
            ),
            PROGRAMMED,
            "Felix's ServiceUpdate",
        )
        applies = cluster.metric("dataplane_apply_duration_seconds_count")
        eventually(
            lambda: cluster.metric("dataplane_apply_duration_seconds_count") > applies,
            PROGRAMMED,
            "an apply after it",
        )
        assert vip not in _ruleset(cluster)
        # Nor refused (the driver once wrote a REJECT for each such VIP).
        probe = cluster.source("client").connect("tcp", vip, 80, timeout=0.5)
        assert not probe.ok and "refused" not in (probe.error or ""), probe
    assert complaints(cluster.felix.log_path.read_text()) == []
