"""NFTablesMode on the real kernel: the choice, switching both ways, cleanup.

Each switch is a restart (as Felix restarts to change it): the new
backend's objects go in first, then the other's of ours go, and nothing
else in the namespace is touched.
"""

from __future__ import annotations

import sys

import pytest

from testbed.topology import Node, Topology
from tests.conftest import REPO
from tests.kernel.cluster import Cluster
from tests.kernel.marks import requires_root
from tests.kernel.test_linux_policy import matrix

pytestmark = [requires_root, pytest.mark.slow, pytest.mark.own_backend]


def _ours(node: Node) -> dict[str, bool]:
    """Which backends hold objects of ours in ``node``."""
    saved = "".join(
        node.run(tool, check=False).stdout
        for tool in ("iptables-legacy-save", "ip6tables-legacy-save", "iptables-nft-save")
    )
    saved += node.run("ip6tables-nft-save", check=False).stdout
    tables = node.run("nft", "list", "tables").stdout.splitlines()
    return {
        "iptables": ":cali-" in saved,
        "ipset": any(s.startswith("cali") for s in node.run("ipset", "list", "-n").stdout.split()),
        "nftables": any(t.split()[-1] in ("cali", "cali-svc") for t in tables if t.strip()),
    }


def _run(cluster: Cluster, mode: str | None = None) -> None:
    felix = cluster.start_driver(NFTablesMode=mode) if mode else cluster.start_driver()
    try:
        # Allowed and denied verdicts, both families: policy is in force.
        probes = [p for p in matrix() if p.src in ("web-1", "prom-1", "node")]
        assert cluster.failures(probes) == []
    finally:
        felix.close_input()
        code, err = felix.wait()
    assert code == 0, err


def test_switching_both_ways_leaves_nothing_of_the_other(topology: Topology) -> None:
    cluster = Cluster(topology)
    node = cluster.node
    _run(cluster)  # NFTablesMode unset: Felix's default, Disabled
    assert _ours(node) == {"iptables": True, "ipset": True, "nftables": False}
    # Auto keeps a node that runs on iptables there.
    _run(cluster, "Auto")
    assert _ours(node) == {"iptables": True, "ipset": True, "nftables": False}
    _run(cluster, "Enabled")
    assert _ours(node) == {"iptables": False, "ipset": False, "nftables": True}
    # Auto on a node with no iptables chains of ours: nftables.
    _run(cluster, "Auto")
    assert _ours(node) == {"iptables": False, "ipset": False, "nftables": True}
    _run(cluster, "Disabled")
    assert _ours(node) == {"iptables": True, "ipset": True, "nftables": False}


def test_cleanup_on_nftables_removes_only_what_we_own(topology: Topology) -> None:
    cluster = Cluster(topology)
    node = cluster.node
    node.run("nft", "add", "table", "ip", "foreign")
    node.run("nft", "add", "chain", "ip", "foreign", "c")
    node.run("iptables", "-N", "FOREIGN")
    node.run("ipset", "create", "foreign", "hash:ip")
    before = node.run("nft", "list", "tables").stdout
    _run(cluster, "Enabled")
    assert _ours(node)["nftables"]
    state = ("--sysctl-state", str(cluster.sysctl_state))
    result = topology.run(node, sys.executable, str(REPO / "driver.py"), *state, "cleanup")
    assert result.returncode == 0, result.stderr
    assert _ours(node) == {"iptables": False, "ipset": False, "nftables": False}
    assert node.run("nft", "list", "tables").stdout == before
    assert ":FOREIGN" in node.run("iptables-save").stdout
    assert node.run("ipset", "list", "-n").stdout.split() == ["foreign"]
