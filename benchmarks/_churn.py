"""Felix's churn on a running node: a seeded stream, and the state it leaves.

:class:`Churn` starts from the generated node of :mod:`benchmarks._node`
(endpoints on veths, policies in two tiers, IP sets, namespace profiles)
plus ClusterIP services with their backends (the driver's own
``ServiceBackendsUpdate``) and a VXLAN overlay of remote nodes, and makes
batches of what Felix sends a busy node:

* IP set deltas (pods come and go behind selectors), now and then a whole
  set rewritten;
* endpoint updates (labels changed: other policies), pods replaced (one
  deleted, a new one with a new name and address created on a free
  interface), pods moving to another interface and address;
* policy updates with new rule values each time (new ports), some with a
  new selector: a new IP set first, and an unreferenced one removed after,
  as Felix's calculation graph does; profiles changed the same way;
* services changed, created and deleted, and their backends replaced;
* remote blocks routed and withdrawn, remote nodes leaving and joining
  (host metadata, tunnel endpoint, routes).

The node stays the same size on average: what is created replaces what
goes. Every batch ends with an update of the probe endpoint, whose status
the driver reports only after an apply that took the whole batch (the
soak benchmark's "applied" signal).

It keeps the desired state as it goes: :meth:`Churn.snapshot` is what Felix
would send a freshly started driver at that point (the soak benchmark's
leak check replays it into a clean namespace). Same seed, same stream.
"""

from __future__ import annotations

import ipaddress
import random
from collections import Counter
from dataclasses import dataclass, field

from google.protobuf.message import Message

from benchmarks._node import NodeBuilder, Sizes, iface_name
from dataplane.wire._pb import felixbackend_pb2 as pb
from testbed.node import felix_set_id, pod_ipv4, pod_ipv6, workload_update

__all__ = ["HOSTNAME", "PARENT_ADDRESS", "UPLINK", "Churn", "ChurnSizes"]

HOSTNAME = "bench-node"  # NodeBuilder's FelixHostname
UPLINK = "eth0"  # the node's uplink, holding the VTEP parent address
PARENT_NET = ipaddress.IPv4Network("172.16.0.0/16")
PARENT_ADDRESS = f"{PARENT_NET.network_address + 1}/{PARENT_NET.prefixlen}"
OVERLAY_POOL = ipaddress.IPv4Network("10.66.0.0/16")  # VXLAN; a /24 per node slot
BLOCK_LEN = 26
BLOCKS_PER_SLOT = 4
SERVICE_NET_V4 = ipaddress.IPv4Network("10.96.0.0/16")
SERVICE_NET_V6 = ipaddress.IPv6Network("fd00:96::/112")
PROBE = "soak/probe"

# Relative weights of each kind of change (they add up to 100).
_MIX: tuple[tuple[str, int], ...] = (
    ("set_delta", 38),
    ("set_rewrite", 2),
    ("endpoint_update", 12),
    ("endpoint_churn", 6),
    ("endpoint_move", 4),
    ("policy_update", 12),
    ("profile_update", 1),
    ("backends_update", 9),
    ("service_update", 3),
    ("service_churn", 2),
    ("block_route", 10),
    ("node_churn", 1),
)


@dataclass(frozen=True, slots=True)
class ChurnSizes:
    endpoints: int = 100  # live endpoints (plus the probe)
    spare: int = 40  # free interfaces, for pods created and moved
    policies: int = 20
    sets: int = 50
    members: int = 10_000
    services: int = 50
    remote_nodes: int = 20
    blocks: int = 2  # routed blocks per remote node (on average)

    @property
    def links(self) -> int:
        """veth pairs the node needs: every endpoint, the spares and the probe."""
        return self.endpoints + self.spare + 1


class _Members:
    """A set's members: O(1) add, remove and random pick."""

    def __init__(self, members: list[str]) -> None:
        self.items = list(dict.fromkeys(members))
        self._at = {m: i for i, m in enumerate(self.items)}

    def __len__(self) -> int:
        return len(self.items)

    def add(self, member: str) -> bool:
        if member in self._at:
            return False
        self._at[member] = len(self.items)
        self.items.append(member)
        return True

    def remove(self, member: str) -> None:
        i = self._at.pop(member)
        last = self.items.pop()
        if i < len(self.items):
            self.items[i] = last
            self._at[last] = i


