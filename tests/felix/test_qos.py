"""QoS controls under the real Felix: a Pod's annotations, Felix's qos_controls, our kernel state.

The annotations go on the real Pod object; Felix computes
``qos_controls`` from them (libcalico-go's conversion, with its units and
defaults) and sends the endpoint again; the driver shapes and limits. Real
transfers and connections judge it, and the annotations' removal is
followed to the end (the TBF gone, full speed, connections free).
"""

from __future__ import annotations

import pytest

from tests.felix.cluster import PORT, PROGRAMMED, Cluster
from tests.kernel.qos import bits_per_second, tos
from tests.waiting import eventually

pytestmark = pytest.mark.slow

_LIMIT = 8_000_000  # bits per second: "8M"
_BYTES = 1_500_000
_SINK_PORT = 7001

_ANNOTATIONS = {
    "qos.projectcalico.org/ingressBandwidth": "8M",
    "qos.projectcalico.org/ingressBurst": "100k",
    "qos.projectcalico.org/ingressMaxConnections": "1",
}


def _rate(cluster: Cluster, src: str, dst: str) -> float:
    return bits_per_second(cluster.pods[src], cluster.pods[dst], _SINK_PORT, _BYTES)


def _shaped(cluster: Cluster, pod: str) -> bool:
    iface = cluster.pods[pod].iface
    return f"tbf 1: dev {iface} " in cluster.node.run("tc", "qdisc", "show").stdout


def test_a_pods_qos_annotations_limit_its_bandwidth_and_connections(cluster: Cluster) -> None:
    client, web = cluster.pods["client"], cluster.pods["web"]
    cluster.annotate_pod("web", _ANNOTATIONS)
    try:
        eventually(lambda: _shaped(cluster, "web"), PROGRAMMED, "web's TBF")
        rate = _rate(cluster, "client", "web")
        assert abs(rate - _LIMIT) <= 0.3 * _LIMIT, rate
        with client.hold("tcp", web.ipv4, PORT):
            second = client.connect("tcp", web.ipv4, PORT, timeout=2)
            assert not second.ok and "refused" in (second.error or "").lower(), second
    finally:
        cluster.annotate_pod("web", dict.fromkeys(_ANNOTATIONS))
    eventually(lambda: not _shaped(cluster, "web"), PROGRAMMED, "web's TBF gone")
    assert _rate(cluster, "client", "web") > 5 * _LIMIT
    with client.hold("tcp", web.ipv4, PORT):
        cluster.expect({("client", "web"): True}, what="no connection limit any more")


_DSCP = "qos.projectcalico.org/dscp"


def test_a_pods_dscp_annotation_marks_what_it_sends_out_of_the_cluster(cluster: Cluster) -> None:
    # The release's own conversion says whether it knows the annotation (v3.30.7 does not).
    source = cluster.calico.release.crds.parents[2]
    constants = source / "libcalico-go/lib/backend/k8s/conversion/constants.go"
    if _DSCP not in constants.read_text():
        pytest.skip(f"{cluster.calico.release.label} has no {_DSCP} annotation")
    client = cluster.pods["client"]

    def marked() -> int | None:
        return tos(client, cluster.external, _SINK_PORT)

    assert marked() == 0
    cluster.annotate_pod("client", {_DSCP: "AF11"})
    try:
        eventually(lambda: marked() == 10 << 2, PROGRAMMED, "client's packets marked AF11")
    finally:
        cluster.annotate_pod("client", {_DSCP: None})
    eventually(lambda: marked() == 0, PROGRAMMED, "the mark gone with the annotation")
