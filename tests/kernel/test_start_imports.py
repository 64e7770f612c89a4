"""A start imports only what the node uses (issue 48: process start to first apply).

Under Felix on a node that needs neither (no VXLAN, services from Felix,
no ``--listen``), the driver programs its first apply without pyroute2
(its package import alone was a tenth of a second), the Kubernetes
client's HTTP and YAML stack, prometheus-client or rich. Python's own
import log (``PYTHONPROFILEIMPORTTIME``) says what was imported; the
platform's reads go through the driver's own netlink sockets instead.
On iptables, the default, none of the nftables backend's modules is
loaded either.
"""

from __future__ import annotations

import os

import pytest

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.topology import Topology
from tests.felix_harness import FelixHarness
from tests.kernel.marks import requires_root

pytestmark = [requires_root, pytest.mark.own_backend]

# Imported only by what this node does not use.
_NOT_NEEDED = ("pyroute2", "httpx", "yaml", "prometheus_client", "rich", "importlib.metadata")


def _imported(stderr: str) -> set[str]:
    """Every module Python's import log names."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.mark.parametrize("mode", ["Disabled", "Enabled"])
def test_a_first_apply_imports_none_of_what_the_node_does_not_use(
    topology: Topology, mode: str
) -> None:
    netns = topology.new_netns("imp")
    topology.run(netns, "ip", "link", "set", "lo", "up")
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    felix = FelixHarness("--platform", "linux", "--mtu-file", "none", netns=netns, env=env)
    try:
        felix.send(
            pb.ConfigUpdate(config={"FelixHostname": "node-1", "NFTablesMode": mode}),
            pb.InSync(),
        )
        felix.recv_until("dataplane_in_sync")
    finally:
        felix.close_input()
        code, stderr = felix.wait()
    assert code == 0, stderr[-2000:]
    imported = _imported(stderr)
    assert "dataplane.linux.platform" in imported  # the log is complete
    assert {m for m in imported if m.split(".")[0] in _NOT_NEEDED or m in _NOT_NEEDED} == set()
    if mode == "Disabled":
        # iptables: of nftables, only how the mode is chosen and the names
        # of the tables a switch of mode would leave behind.
        nftables = {m for m in imported if m.startswith("dataplane.linux.nftables.")}
        assert nftables == {"dataplane.linux.nftables.mode", "dataplane.linux.nftables.names"}
    # The first apply did program: the driver's own chains or table are there.
    if mode == "Enabled":
        assert "table ip cali" in topology.run(netns, "nft", "list", "tables").stdout
    else:
        saved = "".join(
            topology.run(netns, tool, "-t", "filter").stdout
            for tool in ("iptables-nft-save", "iptables-legacy-save")
        )
        assert ":cali-FORWARD" in saved
