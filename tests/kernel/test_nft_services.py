"""The nftables services table on the real kernel: real connections, kube-proxy semantics.

A node with three pods (a, b, c); each pod's server answers with its name
and remembers who connected, so a reply says which backend served and the
peer list says whether the node masqueraded. The table is programmed by
:class:`ServiceTable` from the test process, its element socket opened in
the node's namespace; after the first apply every service change must be
elements only (no ``nft`` run).
"""

from __future__ import annotations

import collections
import json
import shutil
from collections.abc import Iterator
from typing import Literal

import pytest
import trio

from dataplane.linux.kernel.cmd import ProcessRunner
from dataplane.linux.kernel.netns import socket_in
from dataplane.linux.nftables.elements import ElementWriter, netfilter_socket
from dataplane.linux.nftables.reader import TableReader
from dataplane.linux.nftables.service_layout import BANK, ServiceLayout
from dataplane.linux.nftables.service_table import ServiceTable
from dataplane.model.services import Backend, BackendPort, Service, ServiceKey, ServicePort
from testbed.topology import POD_CIDR_V4, POD_CIDR_V6, Namespace, Node, Topology
from tests.kernel.marks import requires_root

pytestmark = [
    requires_root,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("nft") is None, reason="needs nft (nftables)"),
    pytest.mark.own_backend,
]

VIP4, VIP6 = "10.96.0.10", "fd00:96::10"
MASQ = 0x4000000
PODS = {"a": ("10.65.0.11", "fd00:10:65::11"), "b": ("10.65.0.12", "fd00:10:65::12")}
PODS["c"] = ("10.65.0.13", "fd00:10:65::13")
HTTP = (ServicePort("http", "tcp", 80),)


def backend(pod: str, family: int = 4, *, local: bool = True, proto: str = "tcp") -> Backend:
    return Backend(PODS[pod][family == 6], (BackendPort("http", proto, 8080),), local=local)


def web(*backends: Backend, **kwargs: object) -> Service:
    fields: dict[str, object] = {"cluster_ips": (VIP4, VIP6), "ports": HTTP, **kwargs}
    return Service(ServiceKey("prod", "web"), backends=backends, **fields)  # type: ignore[arg-type]


class Programmed:
    """Both families' tables of one node, applied as the platform would."""

    def __init__(self, node: Node) -> None:
        runner = ProcessRunner(node.netns)
        writer = ElementWriter(lambda: socket_in(node.netns, netfilter_socket))
        reader = TableReader(lambda: socket_in(node.netns, netfilter_socket))
        self.tables = [
            ServiceTable(
                ServiceLayout(v, "cali-svc", MASQ), runner, writer, reader, writer.send_rules
            )
            for v in (4, 6)
        ]
        self.tables[0].set_pools([POD_CIDR_V4])
        self.tables[1].set_pools([POD_CIDR_V6])

    def set(self, *services: Service) -> None:
        for table in self.tables:
            for service in services:
                table.set_service(service)

    def remove(self, key: ServiceKey) -> None:
        for table in self.tables:
            table.remove_service(key)

    def apply(self) -> None:
        async def run() -> None:
            for table in self.tables:
                await table.apply()

        trio.run(run)

    def structure_writes(self) -> int:
        return sum(t.structure_writes for t in self.tables)


@pytest.fixture
def node() -> Iterator[Node]:
    with Topology() as topology:
        node = topology.add_node()
        for name, (v4, v6) in PODS.items():
            pod = node.add_pod(name, v4, v6)
            node.wire_pod_manually(pod)
            pod.listen("tcp", 8080)
            pod.listen("udp", 8080)
        yield node


def served(src: Namespace, dst: str, port: int, count: int = 30, proto: str = "tcp") -> set[str]:
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        result = src.connect(proto, dst, port, timeout=2)  # type: ignore[arg-type]
        seen[result.reply if result.ok and result.reply else f"failed:{result.error}"] += 1
    return set(seen)


def elements(node: Node, family: str, name: str) -> list[object]:
    what = "map" if name.endswith(("addr", "port")) else "set"
    listed = json.loads(node.run("nft", "-j", "list", what, family, "cali-svc", name).stdout)
    found = next(item[what] for item in listed["nftables"] if what in item)
    return list(found.get("elem", []))


