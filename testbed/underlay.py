"""An underlay network: nodes on routed subnets, for an overlay between them.

Model::

    node-a  eth0 (.2) ==veth== ┐
    node-b  eth0 (.3) ==veth== ┴ br101 (.1) ┐
    node-c  eth0 (.2) ==veth==   br102 (.1) ┼ router: forwarding, NO pod routes
    client  eth0 (.2) ==veth==   br100 (.1) ┘

A :class:`Subnet` is a Linux bridge inside the router namespace, holding the
router's address ``.1`` / ``::1``: subnet ``n`` is ``192.168.n.0/24`` and
``fd00:n::/64``. A node attached to a subnet is a plain
:class:`~testbed.topology.Node` (``add_pod`` and friends work as ever) whose
``eth0`` takes the subnet's next free address, with default routes via the
router. Nodes on one subnet reach each other over the bridge (Calico's
CrossSubnet case); nodes on different subnets are routed by the router.

The router knows nothing of the pod CIDRs (``10.65.0.0/16``,
``fd00:10:65::/48``): a packet with a pod address that reaches it is dropped,
so pods on different nodes only talk if the nodes build an overlay.

The ``client`` is the underlay's external host, on a subnet of its own
(:data:`CLIENT_SUBNET`), and every node's ``.external`` unless another is
given, so helpers that probe ``node.external`` keep working. Unlike the
single-node topology's external host it has no route to any pod, as a
client outside a real cluster has none: it reaches services at node
addresses (NodePorts), never pod addresses.

Counters: a chain in the router's ``mangle PREROUTING`` (both families)
sorts every unicast packet that enters the router not addressed to it into
``pod`` (a pod address as source or destination), ``vxlan`` (UDP to
:data:`VXLAN_PORT`) or ``other``. They see packets as they arrive, so a
pod-addressed packet the router then drops still counts. Only traffic that
crosses subnets passes the router: same-subnet traffic is bridged and is not
counted (the bridge's netfilter hooks are turned off in the router so that
this holds whatever ``br_netfilter`` is loaded).

Invariants: every namespace comes from ``topology.new_netns`` and is
adopted, so ``Topology.close()`` deletes it; traffic only goes to addresses
of namespaces made here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from testbed.topology import (
    _NO_DAD,
    POD_CIDR_V4,
    POD_CIDR_V6,
    External,
    Family,
    Namespace,
    Node,
    Topology,
    TopologyError,
)

__all__ = [
    "CLIENT_SUBNET",
    "VXLAN_PORT",
    "Subnet",
    "Underlay",
    "UnderlayCounters",
]

VXLAN_PORT = 4789  # IANA's, and Calico's default VXLANPort
CLIENT_SUBNET = 100
COUNT_CHAIN = "UNDERLAY-COUNT"
_FAMILIES: tuple[Family, ...] = (4, 6)
_PREFIX_LEN = {4: 24, 6: 64}
_POD_CIDR = {4: POD_CIDR_V4, 6: POD_CIDR_V6}
_TOOL = {4: "iptables", 6: "ip6tables"}
_BUCKET = re.compile(r"/\* underlay:(\w+) \*/")


@dataclass(frozen=True)
class Subnet:
    """One L2 segment: a bridge in the router, whose address is host 1.

    ``index`` names both families: 101 is ``192.168.101.0/24`` and
    ``fd00:101::/64``.
    """

    index: int

    @property
    def bridge(self) -> str:
        return f"br{self.index}"

    def host(self, family: Family, number: int) -> str:
        """Address ``number`` of this subnet (1 is the router)."""
        if family == 4:
            return f"192.168.{self.index}.{number}"
        return f"fd00:{self.index}::{number:x}"

    def cidr(self, family: Family, number: int) -> str:
        """Address ``number`` with the subnet's length, as Felix sends node addresses."""
        return f"{self.host(family, number)}/{_PREFIX_LEN[family]}"

    def network(self, family: Family) -> str:
        if family == 4:
            return f"192.168.{self.index}.0/24"
        return f"fd00:{self.index}::/64"

    def gateway(self, family: Family) -> str:
        return self.host(family, 1)


@dataclass(frozen=True)
class UnderlayCounters:
    """Packets the router has seen since the last reset, by kind."""

    vxlan: int = 0
    pod: int = 0
    other: int = 0

    def __add__(self, other: UnderlayCounters) -> UnderlayCounters:
        return UnderlayCounters(
            self.vxlan + other.vxlan, self.pod + other.pod, self.other + other.other
        )


