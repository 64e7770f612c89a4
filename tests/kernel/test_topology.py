"""Self-test of the topology library, with real packets on this kernel.

Two things must hold for driver tests built on it to mean anything: the
library's probes tell working paths from broken ones, and the library wires
pods exactly as the CNI does and no further, so that connectivity in a driver
test is the driver's doing. ``wire_pod_manually`` stands in for the driver.
"""

from __future__ import annotations

import json
import time

import pytest

from testbed.topology import (
    HOST_VETH_LL,
    HOST_VETH_MAC,
    AgentError,
    Family,
    Node,
    Pod,
    Topology,
    TopologyError,
    connectivity_matrix,
    list_netns,
)
from tests.kernel.marks import requires_root

pytestmark = [requires_root, pytest.mark.slow, pytest.mark.own_backend]

PORT = 8080
CLOSED_PORT = 9


def _alive(pid: int) -> bool:
    """Running, not a zombie: killed orphans linger as zombies if pid 1 never reaps."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _two_pods(topo: Topology, *, wire: bool = True) -> tuple[Node, Pod, Pod]:
    node = topo.add_node()
    a = node.add_pod("pod-a", "10.65.0.10", "fd00:10:65::a")
    b = node.add_pod("pod-b", "10.65.0.11", "fd00:10:65::b")
    if wire:
        node.wire_pod_manually(a)
        node.wire_pod_manually(b)
    for pod in (a, b):
        pod.listen("tcp", PORT)
        pod.listen("udp", PORT)
    return node, a, b


def test_pods_are_wired_like_the_cni_and_no_further(topology: Topology) -> None:
    node, a, _ = _two_pods(topology, wire=False)
    [host_side] = json.loads(node.ip("-j", "addr", "show", "dev", a.iface).stdout)
    assert host_side["address"] == HOST_VETH_MAC
    assert "UP" in host_side["flags"]
    # Only the kernel's own link-local: no IPv4 address, no extra IPv6 one.
    assert [x["local"] for x in host_side["addr_info"]] == [HOST_VETH_LL]
    assert len(a.iface) <= 15
    assert a.iface.startswith("cali")
    # The driver's job, left undone: no route to the pod, no proxy ARP.
    assert "10.65.0.10" not in node.ip("route").stdout
    assert "fd00:10:65::a" not in node.ip("-6", "route").stdout
    assert node.sysctl(f"net.ipv4.conf.{a.iface}.proxy_arp") == "0"
    assert a.ip("route").stdout.splitlines() == [
        "default via 169.254.1.1 dev eth0 ",
        "169.254.1.1 dev eth0 scope link ",
    ]
    assert f"default via {HOST_VETH_LL} dev eth0" in a.ip("-6", "route").stdout


def test_node_has_uplink_default_routes_and_forwarding(topology: Topology) -> None:
    node = topology.add_node()
    assert "default via 192.168.200.2 dev eth0" in node.ip("route").stdout
    assert "default via fd00:200::2 dev eth0" in node.ip("-6", "route").stdout
    assert node.sysctl("net.ipv4.ip_forward") == "1"
    assert node.sysctl("net.ipv6.conf.all.forwarding") == "1"
    assert topology.external is node.external
    assert node.external.ping(node.address(4))
    assert node.external.ping(node.address(6))


def test_pod_to_pod_fails_until_the_pods_are_wired(topology: Topology) -> None:
    node, a, b = _two_pods(topology, wire=False)
    for dst in (b.ipv4, b.ipv6):
        assert dst is not None
        assert not a.can_connect("tcp", dst, PORT, timeout=0.3)
        assert not a.ping(dst, timeout=0.3)
    node.wire_pod_manually(a)
    node.wire_pod_manually(b)
    # a's ARP entry for 169.254.1.1 is still INCOMPLETE from the failed tries;
    # the kernel re-asks only on its 1 s retransmit timer, so allow for one.
    assert a.can_connect("tcp", b.ipv4, PORT, timeout=3.0)


@pytest.mark.parametrize("family", [4, 6])
def test_pod_to_pod_tcp_udp_icmp(topology: Topology, family: Family) -> None:
    _, a, b = _two_pods(topology)
    dst = b.address(family)
    tcp = a.connect("tcp", dst, PORT)
    assert tcp.ok, tcp
    assert tcp.reply == "pod-b"
    udp = a.connect("udp", dst, PORT)
    assert udp.ok, udp
    assert udp.reply == "pod-b"
    assert a.ping(dst)
    assert b.ping(a.address(family))


@pytest.mark.parametrize("family", [4, 6])
def test_pod_to_external_routes_back_via_the_node(topology: Topology, family: Family) -> None:
    _, a, _ = _two_pods(topology)
    external = topology.external
    external.listen("tcp", 80)
    external.listen("udp", 53)
    assert a.connect("tcp", external.address(family), 80).reply == "node-external"
    assert a.connect("udp", external.address(family), 53).reply == "node-external"
    assert a.ping(external.address(family))
    # External clients reach pods too (no NAT anywhere: the source is the pod).
    assert external.can_connect("tcp", a.address(family), PORT)
    assert external.peers("tcp", 80) == [a.address(family)]


def test_peers_report_the_client_pod_ip(topology: Topology) -> None:
    _, a, b = _two_pods(topology)
    assert a.can_connect("tcp", b.ipv4, PORT)
    assert a.can_connect("udp", b.address(6), PORT)
    assert b.peers("tcp", PORT) == ["10.65.0.10"]
    assert b.peers("udp", PORT) == ["fd00:10:65::a"]


@pytest.mark.parametrize("family", [4, 6])
def test_a_port_without_listener_fails_quickly(topology: Topology, family: Family) -> None:
    _, a, b = _two_pods(topology)
    start = time.monotonic()
    tcp = a.connect("tcp", b.address(family), CLOSED_PORT, timeout=1.0)
    assert (tcp.ok, tcp.error) == (False, "refused")
    assert time.monotonic() - start < 0.5
    start = time.monotonic()
    udp = a.connect("udp", b.address(family), CLOSED_PORT, timeout=0.5)
    assert not udp.ok
    assert time.monotonic() - start < 1.0


def test_a_held_connection_keeps_working_until_closed(topology: Topology) -> None:
    _, a, b = _two_pods(topology)
    held = a.hold("tcp", b.ipv4, PORT)
    assert held.first_reply == "pod-b"
    assert all(held.check() for _ in range(5))
    assert b.peers("tcp", PORT) == ["10.65.0.10"]  # one connection, many exchanges
    held.close()
    with pytest.raises(AgentError):
        held.check()
    with pytest.raises(AgentError, match="refused"):
        a.hold("tcp", b.ipv4, CLOSED_PORT)


def test_connectivity_matrix_probes_in_parallel(topology: Topology) -> None:
    _, a, b = _two_pods(topology)
    external = topology.external
    sources = [a, b, external]
    allowed = connectivity_matrix(sources, [a, b], "tcp", PORT)
    assert set(allowed) == {(s.name, t) for s in sources for t in ("pod-a", "pod-b")}
    assert all(allowed.values())
    # A silently dropped probe costs a whole timeout; all of them together, one.
    b.run("ip6tables", "-A", "INPUT", "-p", "tcp", "--dport", str(PORT), "-j", "DROP")
    start = time.monotonic()
    denied = connectivity_matrix(sources, [a, b], "tcp", PORT, family=6, timeout=0.5)
    assert time.monotonic() - start < 1.5
    assert [t for (_, t), ok in denied.items() if not ok] == ["pod-b"] * 3
    assert all(ok for (_, t), ok in denied.items() if t == "pod-a")


def test_namespaces_are_short_prefixed_and_deleted_on_exit() -> None:
    with Topology() as topo:
        _, a, b = _two_pods(topo)
        assert a.can_connect("tcp", b.ipv4, PORT)
        names = [ns.netns for ns in topo.namespaces()]
        agent_pids = [pid for ns in topo.namespaces() if (pid := ns.agent.pid) is not None]
        assert set(topo.leftovers()) == set(names)
    assert all(name.startswith("dpt") and len(name) < 15 for name in names)
    assert agent_pids
    assert not [name for name in list_netns() if name.startswith(topo.prefix)]
    assert not [pid for pid in agent_pids if _alive(pid)]


def test_namespaces_are_deleted_when_the_body_raises() -> None:
    topo = Topology()
    with pytest.raises(RuntimeError, match="boom"), topo:
        node = topo.add_node()
        node.add_pod("pod-a", "10.65.0.10")
        # A stray process inside must not keep anything alive.
        stray = int(node.run("sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!").stdout)
        raise RuntimeError("boom")
    assert topo.leftovers() == []
    assert not _alive(stray)


def test_prefixes_differ_between_topologies() -> None:
    with Topology() as first, Topology() as second:
        assert not first.prefix.startswith(second.prefix)
        assert not second.prefix.startswith(first.prefix)


def test_bulk_veths_land_up_and_a_deleted_namespace_is_gone(topology: Topology) -> None:
    node, pods = topology.new_netns("nod"), topology.new_netns("pod")
    pairs = [(f"cali{i:04d}", f"pe{i:04d}") for i in range(40)]
    topology.add_veths(node, pairs, pods)

    def up_links(netns: str) -> set[str]:
        out = topology.run(netns, "ip", "-o", "link", "show", "up").stdout
        return {line.split(": ")[1].split("@")[0] for line in out.splitlines()}

    assert {host for host, _ in pairs} <= up_links(node)
    assert {peer for _, peer in pairs} <= up_links(pods)
    topology.delete_netns(pods)
    assert pods not in list_netns()
    assert node in topology.leftovers()
    with pytest.raises(TopologyError, match="not a namespace of this topology"):
        topology.add_veths(node, [("x0", "y0")], "dpt-someone-else")