def test_cluster_ips_balance_change_and_refuse_with_elements_only(node: Node) -> None:
    pods = node.pods
    table = Programmed(node)
    dns = Service(
        ServiceKey("prod", "dns"),
        cluster_ips=("10.96.0.53",),
        ports=(ServicePort("http", "udp", 53),),
        backends=(backend("c", proto="udp"),),
    )
    table.set(web(backend("a"), backend("b"), backend("a", 6), backend("b", 6)), dns)
    table.apply()
    assert served(pods["c"], VIP4, 80) == {"a", "b"}  # forwarded: prerouting
    assert served(node, VIP4, 80) == {"a", "b"}  # the node's own: output
    assert served(pods["c"], VIP6, 80) == {"a", "b"}
    assert served(pods["a"], "10.96.0.53", 53, 3, "udp") == {"c"}
    assert pods["c"].peers("tcp", 8080) == []  # nothing reached c's TCP server
    assert table.structure_writes() == 2

    # A backend change, a backend added: elements, no nft.
    table.set(web(backend("c"), backend("c", 6)))
    table.apply()
    assert served(pods["a"], VIP4, 80) == {"c"}
    assert served(pods["a"], VIP6, 80) == {"c"}
    table.set(web(backend("b"), backend("c"), backend("b", 6), backend("c", 6)))
    table.apply()
    assert served(pods["a"], VIP4, 80) == {"b", "c"}
    # The second bank that put them in force at once is empty again.
    for family in ("ip", "ip6"):
        assert elements(node, family, "fe1") == elements(node, family, "fe1_2") == []
        for name in ("addr", "port"):
            slots = [e[0]["concat"][-1] for e in elements(node, family, name)]  # type: ignore[index]
            assert slots and max(slots) < BANK

    # No backend at all: refused at once, not left to time out.
    table.set(web())
    table.apply()
    assert served(pods["a"], VIP4, 80, 2) == {"failed:refused"}
    assert served(node, VIP6, 80, 2) == {"failed:refused"}

    # Hairpin: a pod reaching itself through the VIP is masqueraded.
    table.set(web(backend("a"), backend("a", 6)))
    table.apply()
    assert served(pods["a"], VIP4, 80, 3) == {"a"}
    assert served(pods["a"], VIP6, 80, 3) == {"a"}

    table.remove(ServiceKey("prod", "web"))
    table.remove(ServiceKey("prod", "dns"))
    table.apply()
    assert table.structure_writes() == 2
    for name in ("fe", "addr", "port", "refused", "hairpin", "fe_1", "fe_2"):
        assert elements(node, "ip", name) == []
        assert elements(node, "ip6", name) == []


def test_node_ports_and_external_traffic_policies(node: Node) -> None:
    pods, outside = node.pods, node.external
    node_ip = node.address(4)
    table = Programmed(node)
    port = (ServicePort("http", "tcp", 80, node_port=30080),)
    local = web(
        backend("a"), backend("b", local=False), ports=port, type="NodePort", external_local=True
    )
    table.set(local)
    table.apply()
    # Local: the outside reaches only the local backend, which sees the client.
    assert served(outside, node_ip, 30080) == {"a"}
    assert set(pods["a"].peers("tcp", 8080)) == {outside.address(4)}
    # Pods reach every backend, unmasqueraded.
    assert served(pods["c"], node_ip, 30080) == {"a", "b"}
    assert pods["b"].peers("tcp", 8080) == [pods["c"].address(4)] * len(
        pods["b"].peers("tcp", 8080)
    )

    # Cluster: every backend, masqueraded (backends never see the client).
    table.set(web(backend("a"), backend("b", local=False), ports=port, type="NodePort"))
    table.apply()
    assert served(outside, node_ip, 30080) == {"a", "b"}
    assert outside.address(4) not in pods["b"].peers("tcp", 8080)

    # Local with no local backend: the outside is dropped (times out), pods still served.
    table.set(web(backend("b", local=False), ports=port, type="NodePort", external_local=True))
    table.apply()
    assert served(outside, node_ip, 30080, 1) == {"failed:timeout"}
    assert served(pods["c"], node_ip, 30080, 3) == {"b"}
    assert table.structure_writes() == 2


