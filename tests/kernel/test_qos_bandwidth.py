"""A workload's bandwidth limits (``qos_controls``): real TCP transfers through tc's TBF."""

from __future__ import annotations

import time

import pytest

from dataplane.linux.shaping.buckets import ifb_name
from testbed.topology import Pod, Topology
from tests.kernel.cluster import Cluster
from tests.kernel.marks import requires_root
from tests.kernel.qos import bits_per_second, qos_update

pytestmark = [requires_root, pytest.mark.slow]

_PORT = 7001
_LIMIT = 8_000_000  # bits per second
_BYTES = 1_500_000  # 1.5 s at the limit
_TOLERANCE = 0.3


def _bits_per_second(src: Pod, dst: Pod) -> float:
    """The rate a bulk TCP transfer from ``src`` to ``dst`` moves at."""
    return bits_per_second(src, dst, _PORT, _BYTES)


def _qdiscs(cluster: Cluster) -> str:
    return cluster.node.run("tc", "qdisc", "show").stdout


def _until(cluster: Cluster, held: bool, device: str) -> None:
    """Until ``device`` has a TBF (``held``) or none: the apply is done."""
    end = time.monotonic() + 20
    while (f"tbf 1: dev {device} " in _qdiscs(cluster)) != held:
        assert time.monotonic() < end, _qdiscs(cluster)


def _near_limit(rate: float) -> bool:
    return abs(rate - _LIMIT) <= _LIMIT * _TOLERANCE


def test_a_bandwidth_limit_holds_a_bulk_transfer_to_it_and_goes_with_it(
    topology: Topology,
) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver(policies=False)
    web, prom = cluster.pods["web-1"], cluster.pods["prom-1"]
    small_burst = 100_000  # bits: Calico's default burst (4 Gi bits) would pass the whole test
    try:
        free = _bits_per_second(web, prom)
        assert free > 5 * _LIMIT, free
        # Ingress of prom-1: a TBF on its interface.
        felix.send(qos_update(cluster, "prom-1", IngressBandwidth=_LIMIT, IngressBurst=small_burst))
        _until(cluster, True, prom.iface)
        assert _near_limit(rate := _bits_per_second(web, prom)), rate
        # Egress of web-1 (through its IFB device), with a peak rate above
        # the rate (and the kernel's minimum burst); prom-1's limit gone.
        felix.send(qos_update(cluster, "prom-1"))
        felix.send(
            qos_update(
                cluster,
                "web-1",
                EgressBandwidth=_LIMIT,
                EgressBurst=small_burst,
                EgressPeakrate=2 * _LIMIT,
            )
        )
        _until(cluster, True, ifb_name(web.iface))
        _until(cluster, False, prom.iface)
        assert _near_limit(rate := _bits_per_second(web, prom)), rate
        # Annotation gone: full speed, and nothing of ours left.
        felix.send(qos_update(cluster, "web-1"))
        _until(cluster, False, ifb_name(web.iface))
        assert _bits_per_second(web, prom) > 5 * _LIMIT
        end = time.monotonic() + 20
        while ifb_name(web.iface) in cluster.node.ip("link").stdout:
            assert time.monotonic() < end, "the IFB device stayed"
        assert "ingress" not in _qdiscs(cluster)
    finally:
        felix.close_input()
        felix.wait()


def test_a_bandwidth_limit_removed_by_hand_is_put_back_by_the_refresh(topology: Topology) -> None:
    cluster = Cluster(topology)
    felix = cluster.start_driver(policies=False, RouteRefreshInterval="1")
    web = cluster.pods["web-1"]
    ifb = ifb_name(web.iface)
    try:
        felix.send(qos_update(cluster, "web-1", IngressBandwidth=_LIMIT, EgressBandwidth=_LIMIT))
        _until(cluster, True, ifb)
        _until(cluster, True, web.iface)
        cluster.node.run("tc", "qdisc", "del", "dev", web.iface, "root")
        cluster.node.run("tc", "filter", "del", "dev", web.iface, "ingress")
        _until(cluster, True, web.iface)
        end = time.monotonic() + 20
        while f"redirect dev {ifb}" not in cluster.node.run(
            "tc", "filter", "show", "dev", web.iface, "ingress"
        ).stdout.replace("(Egress Redirect to device ", "redirect dev "):
            assert time.monotonic() < end, "the redirect was not put back"
    finally:
        felix.close_input()
        felix.wait()