class Underlay:
    """A router namespace with subnets that nodes and clients attach to.

    Attributes:
        router: the router's namespace (no address of its own to probe).
        client: the shared external host, on subnet :data:`CLIENT_SUBNET`.
        subnets: every subnet made so far, by index.
    """

    def __init__(self, topology: Topology, name: str = "underlay") -> None:
        self.topology = topology
        self.router = Namespace(topology, f"{name}-router", topology.new_netns("rtr"))
        topology.adopt(self.router)
        self.subnets: dict[int, Subnet] = {}
        self._next_host: dict[int, int] = {}
        self._attached: dict[str, tuple[Subnet, int]] = {}  # netns -> where, which host
        self._setup_router()
        self.client = self.add_client("client", self.add_subnet(CLIENT_SUBNET))

    def _setup_router(self) -> None:
        self.router.set_sysctls(
            {**_NO_DAD, "net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": 1}
        )
        # Bridged frames must not reach iptables: the counters are for what
        # the router routes, and same-subnet traffic is not routed. The
        # switches exist only while br_netfilter is loaded.
        self.router.run(
            "sh",
            "-c",
            "for f in /proc/sys/net/bridge/bridge-nf-call-ip*tables;"
            ' do if [ -e "$f" ]; then echo 0 > "$f"; fi; done',
        )
        self.router.ip("link", "set", "lo", "up")
        for family in _FAMILIES:
            self._install_counting_chain(family)

    def _install_counting_chain(self, family: Family) -> None:
        # First match wins and RETURNs, so each packet lands in one bucket.
        # Packets for the router itself (neighbour discovery, pings to the
        # gateway) and multicast are not carried anywhere: set aside uncounted.
        pod = _POD_CIDR[family]
        rules = [
            f"-s {pod} -m comment --comment underlay:pod -j RETURN",
            f"-d {pod} -m comment --comment underlay:pod -j RETURN",
            "-m pkttype ! --pkt-type unicast -j RETURN",
            "-m addrtype --dst-type LOCAL -j RETURN",
            f"-p udp --dport {VXLAN_PORT} -m comment --comment underlay:vxlan -j RETURN",
            "-m comment --comment underlay:other -j RETURN",
        ]
        script = "\n".join(
            [
                "*mangle",
                f":{COUNT_CHAIN} - [0:0]",
                f"-A PREROUTING -j {COUNT_CHAIN}",
                *(f"-A {COUNT_CHAIN} {rule}" for rule in rules),
                "COMMIT",
                "",
            ]
        )
        self.router.run(f"{_TOOL[family]}-restore", "--noflush", stdin=script)

    # --- building -----------------------------------------------------------

    def add_subnet(self, index: int) -> Subnet:
        """A new bridge in the router, which takes host 1 of it in both families."""
        if not 1 <= index <= 255:
            raise TopologyError(f"subnet index {index}: must be a 192.168.x.0 octet, 1..255")
        if index in self.subnets:
            raise TopologyError(f"subnet {index} already exists")
        subnet = Subnet(index)
        # Snooping off: with no querier it could hold back the multicast that
        # IPv6 neighbour discovery relies on. STP is off by default, so ports
        # forward at once.
        self.router.ip_batch(
            f"link add {subnet.bridge} type bridge mcast_snooping 0",
            f"addr add {subnet.cidr(4, 1)} dev {subnet.bridge}",
            f"addr add {subnet.cidr(6, 1)} dev {subnet.bridge} nodad",
            f"link set {subnet.bridge} up",
        )
        self.subnets[index] = subnet
        self._next_host[index] = 2
        return subnet

    def add_node(self, name: str, subnet: Subnet, external: External | None = None) -> Node:
        """A node on ``subnet`` at its next free address; ``.external`` is the client."""
        number = self._take_host(subnet)
        addresses = {4: subnet.host(4, number), 6: subnet.host(6, number)}
        node = Node(
            self.topology,
            name,
            self.topology.new_netns("nod"),
            external or self.client,
            addresses,
        )
        self.topology.adopt(node)
        node.set_sysctls({**_NO_DAD, "net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": 1})
        self._attach(node, subnet, number)
        return node

    def add_client(self, name: str, subnet: Subnet) -> External:
        """An external host on ``subnet``: an address, a default route, no pod routes."""
        number = self._take_host(subnet)
        client = External(
            self.topology,
            name,
            self.topology.new_netns("cli"),
            {4: subnet.host(4, number), 6: subnet.host(6, number)},
        )
        self.topology.adopt(client)
        client.set_sysctls(_NO_DAD)
        self._attach(client, subnet, number)
        return client

    def _take_host(self, subnet: Subnet) -> int:
        if self.subnets.get(subnet.index) != subnet:
            raise TopologyError(f"subnet {subnet.index} is not one of this underlay's")
        number = self._next_host[subnet.index]
        if number > 254:
            raise TopologyError(f"subnet {subnet.index} is full")
        self._next_host[subnet.index] = number + 1
        return number

    def _attach(self, ns: Namespace, subnet: Subnet, number: int) -> None:
        """Give ``ns`` an ``eth0`` on ``subnet`` with address ``number`` and default routes."""
        self._attached[ns.netns] = (subnet, number)
        port = f"{subnet.bridge}p{number}"
        self.router.ip(
            "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns.netns
        )
        self.router.ip("link", "set", port, "master", subnet.bridge, "up")
        ns.ip_batch(
            "link set lo up",
            "link set eth0 up",
            f"addr add {subnet.cidr(4, number)} dev eth0",
            f"addr add {subnet.cidr(6, number)} dev eth0 nodad",
            f"route add default via {subnet.gateway(4)}",
            f"route add default via {subnet.gateway(6)}",
        )

    def subnet_of(self, ns: Namespace) -> Subnet:
        return self._where(ns)[0]

    def cidr(self, ns: Namespace, family: Family) -> str:
        """``ns``'s underlay address with the subnet's length, as Felix sends a node's."""
        subnet, number = self._where(ns)
        return subnet.cidr(family, number)

    def _where(self, ns: Namespace) -> tuple[Subnet, int]:
        if ns.netns not in self._attached:
            raise TopologyError(f"{ns!r} is not attached to this underlay")
        return self._attached[ns.netns]

    # --- counters -----------------------------------------------------------

    def counters(self, family: Family | None = None) -> UnderlayCounters:
        """What the router has seen since the last reset: one family, or both summed."""
        if family is None:
            return self.counters(4) + self.counters(6)
        listing = self.router.run(_TOOL[family], "-t", "mangle", "-nvx", "-L", COUNT_CHAIN).stdout
        buckets = {"vxlan": 0, "pod": 0, "other": 0}
        for line in listing.splitlines():
            match = _BUCKET.search(line)
            if match is not None:
                buckets[match.group(1)] += int(line.split()[0])
        return UnderlayCounters(**buckets)

    def reset_counters(self) -> None:
        for family in _FAMILIES:
            self.router.run(_TOOL[family], "-t", "mangle", "-Z", COUNT_CHAIN)
