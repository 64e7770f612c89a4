"""The pod MTU file the Calico CNI plugin reads, written as Felix's own dataplane writes it."""

from __future__ import annotations

import time

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


def test_the_pod_mtu_follows_the_hosts_interfaces_and_the_overlay(topology: Topology) -> None:
    cluster = Cluster(topology)
    node = cluster.node
    node.ip("link", "set", "eth0", "mtu", "1400")  # the uplink: matches MTUIfacePattern
    felix = cluster.start_driver(policies=False)
    try:
        _until(felix, 1400)  # no overlay: the host's
        node.ip("link", "set", "eth0", "mtu", "1300")
        _until(felix, 1300)  # followed without a restart
    finally:
        felix.close_input()
        felix.wait()
    # With VXLAN on, its header comes off; a pattern matching nothing is Felix's 1460.
    felix = cluster.start_driver(policies=False, VXLANEnabled="true")
    try:
        _until(felix, 1250)
    finally:
        felix.close_input()
        felix.wait()
    felix = cluster.start_driver(policies=False, MTUIfacePattern="^nothing$")
    try:
        _until(felix, 1460)
    finally:
        felix.close_input()
        felix.wait()
