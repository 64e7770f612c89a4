"""The generated node the Linux benchmarks load: seeded, sized, Felix-shaped.

``NodeBuilder`` makes the messages Felix would send a node of the given
``Sizes`` (endpoints, policies, IP sets, members), the same bytes for the
same seed, so runs on different commits compare. ``veth_node`` builds the
node's namespace with one veth pair per endpoint, through the shared
``testbed`` topology.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.message import Message

from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.node import (
    calico_iface,
    felix_set_id,
    namespace_profiles,
    pod_ipv4,
    pod_ipv6,
    workload_update,
)
from testbed.topology import Topology

ROUTE_PROTOCOL = 80  # LinuxPlatform's default route protocol number


# ---------------------------------------------------------------------------
# The generated node.
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sizes:
    endpoints: int
    policies: int
    sets: int
    members: int
    spare: int  # extra interfaces, each added as one endpoint after the load


# The workload id's name of a replica addition (see NodeBuilder.additions).
REPLICA = "replica"


def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    """The generated node's size: the defaults are docs/benchmarks.md's node."""
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--policies", type=int, default=200)
    parser.add_argument("--sets", type=int, default=500)
    parser.add_argument("--members", type=int, default=100_000)


def iface_name(index: int) -> str:
    """Endpoint ``index``'s host-side interface, named as Calico's CNI names it."""
    return calico_iface(f"pod-{index}")


def peer_name(index: int) -> str:
    return calico_iface(f"pod-{index}", prefix="pe")


@dataclass(slots=True)
class _SetPlan:
    id: str
    type: pb.IPSetUpdate.IPSetType
    size: int


class NodeBuilder:
    """Deterministic (seeded) messages for one node of the given size."""

    def __init__(self, sizes: Sizes, backend: str, seed: int = 7) -> None:
        self.sizes = sizes
        self.backend = backend
        self.rng = random.Random(seed)
        self.namespaces = [f"ns-{i:03d}" for i in range(max(1, sizes.endpoints // 20))]
        self._counter = 0
        self._tiers_of: dict[int, list[pb.TierInfo]] = {}  # endpoint -> its tiers
        self.sets = self._plan_sets()
        self.ip_sets = [s.id for s in self.sets if s.type == pb.IPSetUpdate.IP]
        self.port_sets = [s.id for s in self.sets if s.type == pb.IPSetUpdate.IP_AND_PORT]
        self.net_sets = [s.id for s in self.sets if s.type == pb.IPSetUpdate.NET]
        n_global = max(1, sizes.policies // 10) if sizes.policies > 1 else 0
        self.global_policies = [
            pb.PolicyID(name=f"security.global-{i:03d}", kind="GlobalNetworkPolicy")
            for i in range(n_global)
        ]
        self.ns_policies: dict[str, list[pb.PolicyID]] = defaultdict(list)
        for i in range(sizes.policies - n_global):
            ns = self.namespaces[i % len(self.namespaces)]
            self.ns_policies[ns].append(
                pb.PolicyID(name=f"knp.default.pol-{i:04d}", namespace=ns, kind="NetworkPolicy")
            )

    # -- IP sets ----------------------------------------------------------------

    def _plan_sets(self) -> list[_SetPlan]:
        n = self.sizes.sets
        special = max(2, n // 50) if n >= 8 else 1
        types = [pb.IPSetUpdate.IP_AND_PORT] * special + [pb.IPSetUpdate.NET] * special
        types += [pb.IPSetUpdate.IP] * (n - len(types))
        # Long-tailed sizes: a few big sets (namespaces, "all pods"), many small.
        weights = [self.rng.paretovariate(1.1) for _ in range(n)]
        total = sum(weights)
        cap = max(1, self.sizes.members // 10)
        sizes = [max(1, min(cap, round(w / total * self.sizes.members))) for w in weights]
        # Spread the rounding error over the sets that have room for it.
        diff = self.sizes.members - sum(sizes)
        for k in range(n * (abs(diff) + 1)):
            if diff == 0:
                break
            j = k % n
            if diff > 0 and sizes[j] < cap:
                sizes[j] += 1
                diff -= 1
            elif diff < 0 and sizes[j] > 1:
                sizes[j] -= 1
                diff += 1
        plans = []
        for i, (kind, size) in enumerate(zip(types, sizes, strict=True)):
            prefix = "n:" if kind == pb.IPSetUpdate.IP_AND_PORT else "s:"
            plans.append(_SetPlan(felix_set_id(prefix, f"set-{i}"), kind, size))
        return plans

    def _member(self, kind: pb.IPSetUpdate.IPSetType) -> str:
        c = self._counter
        self._counter += 1
        v6 = c % 10 == 9  # mostly IPv4, one in ten IPv6
        if kind == pb.IPSetUpdate.IP:
            if v6:
                return f"fd00:20:{(c >> 16) & 0xFFFF:x}::{c & 0xFFFF:x}"
            return f"10.{128 + ((c >> 16) & 63)}.{(c >> 8) & 255}.{c & 255}"
        if kind == pb.IPSetUpdate.IP_AND_PORT:
            port = 8000 + c % 50
            if v6:
                return f"fd00:30:{(c >> 16) & 0xFFFF:x}::{c & 0xFFFF:x},tcp:{port}"
            return f"10.{192 + ((c >> 16) & 63)}.{(c >> 8) & 255}.{c & 255},tcp:{port}"
        if v6:
            return f"2001:db8:{c & 0xFFFF:x}::/48"
        return f"{100 + ((c >> 16) & 15)}.{(c >> 8) & 255}.{c & 255}.0/24"

    def ipset_updates(self) -> list[Message]:
        return [
            pb.IPSetUpdate(
                id=s.id, type=s.type, members=[self._member(s.type) for _ in range(s.size)]
            )
            for s in self.sets
        ]

    # -- policies -------------------------------------------------------------------

    def _pick(self, pool: list[str]) -> str:
        return self.rng.choice(pool) if pool else self.rng.choice(self.ip_sets)

    def _default_rules(self) -> tuple[list[pb.Rule], list[pb.Rule]]:
        tcp, udp = pb.Protocol(name="tcp"), pb.Protocol(name="udp")
        ip, named, r = self.ip_sets, self.port_sets, self.rng
        port = r.randrange(1024, 30000)
        inbound = [
            pb.Rule(
                action="allow",
                protocol=tcp,
                src_ip_set_ids=[self._pick(ip)],
                dst_ports=[pb.PortRange(first=port, last=port)],
            ),
            pb.Rule(
                action="allow",
                protocol=tcp,
                src_ip_set_ids=[self._pick(ip)],
                dst_ports=[pb.PortRange(first=8000, last=8100), pb.PortRange(first=9090)],
            ),
            pb.Rule(
                action="allow",
                protocol=tcp,
                src_ip_set_ids=[self._pick(ip)],
                dst_named_port_ip_set_ids=[self._pick(named)],
            ),
            pb.Rule(
                action="deny",
                protocol=tcp,
                not_src_ip_set_ids=[self._pick(ip)],
                not_dst_ports=[pb.PortRange(first=443)],
            ),
            pb.Rule(
                action="allow",
                protocol=pb.Protocol(name="icmp"),
                icmp_type=8,
                ip_version=pb.IPV4,
                src_ip_set_ids=[self._pick(ip)],
            ),
            pb.Rule(
                action="allow",
                protocol=pb.Protocol(name="icmpv6"),
                icmp_type=128,
                ip_version=pb.IPV6,
            ),
        ]
        outbound = [
            pb.Rule(
                action="allow",
                protocol=udp,
                dst_ip_set_ids=[self._pick(ip)],
                dst_ports=[pb.PortRange(first=53)],
            ),
            pb.Rule(
                action="allow",
                protocol=tcp,
                dst_ip_set_ids=[self._pick(ip)],
                dst_named_port_ip_set_ids=[self._pick(named)],
            ),
            pb.Rule(
                action="deny",
                protocol=tcp,
                not_dst_net=["10.0.0.0/8", "fd00::/8"],
                dst_ports=[pb.PortRange(first=25)],
            ),
            pb.Rule(
                action="allow",
                protocol=tcp,
                dst_ip_set_ids=[self._pick(ip)],
                dst_ports=[pb.PortRange(first=5432), pb.PortRange(first=6379)],
            ),
        ]
        return inbound, outbound

    def _security_rules(self) -> tuple[list[pb.Rule], list[pb.Rule]]:
        tcp = pb.Protocol(name="tcp")
        net = self.net_sets
        inbound = [
            pb.Rule(action="deny", src_ip_set_ids=[self._pick(net)]),
            pb.Rule(action="deny", src_ip_set_ids=[self._pick(net)]),
            pb.Rule(
                action="deny",
                protocol=tcp,
                src_net=["192.0.2.0/24", "2001:db8:ffff::/48"],
                dst_ports=[pb.PortRange(first=22)],
            ),
            pb.Rule(
                action="allow",
                protocol=pb.Protocol(name="icmp"),
                icmp_type=8,
                ip_version=pb.IPV4,
            ),
            pb.Rule(
                action="deny",
                protocol=pb.Protocol(name="icmpv6"),
                not_icmp_type=128,
                ip_version=pb.IPV6,
            ),
            pb.Rule(action="pass"),
        ]
        outbound = [
            pb.Rule(action="deny", dst_ip_set_ids=[self._pick(net)]),
            pb.Rule(
                action="deny",
                protocol=tcp,
                dst_ip_set_ids=[self._pick(net)],
                not_dst_ports=[pb.PortRange(first=80), pb.PortRange(first=443)],
            ),
            pb.Rule(action="deny", not_protocol=pb.Protocol(name="tcp"), dst_net=["0.0.0.0/0"]),
            pb.Rule(action="pass"),
        ]
        return inbound, outbound

    def policy_updates(self) -> list[Message]:
        out: list[Message] = []
        for pid in self.global_policies:
            inbound, outbound = self._security_rules()
            out.append(
                pb.ActivePolicyUpdate(
                    id=pid,
                    policy=pb.Policy(
                        tier="security", inbound_rules=inbound, outbound_rules=outbound
                    ),
                )
            )
        for ns in self.namespaces:
            for pid in self.ns_policies[ns]:
                inbound, outbound = self._default_rules()
                out.append(
                    pb.ActivePolicyUpdate(
                        id=pid,
                        policy=pb.Policy(
                            tier="default",
                            namespace=ns,
                            inbound_rules=inbound,
                            outbound_rules=outbound,
                        ),
                    )
                )
        return out

    def profile_updates(self) -> list[Message]:
        return [update for ns in self.namespaces for update in namespace_profiles(ns)]

    # -- endpoints --------------------------------------------------------------------

    def _tiers(self, index: int, ns: str) -> list[pb.TierInfo]:
        tiers = []
        if self.global_policies:
            g = self.global_policies[index % len(self.global_policies)]
            tiers.append(
                pb.TierInfo(
                    name="security",
                    ingress_policies=[g],
                    egress_policies=[g],
                    default_action="Pass",
                )
            )
        pool = self.ns_policies.get(ns) or [p for ps in self.ns_policies.values() for p in ps]
        if pool:
            # With the security tier: 3-5 policies per direction in all.
            k_in = min(len(pool), self.rng.randint(2, 4))
            k_out = min(len(pool), self.rng.randint(2, 4))
            tiers.append(
                pb.TierInfo(
                    name="default",
                    ingress_policies=self.rng.sample(pool, k_in),
                    egress_policies=self.rng.sample(pool, k_out),
                    default_action="Deny",
                )
            )
        return tiers

    def endpoint_update(self, index: int, like: int | None = None) -> pb.WorkloadEndpointUpdate:
        """Endpoint ``index``; ``like`` another endpoint: a replica of it
        (its namespace and policies, as a Deployment scaled up), named so."""
        ns = self.namespaces[(index if like is None else like) % len(self.namespaces)]
        if like is None:
            tiers = self._tiers_of[index] = self._tiers(index, ns)
        else:
            tiers = self._tiers_of[like]
        name = "pod" if like is None else REPLICA
        return workload_update(
            f"{ns}/{name}-{index:05d}",
            iface_name(index),
            ipv4=[pod_ipv4(index + 1)],
            ipv6=[pod_ipv6(index + 1)],
            profiles=[f"kns.{ns}", f"ksa.{ns}.default"],
            tiers=tiers,
            mac="ee:ee:ee:" + ":".join(f"{(index >> b) & 255:02x}" for b in (16, 8, 0)),
        )

    # -- the whole stream ---------------------------------------------------------------

    def snapshot(self) -> list[Message]:
        """Everything Felix sends a starting node, ending with InSync."""
        msgs: list[Message] = [
            pb.ConfigUpdate(
                config={
                    # "nftables": native nftables (NFTablesMode), else an iptables backend.
                    "IptablesBackend": "nft" if self.backend == "nftables" else self.backend,
                    "NFTablesMode": "Enabled" if self.backend == "nftables" else "Disabled",
                    "Ipv6Support": "true",
                    "InterfacePrefix": "cali",
                    "ChainInsertMode": "insert",
                    "FelixHostname": "bench-node",
                    "DefaultEndpointToHostAction": "ACCEPT",
                    "LogSeverityScreen": "Warning",
                }
            ),
            pb.HostMetadataUpdate(hostname="bench-node", ipv4_addr="192.168.56.11"),
            pb.IPAMPoolUpdate(
                id="10.65.0.0-16", pool=pb.IPAMPool(cidr="10.65.0.0/16", masquerade=True)
            ),
            pb.IPAMPoolUpdate(id="fd00-10-65---48", pool=pb.IPAMPool(cidr="fd00:10:65::/48")),
        ]
        msgs += self.profile_updates()
        msgs += self.ipset_updates()
        msgs += self.policy_updates()
        msgs += [self.endpoint_update(i) for i in range(self.sizes.endpoints)]
        msgs.append(pb.InSync())
        return msgs

    def additions(self, replicas: bool = False) -> list[Message]:
        """One WorkloadEndpointUpdate per spare interface. With ``replicas``
        every other one is a replica of a loaded endpoint (after
        :meth:`snapshot`), the others have policy combinations of their own."""
        first = self.sizes.endpoints
        return [
            self.endpoint_update(i, i - first if replicas and (i - first) % 2 == 0 else None)
            for i in range(first, first + self.sizes.spare)
        ]


@contextlib.contextmanager
def veth_node(
    topo: Topology, role: str, links: int, peers_apart: bool = True
) -> Iterator[tuple[str, float]]:
    """A fresh namespace with ``links`` veth pairs, deleted on the way out.

    Yields the namespace and the seconds the links took. With
    ``peers_apart`` each peer goes to a second namespace, as a pod's eth0
    would, so the driver lists one link per endpoint as on a real node.
    """
    node = topo.new_netns(role)
    pods = topo.new_netns(f"{role}p") if peers_apart else None
    try:
        start = time.perf_counter()
        topo.add_veths(node, [(iface_name(i), peer_name(i)) for i in range(links)], pods)
        yield node, time.perf_counter() - start
    finally:
        topo.delete_netns(node)
        if pods:
            topo.delete_netns(pods)
