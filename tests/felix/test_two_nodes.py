"""Two nodes under two real Felixes, on VXLAN: cross-node verdicts with real packets.

Two node namespaces on different subnets of a routed underlay (which
routes no pod address), each joined to the cluster by the real
``calico-node`` start-up (its address, its VXLAN tunnel address from its
IPAM block) and running its own calico-felix and driver; the pool is
``vxlanMode: Always``. Felix computes the remote blocks' routes and the
other node's VTEP from what Calico IPAM and calico-node wrote; the
drivers build the overlay. Pods on different nodes reach each other only
through it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.calico import Calico
from testbed.control_plane import ControlPlane
from testbed.felix import Felix
from testbed.topology import Node, Pod, Proto, Topology
from testbed.underlay import Underlay
from tests.felix.cluster import (
    PORT,
    UDP_PORT,
    complaints,
    skip_unless_runnable,
    verdicts,
    without_counters,
)
from tests.waiting import eventually

pytestmark = pytest.mark.slow


@dataclass
class TwoNodes:
    calico: Calico
    underlay: Underlay
    nodes: dict[str, Node]
    felixes: dict[str, Felix]
    pods: dict[str, Pod]
    env: dict[str, str]

    def reaches(self, src: str, dst: str, proto: Proto = "tcp") -> bool:
        port = PORT if proto == "tcp" else UDP_PORT
        probe = self.pods[src].connect(proto, self.pods[dst].ipv4, port, timeout=0.5)
        return probe.ok and probe.reply == dst

    def expect(
        self, want: dict[tuple[str, str], bool], proto: Proto = "tcp", what: str = ""
    ) -> None:
        logs = [str(f.log_path) for f in self.felixes.values()]
        verdicts(
            lambda pair: self.reaches(pair[0], pair[1], proto),
            {f"{a}->{b}": ok for (a, b), ok in want.items()},
            want,
            f"{what} ({proto}; Felix logs {logs})",
        )


@pytest.fixture(scope="module")
def two_nodes(
    felix_setup: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TwoNodes]:
    release, nftables_mode = felix_setup
    skip_unless_runnable(release)
    workdir = Path(tmp_path_factory.mktemp(f"two-nodes-{release}-{nftables_mode}"))
    with Topology() as topo, ControlPlane(topo, workdir, controller_manager=True) as cp:
        calico = Calico(cp, release, workdir)
        calico.install(vxlan=True)
        underlay = Underlay(topo)
        nodes = {
            "node-a": underlay.add_node("node-a", underlay.add_subnet(101)),
            "node-b": underlay.add_node("node-b", underlay.add_subnet(102)),
        }
        for node in nodes.values():
            calico.add_node(node)
        calico.create_namespace("apps", {"team": "a"})
        env = {"FELIX_NFTABLESMODE": nftables_mode}
        felixes = {name: calico.start_felix(node, env) for name, node in nodes.items()}
        made = TwoNodes(calico, underlay, nodes, felixes, {}, env)
        try:
            for name, node, app in (
                ("a-client", nodes["node-a"], "client"),
                ("a-other", nodes["node-a"], "other"),
                ("b-web", nodes["node-b"], "web"),
                ("b-client", nodes["node-b"], "client"),
            ):
                ports = [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
                pod = calico.add_pod(node, "apps", name, {"app": app}, ports)
                pod.listen("tcp", PORT, 4)
                pod.listen("udp", UDP_PORT, 4)
                made.pods[name] = pod
            yield made
        finally:
            for felix in felixes.values():
                felix.stop()
                print(f"Felix's log: {felix.log_path}")


CROSS = {
    ("a-client", "b-web"): True,
    ("a-other", "b-web"): True,
    ("b-web", "a-client"): True,
    ("b-client", "b-web"): True,
}


def test_pods_on_two_nodes_reach_each_other_over_vxlan(two_nodes: TwoNodes) -> None:
    two_nodes.expect(CROSS, what="across the nodes, through the overlay")
    two_nodes.underlay.reset_counters()
    assert two_nodes.reaches("a-client", "b-web")
    seen = two_nodes.underlay.counters(4)
    assert seen.vxlan > 0 and seen.pod == 0, seen  # encapsulated, never a bare pod address
    two_nodes.expect({("a-client", "b-web"): True, ("b-web", "a-other"): True}, "udp")
    # Each pod's address is from its own node's IPAM block (the underlay
    # routes no pod address: the traffic went as VXLAN between the nodes).
    affinities = two_nodes.calico.cp.get("/apis/crd.projectcalico.org/v1/blockaffinities")
    blocks = {
        ipaddress.ip_network(a["spec"]["cidr"]): a["spec"]["node"] for a in affinities["items"]
    }
    for pod in two_nodes.pods.values():
        address = ipaddress.ip_address(pod.ipv4)
        assert [blocks[b] for b in blocks if address in b] == [pod.node.name], pod
    for name, node in two_nodes.nodes.items():
        link = node.run("ip", "-d", "link", "show", "vxlan.calico").stdout
        assert "vxlan id 4096" in link, f"{name}: {link}"


def test_a_policy_on_one_node_judges_traffic_from_the_other(two_nodes: TwoNodes) -> None:
    calico = two_nodes.calico
    path = "/apis/networking.k8s.io/v1/namespaces/apps/networkpolicies"
    calico.cp.create(
        path,
        {
            "metadata": {"name": "web-from-clients"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}],
            },
        },
    )
    try:
        two_nodes.expect(
            {("a-client", "b-web"): True, ("a-other", "b-web"): False, ("b-client", "b-web"): True},
            what="node-b's policy selects node-a's pods by label",
        )
    finally:
        calico.cp.delete(f"{path}/web-from-clients")
    two_nodes.expect(CROSS)
    # Felix removes a policy after the endpoints stop using it: its chains
    # go in a later apply than the rules that reached them, so node-b is
    # settled (for the next test's before-and-after) only once they are.
    node_b = two_nodes.nodes["node-b"]
    eventually(lambda: not _policy_chains(node_b), 30, "node-b without the policy's chains")


def _policy_chains(node: Node) -> list[str]:
    """The policy chains (inbound and outbound) node ``node`` holds, on either backend."""
    dumps = node.run("nft", "list", "ruleset").stdout + node.run("iptables-save").stdout
    return re.findall(r"cali-p[io]-[^\s\"]+", dumps)


def test_one_node_s_felix_restart_is_nothing_to_the_other(two_nodes: TwoNodes) -> None:
    two_nodes.expect(CROSS)
    b = two_nodes.nodes["node-b"]
    before = b.run("nft", "-a", "list", "ruleset").stdout, b.run("iptables-save").stdout
    routes = b.run("ip", "route").stdout
    held = two_nodes.pods["b-web"].hold("tcp", two_nodes.pods["a-client"].ipv4, PORT)
    a = two_nodes.felixes["node-a"]
    a.stop()
    a.restart_if_exited()
    # node-a's new driver adopts its dataplane; node-b hears nothing of it.
    two_nodes.expect(CROSS, what="after node-a's restart")
    assert held.check(), "a connection across the nodes broke"
    held.close()
    assert b.run("ip", "route").stdout == routes
    after = b.run("nft", "-a", "list", "ruleset").stdout, b.run("iptables-save").stdout
    assert _dump_lines(after) == _dump_lines(before)
    for felix in two_nodes.felixes.values():
        assert complaints(felix.log()) == []


def _dump_lines(dumps: tuple[str, str]) -> list[str]:
    """Both dumps' lines, counters blanked and iptables-save's dated comments out."""
    text = without_counters("\n".join(dumps))
    return [line for line in text.splitlines() if not line.startswith("#")]