def test_a_restart_writes_nothing_and_repairs_what_was_tampered_with(node: Node) -> None:
    pods = node.pods
    service = web(backend("a"), backend("b"), backend("a", 6), backend("b", 6))
    first = Programmed(node)
    first.set(service)
    first.apply()
    before = elements(node, "ip", "addr")
    # A restart onto the table as it would be written: nothing written.
    again = Programmed(node)
    again.set(service)
    again.apply()
    assert again.structure_writes() == 0
    assert sum(t.element_writes for t in again.tables) == 0

    node.run("nft", "flush", "map", "ip", "cali-svc", "addr")
    node.run("nft", "flush", "chain", "ip", "cali-svc", "routed")
    node.run("nft", "add", "element", "ip", "cali-svc", "fe", "{ 10.96.9.9 . tcp . 9 }")
    assert served(pods["c"], VIP4, 80, 1) != {"a"} and served(pods["c"], VIP4, 80, 1) != {"b"}

    # A new process with the same desired state: exactly what was wanted, at once.
    second = Programmed(node)
    second.set(service)
    second.apply()
    assert elements(node, "ip", "addr") == before
    assert [e for e in elements(node, "ip", "fe") if "10.96.9.9" in json.dumps(e)] == []
    assert served(pods["c"], VIP4, 80) == {"a", "b"}

    node.run("nft", "flush", "set", "ip6", "cali-svc", "fe")
    for table in second.tables:
        table.mark_for_resync()
    second.apply()
    assert served(pods["c"], VIP6, 80) == {"a", "b"}


def test_a_refresh_reads_back_and_the_next_apply_repairs_only_what_differs(
    node: Node,
) -> None:
    """Beside the applies: an element deleted or added behind our back is
    one element transaction; a flushed chain or a rule changed in place
    re-asserts the rules; a deleted table is written whole. A refresh of
    an untouched table marks nothing, and the apply after it writes nothing."""
    pods = node.pods
    table = Programmed(node)
    table.set(web(backend("a"), backend("b"), backend("a", 6), backend("b", 6)))
    table.apply()
    v4 = table.tables[0]

    def refresh() -> bool:
        return trio.run(v4.refresh)

    def writes() -> tuple[int, int]:
        return v4.structure_writes, v4.element_writes

    assert not refresh() and not refresh()  # the first read also takes the rules' hash
    before = writes()
    table.apply()
    assert writes() == before

    node.run("nft", "delete", "element", "ip", "cali-svc", "fe", f"{{ {VIP4} . tcp . 80 }}")
    node.run("nft", "add", "element", "ip", "cali-svc", "refused", "{ 10.96.9.9 . tcp . 9 }")
    assert refresh()
    table.apply()
    assert writes() == (before[0], before[1] + 1)
    assert served(pods["c"], VIP4, 80) == {"a", "b"}
    assert elements(node, "ip", "refused") == []

    # Rules and an element at once: one refresh finds both.
    node.run("nft", "flush", "chain", "ip", "cali-svc", "routed")
    node.run("nft", "delete", "element", "ip", "cali-svc", "fe", f"{{ {VIP4} . tcp . 80 }}")
    assert refresh()
    table.apply()
    assert writes()[0] == before[0] + 1
    assert served(pods["c"], VIP4, 80) == {"a", "b"}

    # The same number of rules, one of them another: the hash tells.
    assert not refresh()
    listed = json.loads(
        node.run("nft", "-a", "-j", "list", "chain", "ip", "cali-svc", "firewall").stdout
    )
    (handle,) = [item["rule"]["handle"] for item in listed["nftables"] if "rule" in item]
    node.run(
        "nft",
        "replace",
        "rule",
        "ip",
        "cali-svc",
        "firewall",
        "handle",
        str(handle),
        "ip",
        "saddr",
        "203.0.113.1",
        "drop",
    )
    assert refresh()
    table.apply()
    assert writes()[0] == before[0] + 2

    node.run("nft", "delete", "table", "ip", "cali-svc")
    assert refresh()
    table.apply()
    assert served(pods["c"], VIP4, 80) == {"a", "b"}
    assert not refresh() and not refresh()


