"""Global forwarding with real namespaces: cleanup puts back what the driver found."""

from __future__ import annotations

import sys

import pytest

from testbed.topology import Namespace, Topology
from tests.conftest import REPO
from tests.kernel.cluster import Cluster, Probe
from tests.kernel.marks import requires_root

pytestmark = [requires_root, pytest.mark.slow]

FORWARDING = ("net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding")


def test_cleanup_restores_forwarding_the_driver_turned_on(topology: Topology) -> None:
    cluster = Cluster(topology)
    node = cluster.node
    # The testbed's node forwards from birth; this one starts as a fresh host.
    node.set_sysctls(dict.fromkeys(FORWARDING, 0))
    felix = cluster.start_driver()
    felix.kill()  # a crash: the next driver finds forwarding on, ours
    felix = cluster.start_driver()
    try:
        assert [node.sysctl(k) for k in FORWARDING] == ["1", "1"]
        # Forwarding is really on: an external host reaches a pod through the node.
        cluster.wait_for(Probe("external", "web-1", "tcp", 80, 4))
        cluster.wait_for(Probe("external", "web-1", "tcp", 80, 6))
    finally:
        felix.close_input()
        felix.wait()
    assert cluster.sysctl_state.exists()
    state = ("--sysctl-state", str(cluster.sysctl_state))
    result = topology.run(node, sys.executable, str(REPO / "driver.py"), *state, "cleanup")
    assert result.returncode == 0, result.stderr
    assert [node.sysctl(k) for k in FORWARDING] == ["0", "0"]
    assert not cluster.sysctl_state.exists()


def test_cleanup_in_another_namespace_leaves_its_forwarding_alone(topology: Topology) -> None:
    """The driver's records are its namespace's: a cleanup run in another one
    (here standing in for the host, forwarding for its own reasons) with the
    same state file writes nothing there; the driver's own is still restored."""
    cluster = Cluster(topology)
    node = cluster.node
    node.set_sysctls(dict.fromkeys(FORWARDING, 0))
    felix = cluster.start_driver()
    felix.close_input()
    felix.wait()
    host = Namespace(topology, "host", topology.new_netns("host"))
    topology.adopt(host)
    host.set_sysctls(dict.fromkeys(FORWARDING, 1))
    state = ("--sysctl-state", str(cluster.sysctl_state))
    cleanup = (sys.executable, str(REPO / "driver.py"), *state, "cleanup")
    result = topology.run(host, *cleanup)
    assert result.returncode == 0, result.stderr
    assert [host.sysctl(k) for k in FORWARDING] == ["1", "1"]
    assert cluster.sysctl_state.exists()  # the node's records are still there
    result = topology.run(node, *cleanup)
    assert result.returncode == 0, result.stderr
    assert [node.sysctl(k) for k in FORWARDING] == ["0", "0"]
    assert [host.sysctl(k) for k in FORWARDING] == ["1", "1"]
    assert not cluster.sysctl_state.exists()
