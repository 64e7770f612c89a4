"""The pod MTU file the Calico CNI plugin reads, written as Felix's own dataplane writes it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from testbed.topology import Topology
from tests.felix_harness import FelixHarness
from tests.kernel.cluster import Cluster
from tests.kernel.marks import requires_root

pytestmark = [requires_root, pytest.mark.slow, pytest.mark.own_backend]


def _until(felix: FelixHarness, mtu: int) -> None:
    end = time.monotonic() + 20
    while True:
        text = felix.mtu_file.read_text() if felix.mtu_file.exists() else ""
        if text == str(mtu):
            return
        assert time.monotonic() < end, f"MTU file holds {text!r}, want {mtu}"


@contextlib.contextmanager
def _stopped(felix: FelixHarness) -> Iterator[FelixHarness]:
    """``felix``'s driver, stopped at the end."""
    try:
        yield felix
    finally:
        felix.close_input()
        felix.wait()


def test_the_pod_mtu_follows_the_hosts_interfaces_and_the_overlay(topology: Topology) -> None:
    cluster = Cluster(topology)
    node = cluster.node
    node.ip("link", "set", "eth0", "mtu", "1400")  # the uplink: matches MTUIfacePattern
    with _stopped(cluster.start_driver(policies=False)) as felix:
        _until(felix, 1400)  # no overlay: the host's
        node.ip("link", "set", "eth0", "mtu", "1300")
        _until(felix, 1300)  # followed without a restart
    # With VXLAN on, its header comes off; a pattern matching nothing is Felix's 1460.
    with _stopped(cluster.start_driver(policies=False, VXLANEnabled="true")) as felix:
        _until(felix, 1250)
    with _stopped(cluster.start_driver(policies=False, MTUIfacePattern="^nothing$")) as felix:
        _until(felix, 1460)