def test_load_balancer_source_ranges_admit_only_their_sources(node: Node) -> None:
    pods, outside = node.pods, node.external
    lb = "203.0.113.10"
    outside.ip("route", "add", lb, "via", node.address(4))
    table = Programmed(node)

    def balancer(*ranges: str) -> Service:
        return web(backend("a"), load_balancer_ips=(lb,), source_ranges=ranges)

    table.set(balancer("10.0.0.0/8"))
    table.apply()
    assert served(pods["c"], lb, 80, 3) == {"a"}  # a pod: in range
    assert served(outside, lb, 80, 1) == {"failed:timeout"}  # the outside: not

    table.set(balancer("10.0.0.0/8", "192.168.200.0/24", "192.168.200.2/32"))
    table.apply()
    assert served(outside, lb, 80, 3) == {"a"}

    table.set(web(backend("a"), load_balancer_ips=(lb,)))  # no ranges: open
    table.apply()
    assert served(outside, lb, 80, 3) == {"a"}
    assert elements(node, "ip", "fw") == elements(node, "ip", "fw_allowed") == []


@pytest.mark.parametrize("family", [4, 6])
def test_client_ip_affinity_pins_and_lets_go_of_a_removed_backend(
    node: Node, family: Literal[4, 6]
) -> None:
    """kube-proxy's ClientIP affinity, each family: a client keeps its
    backend, through a cluster IP and a node port; a backend removed takes
    its clients' entries along (swept), so they are pinned afresh to one
    that is left; affinity off lets every entry go. All of it elements:
    the timeout in use is part of the structure written first (on IPv6
    its record rules through netlink, which nft 1.0.6 cannot write)."""
    pods, outside = node.pods, node.external
    node_ip = node.address(family)
    vip = VIP4 if family == 4 else VIP6
    nft_family = "ip" if family == 4 else "ip6"
    table = Programmed(node)
    port = (ServicePort("http", "tcp", 80, node_port=30080),)
    sticky: dict[str, object] = {"ports": port, "type": "NodePort"}
    sticky |= {"session_affinity": True, "affinity_timeout": 600}
    table.set(web(backend("a", family), backend("b", family), **sticky))
    table.apply()
    # Unpinned, 20 connections reach one of two backends with p = 2**-19.
    pinned = served(pods["c"], vip, 80, 20)
    assert len(pinned) == 1 and pinned <= {"a", "b"}, pinned
    from_outside = served(outside, node_ip, 30080, 20)
    assert len(from_outside) == 1 and from_outside <= {"a", "b"}, from_outside
    assert len(elements(node, nft_family, "aff_addr")) == 1
    assert len(elements(node, nft_family, "np_aff_port")) == 1

    (gone,) = pinned
    left = "b" if gone == "a" else "a"
    table.set(web(backend(left, family), **sticky))
    table.apply()
    assert served(pods["c"], vip, 80, 5) == {left}
    assert served(outside, node_ip, 30080, 5) == {left}
    # The one gone back: every client stays where it was pinned since.
    table.set(web(backend("a", family), backend("b", family), **sticky))
    table.apply()
    assert served(pods["c"], vip, 80, 20) == {left}
    assert served(outside, node_ip, 30080, 20) == {left}
    # The entries to the removed backend, at least c's.
    assert table.tables[family == 6].swept >= 2
    # A restart onto the table as it is writes nothing; a refresh finds the
    # record rules gone (flushed behind our back) and the next apply
    # writes them again, through netlink on IPv6.
    again = Programmed(node)
    again.set(web(backend("a", family), backend("b", family), **sticky))
    again.apply()
    assert again.structure_writes() == 0
    ours = again.tables[family == 6]
    chain = "aff-record" if family == 6 else "nat-postrouting"
    node.run("nft", "flush", "chain", nft_family, "cali-svc", chain)
    assert trio.run(ours.refresh)
    again.apply()
    assert ours.structure_writes == 1
    assert (
        "update @aff_addr" in node.run("nft", "list", "chain", nft_family, "cali-svc", chain).stdout
    )

    fresh = {"ports": port, "type": "NodePort"}
    table.set(web(backend("a", family), backend("b", family), **fresh))
    table.apply()
    for name in ("aff_addr", "aff_port", "np_aff_addr", "np_aff_port"):
        assert elements(node, nft_family, name) == []
    assert served(pods["c"], vip, 80, 20) == {"a", "b"}
    assert table.structure_writes() == 2