@dataclass(slots=True)
class _Set:
    type: pb.IPSetUpdate.IPSetType
    members: _Members


@dataclass(slots=True)
class _Pod:
    workload_id: str
    namespace: str
    link: int
    number: int  # address number in the pod CIDRs
    ingress: list[pb.PolicyID]
    egress: list[pb.PolicyID]
    security: pb.PolicyID | None


@dataclass(slots=True)
class _Node:
    name: str
    slot: int
    serial: int  # picks the node's MAC: a node that joins again is new hardware
    blocks: set[int] = field(default_factory=set)  # block numbers in the slot's /24


def _policy_key(pid: pb.PolicyID) -> tuple[str, str, str]:
    return (pid.name, pid.namespace, pid.kind)


def _referenced_sets(rules: list[pb.Rule]) -> set[str]:
    out: set[str] = set()
    for r in rules:
        for ids in (
            r.src_ip_set_ids,
            r.not_src_ip_set_ids,
            r.dst_ip_set_ids,
            r.not_dst_ip_set_ids,
            r.src_named_port_ip_set_ids,
            r.dst_named_port_ip_set_ids,
        ):
            out.update(ids)
    return out


class Churn:
    """The node's desired state and the seeded churn that changes it."""

    def __init__(self, sizes: ChurnSizes, backend: str, seed: int = 7) -> None:
        self.sizes = sizes
        self.backend = backend
        self.rng = random.Random(seed)
        builder = NodeBuilder(
            Sizes(sizes.endpoints, sizes.policies, sizes.sets, sizes.members, 0), backend, seed
        )
        self.namespaces = builder.namespaces
        self._counter = 0  # makes every new name, member, port and address distinct
        self._kinds = [kind for kind, _ in _MIX]
        self._weights = [weight for _, weight in _MIX]
        self.config: dict[str, str] = {
            "IptablesBackend": backend,
            "Ipv6Support": "true",
            "InterfacePrefix": "cali",
            "ChainInsertMode": "insert",
            "FelixHostname": HOSTNAME,
            "DefaultEndpointToHostAction": "ACCEPT",
            "LogSeverityScreen": "Warning",
        }
        # IP sets, policies and profiles as the builder made them.
        self.sets: dict[str, _Set] = {}
        for update in builder.ipset_updates():
            assert isinstance(update, pb.IPSetUpdate)
            self.sets[update.id] = _Set(update.type, _Members(list(update.members)))
        self._base_set_count = len(self.sets)
        self.policies: dict[tuple[str, str, str], pb.ActivePolicyUpdate] = {}
        for update in builder.policy_updates():
            assert isinstance(update, pb.ActivePolicyUpdate)
            self.policies[_policy_key(update.id)] = update
        self.global_policies = list(builder.global_policies)
        self.ns_policies = {ns: list(builder.ns_policies.get(ns, [])) for ns in self.namespaces}
        self.profiles: dict[str, pb.ActiveProfileUpdate] = {}
        for profile in builder.profile_updates():
            assert isinstance(profile, pb.ActiveProfileUpdate)
            self.profiles[profile.id.name] = profile
        self.set_refs: Counter[str] = Counter()
        for update in self.policies.values():
            self.set_refs.update(_referenced_sets(self._rules_of(update)))
        # Pods on links 0..endpoints-1; the spares are free; the probe has the last.
        self.pods: dict[str, _Pod] = {}
        self.free_links = list(range(sizes.endpoints, sizes.endpoints + sizes.spare))
        self.used_numbers: set[int] = set()
        for i in range(sizes.endpoints):
            ns = self.namespaces[i % len(self.namespaces)]
            self._add_pod(f"{ns}/pod-{i:05d}", ns, i, i + 1)
        self.probe = self._add_pod(PROBE, self.namespaces[0], sizes.links - 1, 65000)
        self.nodes: dict[str, _Node] = {}
        self.free_slots = list(range(1, OVERLAY_POOL.num_addresses // 256))
        self.free_slots.reverse()
        for _ in range(sizes.remote_nodes):
            self._new_node(sizes.blocks)
        self.services: dict[tuple[str, str], tuple[pb.ServiceUpdate, pb.ServiceBackendsUpdate]] = {}
        self.used_vips: set[int] = set()
        for _ in range(sizes.services):
            self._new_service()
        self._changes = {
            "set_delta": self._set_delta,
            "set_rewrite": self._set_rewrite,
            "endpoint_update": self._endpoint_update,
            "endpoint_churn": self._endpoint_churn,
            "endpoint_move": self._endpoint_move,
            "policy_update": self._policy_update,
            "profile_update": self._profile_update,
            "backends_update": self._backends_update,
            "service_update": self._service_update,
            "service_churn": self._service_churn,
            "block_route": self._block_route,
            "node_churn": self._node_churn,
        }

    # --- the state, as Felix would send it to a new driver -------------------------------

    def snapshot(self) -> list[Message]:
        """Everything a freshly started driver would be sent now, ending with InSync."""
        local = str(PARENT_NET.network_address + 1)
        msgs: list[Message] = [
            pb.ConfigUpdate(config=self.config),
            pb.Encapsulation(vxlan_enabled=True),
            pb.HostMetadataUpdate(hostname=HOSTNAME, ipv4_addr=PARENT_ADDRESS),
            pb.IPAMPoolUpdate(
                id="10.65.0.0-16", pool=pb.IPAMPool(cidr="10.65.0.0/16", masquerade=True)
            ),
            pb.IPAMPoolUpdate(id="fd00-10-65---48", pool=pb.IPAMPool(cidr="fd00:10:65::/48")),
            pb.IPAMPoolUpdate(
                id="10.66.0.0-16",
                pool=pb.IPAMPool(cidr=str(OVERLAY_POOL), masquerade=True, vxlan_mode="Always"),
            ),
            pb.RouteUpdate(
                types=pb.CIDR_INFO, ip_pool_type=pb.VXLAN, dst=str(OVERLAY_POOL), nat_outgoing=True
            ),
            pb.VXLANTunnelEndpointUpdate(
                node=HOSTNAME,
                mac="66:00:00:00:00:01",
                ipv4_addr=str(OVERLAY_POOL.network_address + 1),
                parent_device_ip=local,
            ),
            pb.RouteUpdate(
                types=pb.LOCAL_WORKLOAD,
                ip_pool_type=pb.VXLAN,
                dst=f"{OVERLAY_POOL.network_address}/{BLOCK_LEN}",
                dst_node_name=HOSTNAME,
                dst_node_ip=local,
                nat_outgoing=True,
            ),
        ]
        for node in self.nodes.values():
            msgs += self._node_messages(node)
        msgs += list(self.profiles.values())
        msgs += [
            pb.IPSetUpdate(id=set_id, type=s.type, members=s.members.items)
            for set_id, s in self.sets.items()
        ]
        msgs += list(self.policies.values())
        msgs += [self._pod_update(pod) for pod in [*self.pods.values(), self.probe]]
        msgs += [service for service, _ in self.services.values()]
        msgs += [backends for _, backends in self.services.values()]
        msgs.append(pb.InSync())
        return msgs

    def live_interfaces(self) -> frozenset[str]:
        """The interfaces that hold an endpoint now."""
        return frozenset(iface_name(pod.link) for pod in [*self.pods.values(), self.probe])

    # --- the churn ------------------------------------------------------------------------

    def batch(self, size: int) -> list[Message]:
        """About ``size`` messages of churn (a change is never split), then the probe's update."""
        out: list[Message] = []
        while len(out) < size - 1:
            kind = self.rng.choices(self._kinds, self._weights)[0]
            out += self._changes[kind]()
        out.append(self._pod_update(self.probe))
        return out

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    # IP sets.

    def _member(self, kind: pb.IPSetUpdate.IPSetType) -> str:
        c = self._next()
        if kind == pb.IPSetUpdate.IP:
            if c % 10 == 9:
                return f"fd00:21:{(c >> 16) & 0xFFFF:x}::{c & 0xFFFF:x}"
            return f"10.{160 + ((c >> 16) & 31)}.{(c >> 8) & 255}.{c & 255}"
        if kind == pb.IPSetUpdate.IP_AND_PORT:
            return f"10.{224 + ((c >> 16) & 31)}.{(c >> 8) & 255}.{c & 255},tcp:{8000 + c % 50}"
        return f"{120 + ((c >> 16) & 7)}.{(c >> 8) & 255}.{c & 255}.0/24"

    def _set_delta(self) -> list[Message]:
        set_id = self.rng.choice(list(self.sets))
        s = self.sets[set_id]
        # As many members go as come, so the set keeps its size.
        count = self.rng.randint(1, 3)
        removed = self.rng.sample(s.members.items, count) if len(s.members) > count else []
        for member in removed:
            s.members.remove(member)
        added = [self._member(s.type) for _ in range(count)]
        for member in added:
            s.members.add(member)
        return [pb.IPSetDeltaUpdate(id=set_id, added_members=added, removed_members=removed)]

    def _set_rewrite(self) -> list[Message]:
        set_id = self.rng.choice(list(self.sets))
        s = self.sets[set_id]
        kept = s.members.items[: len(s.members) // 2]
        s.members = _Members(
            kept + [self._member(s.type) for _ in range(len(s.members) - len(kept))]
        )
        return [pb.IPSetUpdate(id=set_id, type=s.type, members=s.members.items)]

    def _new_set(self, kind: pb.IPSetUpdate.IPSetType) -> Message:
        prefix = "n:" if kind == pb.IPSetUpdate.IP_AND_PORT else "s:"
        set_id = felix_set_id(prefix, f"soak-selector-{self._next()}")
        size = max(1, self.sizes.members // max(1, self.sizes.sets))
        self.sets[set_id] = _Set(kind, _Members([self._member(kind) for _ in range(size)]))
        return pb.IPSetUpdate(id=set_id, type=kind, members=self.sets[set_id].members.items)

    def _retire_sets(self) -> list[Message]:
        """Sets no rule references any more go, while there are more than at the start."""
        out: list[Message] = []
        idle = [set_id for set_id in self.sets if self.set_refs[set_id] <= 0]
        self.rng.shuffle(idle)
        while idle and len(self.sets) > self._base_set_count:
            set_id = idle.pop()
            del self.sets[set_id]
            self.set_refs.pop(set_id, None)
            out.append(pb.IPSetRemove(id=set_id))
        return out

    # Policies and profiles.

    @staticmethod
    def _rules_of(update: pb.ActivePolicyUpdate) -> list[pb.Rule]:
        return [*update.policy.inbound_rules, *update.policy.outbound_rules]

    def _pick_set(self, kind: pb.IPSetUpdate.IPSetType) -> str:
        ids = [set_id for set_id, s in self.sets.items() if s.type == kind]
        return self.rng.choice(ids or list(self.sets))

    def _rule(self, fresh: str | None) -> pb.Rule:
        """A rule with a port no rule had before (mod 50,000), on ``fresh`` if given."""
        port = 1024 + self._next() % 50_000
        tcp, udp = pb.Protocol(name="tcp"), pb.Protocol(name="udp")
        ip_set = fresh or self._pick_set(pb.IPSetUpdate.IP)
        roll = self.rng.random()
        if roll < 0.5:
            return pb.Rule(
                action="allow",
                protocol=tcp,
                src_ip_set_ids=[ip_set],
                dst_ports=[pb.PortRange(first=port, last=port)],
            )
        if roll < 0.7:
            return pb.Rule(
                action="allow",
                protocol=udp,
                dst_ip_set_ids=[ip_set],
                dst_ports=[pb.PortRange(first=port, last=port + 1)],
            )
        if roll < 0.85:
            return pb.Rule(
                action="deny",
                protocol=tcp,
                not_src_net=[f"10.{port % 250}.0.0/16"],
                dst_ports=[pb.PortRange(first=port)],
            )
        return pb.Rule(
            action="allow",
            protocol=tcp,
            src_ip_set_ids=[ip_set],
            dst_named_port_ip_set_ids=[self._pick_set(pb.IPSetUpdate.IP_AND_PORT)],
        )

    def _policy_update(self) -> list[Message]:
        key = self.rng.choice(list(self.policies))
        old = self.policies[key]
        out: list[Message] = []
        fresh = None
        if self.rng.random() < 0.2:  # a new selector: its set comes first
            created = self._new_set(pb.IPSetUpdate.IP)
            assert isinstance(created, pb.IPSetUpdate)
            fresh = created.id
            out.append(created)
        inbound = [self._rule(fresh if i == 0 else None) for i in range(self.rng.randint(2, 5))]
        outbound = [self._rule(None) for _ in range(self.rng.randint(1, 3))]
        update = pb.ActivePolicyUpdate(
            id=old.id,
            policy=pb.Policy(
                tier=old.policy.tier,
                namespace=old.policy.namespace,
                inbound_rules=inbound,
                outbound_rules=outbound,
            ),
        )
        self.set_refs.subtract(_referenced_sets(self._rules_of(old)))
        self.set_refs.update(_referenced_sets(self._rules_of(update)))
        self.policies[key] = update
        out.append(update)
        return out + self._retire_sets()

    def _profile_update(self) -> list[Message]:
        ns = self.rng.choice(self.namespaces)
        port = 1024 + self._next() % 50_000
        update = pb.ActiveProfileUpdate(
            id=pb.ProfileID(name=f"ksa.{ns}.default"),
            profile=pb.Profile(
                inbound_rules=[
                    pb.Rule(
                        action="allow",
                        protocol=pb.Protocol(name="tcp"),
                        dst_ports=[pb.PortRange(first=port, last=port)],
                    )
                ]
            ),
        )
        self.profiles[update.id.name] = update
        return [update]

    # Endpoints.

    def _tiers(self, pod: _Pod) -> list[pb.TierInfo]:
        tiers = []
        if pod.security is not None:
            tiers.append(
                pb.TierInfo(
                    name="security",
                    ingress_policies=[pod.security],
                    egress_policies=[pod.security],
                    default_action="Pass",
                )
            )
        if pod.ingress or pod.egress:
            tiers.append(
                pb.TierInfo(
                    name="default",
                    ingress_policies=pod.ingress,
                    egress_policies=pod.egress,
                    default_action="Deny",
                )
            )
        return tiers

    def _pick_policies(self, pod: _Pod) -> None:
        pool = self.ns_policies.get(pod.namespace) or [
            p for ps in self.ns_policies.values() for p in ps
        ]
        pod.ingress = self.rng.sample(pool, min(len(pool), self.rng.randint(2, 4)))
        pod.egress = self.rng.sample(pool, min(len(pool), self.rng.randint(2, 4)))
        pod.security = self.rng.choice(self.global_policies) if self.global_policies else None

    def _pod_update(self, pod: _Pod) -> pb.WorkloadEndpointUpdate:
        ns = pod.namespace
        return workload_update(
            pod.workload_id,
            iface_name(pod.link),
            ipv4=[pod_ipv4(pod.number)],
            ipv6=[pod_ipv6(pod.number)],
            profiles=[f"kns.{ns}", f"ksa.{ns}.default"],
            tiers=self._tiers(pod),
            mac="ee:ee:ee:" + ":".join(f"{(pod.link >> b) & 255:02x}" for b in (16, 8, 0)),
        )

    def _add_pod(self, workload_id: str, ns: str, link: int, number: int) -> _Pod:
        pod = _Pod(workload_id, ns, link, number, [], [], None)
        self._pick_policies(pod)
        self.used_numbers.add(number)
        if workload_id != PROBE:
            self.pods[workload_id] = pod
        return pod

    def _free_number(self) -> int:
        while True:  # addresses 1..60,000 of the pod CIDRs, reused once freed
            number = 1 + self._next() % 60_000
            if number not in self.used_numbers:
                return number

    def _pick_pod(self) -> _Pod:
        return self.pods[self.rng.choice(list(self.pods))]

    def _endpoint_update(self) -> list[Message]:
        pod = self._pick_pod()
        self._pick_policies(pod)
        return [self._pod_update(pod)]

    def _endpoint_churn(self) -> list[Message]:
        """A pod replaced, as a rollout does: one deleted, a new one (new name) created."""
        pod = self.pods.pop(self.rng.choice(list(self.pods)))
        self.free_links.append(pod.link)
        self.used_numbers.discard(pod.number)
        wid = pb.WorkloadEndpointID(
            orchestrator_id="k8s", workload_id=pod.workload_id, endpoint_id="eth0"
        )
        link = self.free_links.pop(self.rng.randrange(len(self.free_links)))
        ns = self.rng.choice(self.namespaces)
        new = self._add_pod(f"{ns}/soak-{self._next():07d}", ns, link, self._free_number())
        return [pb.WorkloadEndpointRemove(id=wid), self._pod_update(new)]

    def _endpoint_move(self) -> list[Message]:
        if not self.free_links:
            return self._endpoint_update()
        pod = self._pick_pod()
        link = self.free_links.pop(self.rng.randrange(len(self.free_links)))
        self.free_links.append(pod.link)
        self.used_numbers.discard(pod.number)
        pod.link, pod.number = link, self._free_number()
        self.used_numbers.add(pod.number)
        return [self._pod_update(pod)]

    # Services.

    def _vip(self) -> int:
        while True:
            offset = 1 + self._next() % 60_000
            if offset not in self.used_vips:
                self.used_vips.add(offset)
                return offset

    def _service(self, ns: str, name: str, offset: int, udp: bool) -> pb.ServiceUpdate:
        ports = [pb.ServicePort(Protocol="UDP" if udp else "TCP", Port=53 if udp else 80, name="p")]
        if not udp and self.rng.random() < 0.5:
            ports.append(pb.ServicePort(Protocol="TCP", Port=8000 + self._next() % 1000, name="q"))
        return pb.ServiceUpdate(
            name=name,
            namespace=ns,
            type="ClusterIP",
            cluster_ips=[
                str(SERVICE_NET_V4.network_address + offset),
                str(SERVICE_NET_V6.network_address + offset),
            ],
            ports=ports,
        )

    def _backends(self, service: pb.ServiceUpdate) -> pb.ServiceBackendsUpdate:
        backends = []
        target = 8080 + self._next() % 20
        for _ in range(self.rng.randint(1, 5)):
            if self.rng.random() < 0.4:
                pod = self._pick_pod()
                addresses, local, node = [pod_ipv4(pod.number)], True, HOSTNAME
            else:
                remote = self.nodes[self.rng.choice(list(self.nodes))]
                addresses, local, node = [self._remote_pod(remote)], False, remote.name
            ports = [
                pb.ServiceBackendPort(name=p.name, protocol=p.Protocol, port=target)
                for p in service.ports
            ]
            backends.append(
                pb.ServiceBackend(addresses=addresses, ports=ports, local=local, node_name=node)
            )
        return pb.ServiceBackendsUpdate(
            name=service.name, namespace=service.namespace, backends=backends
        )

    def _new_service(self) -> list[Message]:
        ns = self.rng.choice(self.namespaces)
        service = self._service(ns, f"svc-{self._next():07d}", self._vip(), self.rng.random() < 0.1)
        backends = self._backends(service)
        self.services[(ns, service.name)] = (service, backends)
        return [service, backends]

    def _backends_update(self) -> list[Message]:
        key = self.rng.choice(list(self.services))
        service, _ = self.services[key]
        backends = self._backends(service)
        self.services[key] = (service, backends)
        return [backends]

    def _service_update(self) -> list[Message]:
        key = self.rng.choice(list(self.services))
        service, backends = self.services[key]
        offset = int(ipaddress.IPv4Address(service.cluster_ips[0])) - int(
            SERVICE_NET_V4.network_address
        )
        changed = self._service(*key, offset, service.ports[0].Protocol == "UDP")
        backends = self._backends(changed)  # the target ports follow the service's
        self.services[key] = (changed, backends)
        return [changed, backends]

    def _service_churn(self) -> list[Message]:
        key = self.rng.choice(list(self.services))
        service, _ = self.services.pop(key)
        offset = int(ipaddress.IPv4Address(service.cluster_ips[0])) - int(
            SERVICE_NET_V4.network_address
        )
        self.used_vips.discard(offset)
        return [pb.ServiceRemove(namespace=key[0], name=key[1]), *self._new_service()]

    # Remote nodes and their routes.

    @staticmethod
    def _slot_net(slot: int) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network((int(OVERLAY_POOL.network_address) + slot * 256, 24))

    def _block(self, node: _Node, block: int) -> str:
        size = 1 << (32 - BLOCK_LEN)
        return f"{self._slot_net(node.slot).network_address + block * size}/{BLOCK_LEN}"

    def _remote_pod(self, node: _Node) -> str:
        block = self.rng.choice(sorted(node.blocks)) if node.blocks else 0
        size = 1 << (32 - BLOCK_LEN)
        base = self._slot_net(node.slot).network_address + block * size
        return str(base + self.rng.randint(2, size - 2))

    def _tunnel(self, node: _Node) -> str:
        return str(self._slot_net(node.slot).network_address + 1)

    def _parent(self, node: _Node) -> str:
        return str(PARENT_NET.network_address + 1 + node.slot)

    def _route(self, node: _Node, dst: str, types: int) -> pb.RouteUpdate:
        return pb.RouteUpdate(
            types=types,  # type: ignore[arg-type]  # a bitmap, though declared an enum
            ip_pool_type=pb.VXLAN,
            dst=dst,
            dst_node_name=node.name,
            dst_node_ip=self._parent(node),
            nat_outgoing=True,
            tunnel_type=pb.TunnelType(vxlan=True),
        )

    def _node_messages(self, node: _Node) -> list[Message]:
        mac = "66:00:" + ":".join(f"{(node.serial >> s) & 255:02x}" for s in (24, 16, 8, 0))
        out: list[Message] = [
            pb.HostMetadataUpdate(
                hostname=node.name, ipv4_addr=f"{self._parent(node)}/{PARENT_NET.prefixlen}"
            ),
            pb.VXLANTunnelEndpointUpdate(
                node=node.name,
                mac=mac,
                ipv4_addr=self._tunnel(node),
                parent_device_ip=self._parent(node),
            ),
            self._route(node, f"{self._tunnel(node)}/32", pb.REMOTE_WORKLOAD | pb.REMOTE_TUNNEL),
        ]
        out += [
            self._route(node, self._block(node, b), pb.REMOTE_WORKLOAD) for b in sorted(node.blocks)
        ]
        return out

    def _new_node(self, blocks: int) -> list[Message]:
        serial = self._next()
        node = _Node(f"node-{serial:07d}", self.free_slots.pop(), serial)
        node.blocks = set(self.rng.sample(range(BLOCKS_PER_SLOT), blocks))
        self.nodes[node.name] = node
        return self._node_messages(node)

    def _block_route(self) -> list[Message]:
        node = self.nodes[self.rng.choice(list(self.nodes))]
        free = [b for b in range(BLOCKS_PER_SLOT) if b not in node.blocks]
        if free and (len(node.blocks) <= 1 or self.rng.random() < 0.5):
            block = self.rng.choice(free)
            node.blocks.add(block)
            return [self._route(node, self._block(node, block), pb.REMOTE_WORKLOAD)]
        block = self.rng.choice(sorted(node.blocks))
        node.blocks.discard(block)
        return [pb.RouteRemove(dst=self._block(node, block))]

    def _node_churn(self) -> list[Message]:
        node = self.nodes.pop(self.rng.choice(list(self.nodes)))
        self.free_slots.insert(0, node.slot)
        out: list[Message] = [pb.RouteRemove(dst=self._block(node, b)) for b in sorted(node.blocks)]
        out += [
            pb.RouteRemove(dst=f"{self._tunnel(node)}/32"),
            pb.VXLANTunnelEndpointRemove(node=node.name),
            pb.HostMetadataRemove(hostname=node.name),
        ]
        return out + self._new_node(self.rng.randint(1, BLOCKS_PER_SLOT))
